"""Apply, check and revert the fork patches in ``patches/`` on an installed PaddleX (``paddlex-npu patch``).

Exactly the named package folder is patched, whatever its name: the patches' ``paddlex/...`` paths are mapped
onto it.

A small unified-diff engine: context must match exactly (hunks may move, never fuzz), every file's new text is
computed before anything is written, so a hunk that does not apply leaves every file untouched; reverting
applies the same diff backwards and restores the files byte for byte. Hunks are located in the file as it is on
disk (the old side's line numbers for applying, the new side's for reverting), so a hunk that does not apply is
named by the line of that file that differs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import MismatchError, PatchError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    header: str
    old_start: int
    new_start: int
    lines: List[str] = field(default_factory=list)  # each with its ' ', '-' or '+' prefix, no newline

    def side(self, reverse: bool) -> Tuple[List[str], List[str]]:
        """(lines to find, lines to put) for applying forwards or backwards."""
        old = [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]
        new = [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]
        return (new, old) if reverse else (old, new)

    def start(self, reverse: bool) -> int:
        """Where the lines to find start (0-based) in the file they are found in: the old side's start in a
        pristine file, the new side's in a patched one."""
        return max(0, (self.new_start if reverse else self.old_start) - 1)


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
            files[-1].hunks.append(Hunk(line, int(m.group(1)), int(m.group(3))))
        elif files and files[-1].hunks and line[:1] in (" ", "-", "+"):
            files[-1].hunks[-1].lines.append(line)
        elif files and files[-1].hunks and line == "":
            files[-1].hunks[-1].lines.append(" ")
    if not files or not all(f.hunks for f in files):
        raise PatchError("not a unified diff with hunks")
    return files


def _apply_file(text: str, fp: FilePatch, reverse: bool, path: Path, first_file: bool = False) -> str:
    """The file's text with every hunk applied (or reverted). Hunks are located in the file as it is, in order,
    so a hunk that does not apply is named by the line numbers of the file on disk."""
    lines = text.splitlines(keepends=True)
    bare = [ln.rstrip("\r\n") for ln in lines]
    eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    spans: List[Tuple[int, int, List[str]]] = []
    drift, lo = 0, 0  # how far the previous hunk moved; where the next may start
    for k, hunk in enumerate(fp.hunks):
        find, put = hunk.side(reverse)
        nominal = hunk.start(reverse)
        at = _locate(bare, find, nominal + drift, lo)
        if at is None:
            line, why = _first_mismatch(bare, find, nominal + drift, lo)
            raise MismatchError(f"{path}: hunk {hunk.header} does not apply: {why}", path, first_file and k == 0, line)
        spans.append((at, len(find), put))
        drift, lo = at - nominal, at + len(find)
    for at, n, put in reversed(spans):
        lines[at : at + n] = [p + eol for p in put]
    return "".join(lines)


def _locate(bare: List[str], find: List[str], start: int, lo: int = 0) -> Optional[int]:
    """Where ``find`` occurs exactly at or after ``lo``, nearest ``start``."""
    n = len(find)
    order = sorted(range(lo, len(bare) - n + 1), key=lambda i: abs(i - start))
    return next((i for i in order if bare[i : i + n] == find), None)


def _alignment(bare: List[str], find: List[str], start: int, lo: int = 0) -> Tuple[int, int]:
    """(where, how many non-blank lines match) for the placement of ``find`` at or after ``lo`` that matches the
    most non-blank lines, nearest ``start`` among equals: where an edited hunk is."""
    best = (max(start, lo), -1)
    for i in range(lo, max(lo, len(bare) - len(find)) + 1):
        count = sum(1 for k, want in enumerate(find) if want.strip() and i + k < len(bare) and bare[i + k] == want)
        if count > best[1] or (count == best[1] and abs(i - start) < abs(best[0] - start)):
            best = (i, count)
    return best


def _first_mismatch(bare: List[str], find: List[str], start: int, lo: int = 0) -> Tuple[Optional[int], str]:
    """(1-based line, description) of the first line that differs where the hunk matches best (its place in
    the patch when no more than half of its non-blank lines match anywhere)."""
    at, count = _alignment(bare, find, start, lo)
    if count * 2 <= sum(1 for want in find if want.strip()):
        at = max(start, lo)
    wrong = [k for k, want in enumerate(find) if (bare[at + k] if at + k < len(bare) else None) != want]
    if not wrong:
        return None, "context not found"
    k = wrong[0]
    got = bare[at + k] if at + k < len(bare) else "<end of file>"
    more = f" ({len(wrong) - 1} more line{'s' if len(wrong) > 2 else ''} of the hunk differ)" if len(wrong) > 1 else ""
    return at + k + 1, f"line {at + k + 1} is {got!r}, expected {find[k]!r}{more}"


