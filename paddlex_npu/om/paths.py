"""The model-path checks ais_bench makes before it loads an OM (``interface_check.check_model_path_legality`` ->
``common/path_security_check.py``, and C++ ``File::CheckFileBeforeRead``), in one place: the runner checks them
at load, and the reference runtime refuses the same paths with the same message shape, so a package that loads on
a laptop also loads on the device."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Optional, Union

from ..errors import IllegalPathError

PATH_CHARS = re.compile(r"[^_A-Za-z0-9/.-]")
OM_MODEL_MAX_SIZE = 10 * 1024**3  # ais_bench args_check.OM_MODEL_MAX_SIZE


def _illegal(path: str, why: str, fix: str) -> IllegalPathError:
    return IllegalPathError(f"The path:{path} is illegal. Please check the error log for more detail. ({why}: {fix})")


def check_model_path(path: Union[str, Path], file: Optional[Union[str, Path]] = None) -> None:
    """Refuse what ais_bench refuses for ``path``: characters outside ``[_A-Za-z0-9/.-]`` in its absolute path,
    a symlink, a file owned by neither the user nor one of the user's groups, a group/other write bit, > 10 GB.
    ``file``: the file to examine when ``path`` itself need not exist (the reference runtime runs the ONNX
    beside the OM); its path string is checked too."""
    for name in (path, file):
        if name is None:
            continue
        absolute = os.path.abspath(str(name))
        bad = sorted(set(PATH_CHARS.findall(absolute)))
        if bad:
            raise _illegal(
                str(name),
                f"it holds the characters {''.join(bad)!r}; ais_bench takes letters, digits and _ - . / only",
                "move or copy the package to a folder whose absolute path has none of them",
            )
    target = Path(file) if file is not None else Path(path)
    if target.is_symlink():
        raise _illegal(
            str(target),
            "it is a symbolic link, which ais_bench does not open",
            f'copy the file instead of linking it (`cp --remove-destination "$(readlink -f {target})" {target}`)',
        )
    if not target.exists():
        return
    _check_stat(target, target.stat())


def _check_stat(target: Path, st: os.stat_result) -> None:
    if st.st_uid != os.geteuid() and st.st_gid not in os.getgroups():
        raise _illegal(
            str(target),
            f"it is owned by uid {st.st_uid}, gid {st.st_gid}: neither you nor one of your groups",
            f"copy it as this user (`cp {target} {target}.mine && mv {target}.mine {target}`) or `chown` it",
        )
    if stat.S_IMODE(st.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
        raise _illegal(
            str(target),
            f"it is writable by its group or others (mode {stat.S_IMODE(st.st_mode):o}; at most 755)",
            f"`chmod go-w {target}`",
        )
    if stat.S_ISREG(st.st_mode) and st.st_size > OM_MODEL_MAX_SIZE:
        raise IllegalPathError(
            f"The file:{target} size is larger than {OM_MODEL_MAX_SIZE}. Please check. (ais_bench loads OMs of at "
            "most 10 GB: rebuild a smaller model, e.g. split it)"
        )
