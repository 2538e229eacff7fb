"""The docs are tests: every runnable block of README.md and docs/ runs as written (tests/docs/blocks.py says which
blocks run and how a block is marked to skip), page by page in the site's order, from the installed wheel, in a
fresh folder outside the checkout with a fresh HOME. ``scripts/ci-docs.sh`` builds the wheel and its venv and runs
this; without ``DOCS_TEST_VENV`` (that venv) every test here skips.

The blocks of one page run in one bash process, in order (a variable a block exports reaches the next, a file it
writes is there for the next); Python blocks are written to a file and run by the venv's ``python``. Pages share
the work folder and what earlier pages exported, as a reader following the docs in order would.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import List

import pytest
import yaml

from tests.docs.blocks import Block, page_blocks

REPO = Path(__file__).resolve().parents[2]
VENV = os.environ.get("DOCS_TEST_VENV")
PAGE_TIMEOUT = float(os.environ.get("DOCS_TEST_PAGE_TIMEOUT", "900"))
SKIPPED: List[Block] = []  # every block skipped, with its reason (printed by conftest.py at the end)
STARTED = "::docs-block "


def _nav(entries) -> list:
    out = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _nav(value) if isinstance(value, list) else [value]
    return out


def pages() -> List[str]:
    """README.md, then every docs page in the site's order (mkdocs.yml's nav)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    nav = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)["nav"]
    return ["README.md"] + [f"docs/{p}" for p in _nav(nav)]


def page_script(blocks: List[Block], folder: Path) -> str:
    """The bash script that runs a page's runnable blocks in order, announcing each on stderr."""
    env_file = folder / ".docs-env"
    parts = [
        "set -eo pipefail",
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",  # a server a block started in the background
        f'[ -f "{env_file}" ] && source "{env_file}"',
    ]
    for block in blocks:
        parts.append(f"echo '{STARTED}{block.where}' >&2")
        if block.kind == "python":
            script = folder / ".docs-blocks" / f"{Path(block.page).stem}-{block.line}.py"
            parts.append(f"cat > '{script}' <<'DOCS_TEST_EOF'\n{block.code}DOCS_TEST_EOF\npython '{script}'")
        else:
            parts.append(block.code)
    parts.append(f'export -p > "{env_file}"')
    return "\n".join(parts) + "\n"


def _environment(home: Path) -> dict:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PIP_CACHE_DIR", "PIP_FIND_LINKS", "PIP_INDEX_URL", "TERM")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = f"{VENV}/bin:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(HOME=str(home), VIRTUAL_ENV=str(VENV), PYTHONUNBUFFERED="1")
    env.update({k[len("DOCS_TEST_ENV_") :]: v for k, v in os.environ.items() if k.startswith("DOCS_TEST_ENV_")})
    return env


@pytest.fixture(scope="session")
def reader(tmp_path_factory):
    """(work folder, HOME): fresh, outside the checkout, shared by the pages in order."""
    if not VENV:
        pytest.skip("the docs tests run from the built wheel: bash scripts/ci-docs.sh (sets DOCS_TEST_VENV)")
    root = tmp_path_factory.mktemp("reader")
    (root / "home").mkdir()
    (root / "work" / ".docs-blocks").mkdir(parents=True)
    assert REPO not in (root / "work").parents
    return root / "work", root / "home"


def _failed_block(stderr: str) -> str:
    started = re.findall(rf"^{re.escape(STARTED)}(\S+)", stderr, flags=re.M)
    return started[-1] if started else "before the first block"


@pytest.mark.parametrize("page", pages())
def test_the_page_runs_as_written(page, reader):
    work, home = reader
    blocks = [b for b in page_blocks(REPO / page, page) if b.kind]
    SKIPPED.extend(b for b in blocks if b.skip)
    run = [b for b in blocks if not b.skip]
    if not run:
        pytest.skip(f"{page}: no block to run" + (f" ({len(blocks)} marked to skip, listed below)" if blocks else ""))
    proc = subprocess.Popen(
        ["bash", "-c", page_script(run, work)],
        cwd=work,
        env=_environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a timeout ends the page's servers and workers too
    )
    try:
        out, err = proc.communicate(timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{page}: block {_failed_block(err)} still running after {PAGE_TIMEOUT:.0f} s\n{err[-3000:]}")
    if proc.returncode != 0:
        pytest.fail(
            f"{page}: block {_failed_block(err)} failed (exit {proc.returncode}) as written\n"
            f"--- stdout (end)\n{out[-2000:]}\n--- stderr (end)\n{err[-4000:]}"
        )
    missing = [f"{b.where}: {text!r}" for b in run for text in b.expect if text not in out]
    assert not missing, f"{page}: the output lacks what the page says it prints: {missing}\n{out[-3000:]}"