def _changed_lines_present(package_dir: Path, files: List[FilePatch], reverse: bool) -> int:
    """How many of the lines the patch removes (``reverse``: adds) are in the files: tells a patched file from
    a pristine one (or another version's) when neither side applies."""
    count = 0
    for fp in files:
        path = fp.target(package_dir)
        present = set(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else set()
        for hunk in fp.hunks:
            find, put = hunk.side(reverse)
            count += sum(1 for ln in set(find) - set(put) if ln.strip() and ln in present)
    return count


def _compute(package_dir: Path, files: List[FilePatch], reverse: bool) -> Dict[Path, bytes]:
    out = {}
    for i, fp in enumerate(files):
        path = fp.target(package_dir)
        if not path.is_file():
            raise MismatchError(f"{path} does not exist", path, first=True)
        out[path] = _apply_file(path.read_bytes().decode("utf-8"), fp, reverse, path, i == 0).encode("utf-8")
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
_GIT_DESCRIBE = re.compile(r"^(v?(\d+\.\d+\.\d+))-(\d+)-g[0-9a-f]+$")
_REINSTALL = "pip install --force-reinstall --no-deps paddlex=={v}"


def _placeholder(version: str) -> bool:
    """PaddleX's fallback (``0.0.0``) and the ``.version`` of its source trees before a build (``0.0.0.dev0``)."""
    return version.startswith("0.0.0")


def _own_version(paddlex_dir: Path) -> Optional[Tuple[str, str]]:
    """(version, where from) as a PaddleX package folder states it in its own files: ``.version`` (PaddleX up to
    3.0 reads its version there), or a ``__version__`` literal."""
    dot = paddlex_dir / ".version"
    text = dot.read_text(encoding="utf-8", errors="replace").strip() if dot.is_file() else ""
    if text and not _placeholder(text.splitlines()[0].strip()):
        return text.splitlines()[0].strip(), "read from its .version"
    for name in ("version.py", "__init__.py"):
        path = paddlex_dir / name
        m = _VERSION_LITERAL.search(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else None
        if m and not _placeholder(m.group(1)):
            return m.group(1), f"read from __version__ in its {name}"
    return None


def _dist_info_versions(site: Path) -> List[str]:
    found = []
    for meta in site.glob("paddlex-*.dist-info/METADATA"):
        m = re.search(r"^Version: (\S+)$", meta.read_text(encoding="utf-8", errors="replace"), re.M)
        if m:
            found.append(m.group(1))
    return found


def _source_tree_version(root: Path) -> Tuple[Optional[Tuple[str, str]], str]:
    """((version, where from) or None, what was found) for the source tree ``root`` holding a ``paddlex``
    package, as PaddleX 3.x's ``get_pdx_version`` computes it there with setuptools_scm: the ``PKG-INFO`` of an
    unpacked sdist, or the git tag ``vX.Y.Z`` of a checkout (the nearest one: a fork's own commits on top of a
    release keep its version)."""
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        text = pkg_info.read_text(encoding="utf-8", errors="replace")
        name, version = (re.search(rf"^{key}: (\S+)$", text, re.M) for key in ("Name", "Version"))
        if name and name.group(1).lower() == "paddlex" and version:
            return (version.group(1), f"read from {pkg_info}"), ""
    if not (root / ".git").exists():
        return None, f"{root} has no .git or PKG-INFO"
    try:
        run = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags", "--long", "--match", "v[0-9]*.[0-9]*.[0-9]*"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"git describe in {root} failed: {exc}"
    m = _GIT_DESCRIBE.match(run.stdout.strip())
    if run.returncode != 0 or not m:
        why = (run.stderr.strip().splitlines() or [run.stdout.strip() or "no output"])[-1]
        return None, f"git describe in {root} found no vX.Y.Z tag ({why})"
    ahead = int(m.group(3))
    after = f" + {ahead} commit{'s' if ahead > 1 else ''}" if ahead else ""
    return (m.group(2), f"from git tag {m.group(1)}{after}"), ""


def detect_version(paddlex_dir: Path) -> Tuple[str, str]:
    """(version, where from) of the PaddleX package in ``paddlex_dir``, from files in and beside it: its own
    ``.version`` or ``__version__``; else, as PaddleX 3.x computes it, the ``.dist-info`` beside an installed
    ``site-packages/paddlex``, or the sdist's ``PKG-INFO`` / the git tags of the source tree holding a
    ``paddlex`` folder. A copied package folder has none of these."""
    own = _own_version(paddlex_dir)
    if own:
        return own
    tried = []
    if paddlex_dir.name != "paddlex":
        tried.append("it is not named paddlex, so no .dist-info, PKG-INFO or git tags beside it are read")
    elif paddlex_dir.parent.name in ("site-packages", "dist-packages"):
        found = _dist_info_versions(paddlex_dir.parent)
        if len(found) == 1:
            return found[0], "read from the .dist-info beside it"
        tried.append(f"it is in {paddlex_dir.parent.name} with {len(found)} paddlex .dist-info beside it, not 1")
    else:
        version, why = _source_tree_version(paddlex_dir.parent)
        if version:
            return version
        tried.append(f"it is not in site-packages (no .dist-info read), and {why}")
    raise PatchError(
        f"cannot tell the PaddleX version of {paddlex_dir}: PaddleX 3.x takes it from its installed .dist-info or "
        f"the git tags of its source tree; this folder has no .version or __version__ literal; {tried[0]}. "
        f"Pass --paddlex-version (e.g. --paddlex-version {max(available_versions(), key=_version_key)})"
    )


def _version_key(version: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _looks_like_paddlex(folder: Path) -> bool:
    return (folder / "__init__.py").is_file() and (folder / "inference" / "__init__.py").is_file()


def check_package_dir(pdir: Path) -> None:
    """Refuse what is not a PaddleX package folder (the folder holding ``__init__.py`` and ``inference/``)."""
    example = "e.g. .../site-packages/paddlex or <your PaddleX checkout>/paddlex"
    if not pdir.exists():
        raise PatchError(f"{pdir} does not exist: --paddlex-dir must be the PaddleX package folder ({example})")
    if not pdir.is_dir():
        mean = f"; did you mean {pdir.parent}?" if _looks_like_paddlex(pdir.parent) else ""
        raise PatchError(
            f"{pdir} is a file: --paddlex-dir must be the PaddleX package folder, not a file in it ({example}){mean}"
        )
    if _looks_like_paddlex(pdir):
        return
    lacks = "__init__.py" if not (pdir / "__init__.py").is_file() else "inference/ subpackage"
    mean = f"; did you mean {pdir / 'paddlex'}?" if _looks_like_paddlex(pdir / "paddlex") else ""
    raise PatchError(
        f"{pdir} is not a PaddleX package folder (no {lacks}): --paddlex-dir must be the paddlex package folder "
        f"itself ({example}){mean}"
    )


@dataclass
class PatchPlan:
    paddlex_dir: Path
    version: str
    patch_file: Path
    files: List[FilePatch]
    version_source: str = "given by --paddlex-version"

    def state(self) -> str:
        """``clean`` (applies), ``applied`` (reverts), or a :class:`PatchError` naming the hunk that fails: the
        reverse hunk's mismatch when the files look patched (e.g. a patched line edited by hand), else the
        forward hunk's; each says what to do."""
        try:
            _compute(self.paddlex_dir, self.files, reverse=False)
            return "clean"
        except MismatchError as forward:
            try:
                _compute(self.paddlex_dir, self.files, reverse=True)
                return "applied"
            except MismatchError as backward:
                patched = _changed_lines_present(self.paddlex_dir, self.files, True) > _changed_lines_present(
                    self.paddlex_dir, self.files, False
                )
                if patched:
                    raise PatchError(
                        f"the patch is applied but was edited since: {backward}. {self._repair(backward)}"
                    ) from None
                if forward.first:
                    raise PatchError(
                        f"{forward}. Is this folder PaddleX {self.version} ({self.version_source})? "
                        "(check --paddlex-version)"
                    ) from None
                differs = f"it differs from PaddleX {self.version}"
                raise PatchError(f"{forward}: {differs}. {self._repair(forward)}") from None

    def _repair(self, err: MismatchError) -> str:
        where = f"line {err.line} of {err.path}" if err.line else str(err.path)
        return (
            f"To fix: undo the hand edit at {where} (back to the expected text), or reinstall PaddleX "
            f"{self.version} (`{_REINSTALL.format(v=self.version)}`; in a fork: restore the file from git) and "
            "run `paddlex-npu patch --apply` again"
        )

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
    check_package_dir(pdir)
    version, source = (version, "given by --paddlex-version") if version else detect_version(pdir)
    patch_file = patches_dir() / f"paddlex-{version}.patch"
    if not patch_file.is_file():
        raise PatchError(
            f"no fork patch for PaddleX {version} ({source}); patches exist for {', '.join(available_versions())}. "
            "Install one of those versions, or use `import paddlex_npu`, which supports more"
        )
    return PatchPlan(pdir, version, patch_file, parse(patch_file.read_text(encoding="utf-8")), source)


def run_action(action: str, paddlex_dir: Optional[Path] = None, version: Optional[str] = None) -> List[str]:
    """``check``, ``apply`` or ``revert`` the fork patch; returns what happened, a line each."""
    p = load_patch(paddlex_dir, version)
    state = p.state()
    guessed = f" ({p.version_source})" if p.version_source.startswith("from git") else ""
    where = f"PaddleX {p.version}{guessed} at {p.paddlex_dir}"
    if action == "check":
        return [f"{where}: {'patch applies cleanly' if state == 'clean' else 'patch is applied'} ({p.patch_file.name})"]
    if (action == "apply") == (state == "applied"):
        return [f"{where}: patch already {'applied' if state == 'applied' else 'reverted'}; nothing to do"]
    verb = "patched" if action == "apply" else "restored"
    return [where] * bool(guessed) + [f"{verb} {path}" for path in p.run(reverse=action == "revert")]
