"""Every repository path the README and the docs name (``paddlex_npu/build/p2o_worker.py``, ``scripts/setup.sh``,
``tests/cli/``, ...) exists, so a page cannot send a reader to a file that moved."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("paddlex_npu", "tests", "scripts", "requirements", "examples", "benchmarks", "deploy", "patches", "docs")
# a path: one of the repository's top folders, then segments; not part of a longer path or a URL
PATH = re.compile(r"(?<![\w/.~$<>-])((?:{})/[\w.*/-]*[\w*/])".format("|".join(TOP)))


# paths a script writes and the integrator commits later: {path: why it may be missing now}
WRITTEN_LATER = {"tests/data/ort-output-shapes/": "filled by scripts/ort-sweep-data.sh (the ORT sweep's data)"}


def named_paths(text: str) -> list:
    """The repository paths ``text`` names (globs kept; ``::test`` suffixes and trailing dots dropped; ``kubectl``
    lines name cluster objects such as ``deploy/NAME``, not files)."""
    lines = "\n".join(line for line in text.splitlines() if "kubectl " not in line)
    return [m.group(1).split("::")[0].rstrip(".") for m in PATH.finditer(lines)]


def _pages() -> list:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _exists(path: str) -> bool:
    return any(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()


def test_every_repository_path_named_in_the_docs_exists():
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in _pages()
        for path in named_paths(page.read_text(encoding="utf-8"))
        if not _exists(path) and path not in WRITTEN_LATER
    ]
    assert not missing, "paths named in the docs that the repository lacks:\n" + "\n".join(missing)


def test_the_path_finder_sees_paths_and_ignores_urls():
    text = "run `scripts/setup.sh`, see tests/cli/test_cli.py::test_x and https://x.org/docs/a.md or ~/docs/b."
    assert named_paths(text) == ["scripts/setup.sh", "tests/cli/test_cli.py"]
    assert not _exists("paddlex_npu/tools/p2o_worker.py") and _exists("paddlex_npu/build/p2o_worker.py")
