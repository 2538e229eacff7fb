"""Apply, check and revert the fork patches in ``patches/`` on an installed PaddleX (``paddlex-npu patch``).

Exactly the named package folder is patched, whatever its name: the patches' ``paddlex/...`` paths are mapped
onto it.

A small unified-diff engine: context must match exactly (hunks may move, never fuzz), every file's new text is
computed before anything is written, so a hunk that does not apply leaves every file untouched; reverting
applies the same diff backwards and restores the files byte for byte.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import PaddlexNpuError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(PaddlexNpuError, RuntimeError):
    """A fork patch cannot be found, checked or applied."""


@dataclass
class Hunk:
    header: str
    old_start: int
    lines: List[str] = field(default_factory=list)  # each with its ' ', '-' or '+' prefix, no newline

    def side(self, reverse: bool) -> Tuple[List[str], List[str]]:
        """(lines to find, lines to put) for applying forwards or backwards."""
        old = [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]
        new = [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]
        return (new, old) if reverse else (old, new)


@dataclass
class FilePatch:
    path: str  # relative to the folder that holds the ``paddlex`` package: ``paddlex/inference/...``
    hunks: List[Hunk] = field(default_factory=list)

    def target(self, package_dir: Path) -> Path:
        """The file this patch changes in the PaddleX package folder ``package_dir`` (whatever its name)."""
        top, _, rest = self.path.partition("/")
        if top != "paddlex" or not rest or ".." in Path(rest).parts:
            raise PatchError(f"the patch names {self.path!r}, a file outside the paddlex package: the patch is broken")
        return package_dir / rest


def parse(text: str) -> List[FilePatch]:
    files: List[FilePatch] = []
    for line in text.splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            files.append(FilePatch(path[2:] if path.startswith("b/") else path))
        elif line.startswith("--- "):
            continue
        elif (m := _HUNK.match(line)) and files:
            files[-1].hunks.append(Hunk(line, int(m.group(1))))
        elif files and files[-1].hunks and line[:1] in (" ", "-", "+"):
            files[-1].hunks[-1].lines.append(line)
        elif files and files[-1].hunks and line == "":
            files[-1].hunks[-1].lines.append(" ")
    if not files or not all(f.hunks for f in files):
        raise PatchError("not a unified diff with hunks")
    return files


def _apply_file(text: str, fp: FilePatch, reverse: bool) -> str:
    lines = text.splitlines(keepends=True)
    bare = [ln.rstrip("\r\n") for ln in lines]
    offset = 0
    for hunk in fp.hunks:
        find, put = hunk.side(reverse)
        start = max(0, hunk.old_start - 1 + offset)
        at = _locate(bare, find, start)
        if at is None:
            raise PatchError(f"{fp.path}: hunk {hunk.header} does not apply: {_first_mismatch(bare, find, start)}")
        eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        lines[at : at + len(find)] = [p + eol for p in put]
        bare[at : at + len(find)] = put
        offset += len(put) - len(find)
    return "".join(lines)


def _locate(bare: List[str], find: List[str], start: int) -> Optional[int]:
    n = len(find)
    order = sorted(range(0, len(bare) - n + 1), key=lambda i: abs(i - start))
    return next((i for i in order if bare[i : i + n] == find), None)


def _first_mismatch(bare: List[str], find: List[str], start: int) -> str:
    for k, expected in enumerate(find):
        got = bare[start + k] if start + k < len(bare) else "<end of file>"
        if got != expected:
            return f"line {start + k + 1} is {got!r}, expected {expected!r}"
    return "context not found"


def _matched_lines(package_dir: Path, files: List[FilePatch], reverse: bool) -> int:
    """How many lines of the hunks' text to find are where the patch puts them (a located hunk counts whole):
    tells a patched file (reverse side matches best) from a pristine one when neither side applies."""
    score = 0
    for fp in files:
        path = fp.target(package_dir)
        bare = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        for hunk in fp.hunks:
            find, _ = hunk.side(reverse)
            start = max(0, hunk.old_start - 1)
            if _locate(bare, find, start) is not None:
                score += len(find)
            else:
                score += sum(1 for k, want in enumerate(find) if start + k < len(bare) and bare[start + k] == want)
    return score


def _compute(package_dir: Path, files: List[FilePatch], reverse: bool) -> Dict[Path, bytes]:
    out = {}
    for fp in files:
        path = fp.target(package_dir)
        if not path.is_file():
            raise PatchError(f"{path} does not exist: is {package_dir} a PaddleX package folder?")
        out[path] = _apply_file(path.read_bytes().decode("utf-8"), fp, reverse).encode("utf-8")
    return out


def patches_dir() -> Path:
    """``patches/`` of the source tree, or the copy installed as data files."""
    for candidate in (Path(__file__).resolve().parents[2] / "patches", Path(sys.prefix) / "share/paddlex-npu/patches"):
        if candidate.is_dir():
            return candidate
    raise PatchError("the patches/ folder of paddlex-npu is missing from this installation")


def available_versions() -> List[str]:
    return sorted(p.name[len("paddlex-") : -len(".patch")] for p in patches_dir().glob("paddlex-*.patch"))


def find_paddlex_dir() -> Path:
    spec = importlib.util.find_spec("paddlex")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("PaddleX is not installed here: install it or pass --paddlex-dir")
    return Path(list(spec.submodule_search_locations)[0])


_VERSION_LITERAL = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.M)


def _own_version(paddlex_dir: Path) -> Optional[str]:
    """The version a PaddleX package folder states in its own files: ``.version``, or a ``__version__`` literal."""
    dot = paddlex_dir / ".version"
    if dot.is_file() and dot.read_text(encoding="utf-8", errors="replace").strip():
        return dot.read_text(encoding="utf-8", errors="replace").strip().splitlines()[0].strip()
    for name in ("version.py", "__init__.py"):
        path = paddlex_dir / name
        m = _VERSION_LITERAL.search(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else None
        if m:
            return m.group(1)
    return None


def detect_version(paddlex_dir: Path) -> str:
    """The version of the PaddleX package in ``paddlex_dir``: from its own files, else (an installed ``paddlex``
    folder in site-packages only) from the ``.dist-info`` beside it."""
    own = _own_version(paddlex_dir)
    if own:
        return own
    installed = paddlex_dir.name == "paddlex" and paddlex_dir.parent.name in ("site-packages", "dist-packages")
    found = []
    for meta in paddlex_dir.parent.glob("paddlex-*.dist-info/METADATA") if installed else []:
        m = re.search(r"^Version: (\S+)$", meta.read_text(encoding="utf-8", errors="replace"), re.M)
        if m:
            found.append(m.group(1))
    if len(found) != 1:
        where = f"{len(found)} paddlex .dist-info found beside it" if installed else "not an installed paddlex"
        raise PatchError(
            f"cannot tell the PaddleX version of {paddlex_dir}: it states none in .version, version.py or "
            f"__init__.py ({where}). Pass --paddlex-version"
        )
    return found[0]


@dataclass
class PatchPlan:
    paddlex_dir: Path
    version: str
    patch_file: Path
    files: List[FilePatch]

    def state(self) -> str:
        """``clean`` (applies), ``applied`` (reverts), or a :class:`PatchError` naming the hunk that fails: the
        reverse hunk's mismatch when the files look patched (e.g. a patched line edited by hand), else the
        forward hunk's."""
        try:
            _compute(self.paddlex_dir, self.files, reverse=False)
            return "clean"
        except PatchError as forward:
            try:
                _compute(self.paddlex_dir, self.files, reverse=True)
                return "applied"
            except PatchError as backward:
                patched = _matched_lines(self.paddlex_dir, self.files, True) > _matched_lines(
                    self.paddlex_dir, self.files, False
                )
                if patched:
                    raise PatchError(f"the patch is applied but was edited since: {backward}") from None
                raise forward from None

    def run(self, reverse: bool) -> List[Path]:
        """Apply (or revert) all files, or none."""
        new = _compute(self.paddlex_dir, self.files, reverse)
        for path, data in new.items():
            tmp = path.with_name(path.name + ".paddlex-npu.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))  # keep the file's mode (tmp has the umask's)
            os.replace(tmp, path)
        return list(new)


def load_patch(paddlex_dir: Optional[Path] = None, version: Optional[str] = None) -> PatchPlan:
    """The fork patch for the PaddleX in ``paddlex_dir`` (default: the installed one)."""
    pdir = (Path(paddlex_dir) if paddlex_dir else find_paddlex_dir()).resolve()
    if not (pdir / "__init__.py").is_file():
        raise PatchError(f"{pdir} is not a PaddleX package folder (no __init__.py)")
    version = version or detect_version(pdir)
    patch_file = patches_dir() / f"paddlex-{version}.patch"
    if not patch_file.is_file():
        raise PatchError(
            f"no fork patch for PaddleX {version}; patches exist for {', '.join(available_versions())}. "
            "Install one of those versions, or use `import paddlex_npu`, which supports more"
        )
    return PatchPlan(pdir, version, patch_file, parse(patch_file.read_text(encoding="utf-8")))


def run_action(action: str, paddlex_dir: Optional[Path] = None, version: Optional[str] = None) -> List[str]:
    """``check``, ``apply`` or ``revert`` the fork patch; returns what happened, a line each."""
    p = load_patch(paddlex_dir, version)
    state = p.state()
    where = f"PaddleX {p.version} at {p.paddlex_dir}"
    if action == "check":
        return [f"{where}: {'patch applies cleanly' if state == 'clean' else 'patch is applied'} ({p.patch_file.name})"]
    if (action == "apply") == (state == "applied"):
        return [f"{where}: patch already {'applied' if state == 'applied' else 'reverted'}; nothing to do"]
    verb = "patched" if action == "apply" else "restored"
    return [f"{verb} {path}" for path in p.run(reverse=action == "revert")]
