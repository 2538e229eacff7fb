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
MAX_PATH_LENGTH = 4096  # path_security_check.MAX_LINUX_ABS_PATH_LENGTH, C++ File.h FULL_PATH_LENGTH_MAX
MAX_NAME_LENGTH = 255  # MAX_LINUX_BASE_NAME_LENGTH, FILE_NAME_LENGTH_MAX: each folder or file name
MAX_PATH_DEPTH = 32  # C++ File.h PATH_DEPTH_MAX: at most 32 "/" in the absolute path (File::IsPathDepthValid)


def _illegal(path: str, why: str, fix: str) -> IllegalPathError:
    return IllegalPathError(f"The path:{path} is illegal. Please check the error log for more detail. ({why}: {fix})")


def check_model_path(path: Union[str, Path], file: Optional[Union[str, Path]] = None) -> None:
    """Refuse what ais_bench refuses for ``path``: characters outside ``[_A-Za-z0-9/.-]`` in its absolute path,
    a symlink, a file owned by neither the user nor one of the user's groups, a group/other write bit, no owner-read
    bit, > 10 GB, and an absolute path over 4096 characters, with a name over 255 or more than 32 ``/`` deep.
    ``file``: the file to examine when ``path`` itself need not exist (the reference runtime runs the ONNX
    beside the OM); its path string is checked too."""
    for name in (path, file):
        if name is None:
            continue
        absolute = os.path.abspath(str(name))
        _check_lengths(str(name), absolute)
        bad = sorted(set(PATH_CHARS.findall(absolute)))
        if bad:
            raise _illegal(
                str(name),
                f"it holds the characters {''.join(bad)!r}; ais_bench takes letters, digits and _ - . / only",
                "move or copy the package to a folder whose absolute path has none of them",
            )
    target = Path(file) if file is not None else Path(path)
    try:
        linked, exists = target.is_symlink(), target.exists()
    except OSError as exc:  # e.g. a path of 4,096 characters: within ais_bench's limit, over Linux's PATH_MAX
        raise _illegal(str(target), f"the system cannot examine it ({exc.strerror})", "use a shorter path") from None
    if linked:
        raise _illegal(
            str(target),
            "it is a symbolic link, which ais_bench does not open",
            f'copy the file instead of linking it (`cp --remove-destination "$(readlink -f {target})" {target}`)',
        )
    if not exists:
        return
    _check_stat(target, target.stat())


def _check_lengths(name: str, absolute: str) -> None:
    """ais_bench's path-string limits: total length, each name's length, and the depth of the absolute path."""
    if len(absolute) > MAX_PATH_LENGTH:
        raise _illegal(
            name, f"its absolute path has {len(absolute)} characters, over {MAX_PATH_LENGTH}", "use a shorter path"
        )
    long = [part for part in absolute.split("/") if len(part) > MAX_NAME_LENGTH]
    if long:
        raise _illegal(
            name,
            f"the name {long[0][:40]!r}... has {len(long[0])} characters, over {MAX_NAME_LENGTH}",
            "rename that folder or file",
        )
    depth = absolute.count("/")
    if depth > MAX_PATH_DEPTH:
        raise _illegal(
            name,
            f"its absolute path is {depth} folders deep, over {MAX_PATH_DEPTH}",
            "move the package to a shallower folder",
        )


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
    if not st.st_mode & stat.S_IRUSR or not os.access(target, os.R_OK):
        raise _illegal(
            str(target),
            f"its owner has no read permission (mode {stat.S_IMODE(st.st_mode):o}; at least 400)",
            f"`chmod u+r {target}`",
        )
    if stat.S_ISREG(st.st_mode) and st.st_size > OM_MODEL_MAX_SIZE:
        raise IllegalPathError(
            f"The file:{target} size is larger than {OM_MODEL_MAX_SIZE}. Please check. (ais_bench loads OMs of at "
            "most 10 GB: rebuild a smaller model, e.g. split it)"
        )
