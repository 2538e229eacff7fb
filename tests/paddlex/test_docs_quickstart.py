"""The quickstart (docs/quickstart.md) and the PaddleOCR page run as they are written, on a machine with no NPU.

The code blocks are taken from the pages: the shell block (its ``pip install`` lines aside: this environment has
those packages and no network is used), then the ``create_pipeline`` script and the PaddleOCR script, on a page
rendered with the demo's lines. The texts must be the demo's, read on the CPU reference runtime.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paddlex_npu.samples import assets

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _blocks(page: str, lang: str) -> list:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


@pytest.fixture(scope="module")
def quickstart_dir(tmp_path_factory, asset_root):
    """Step 1 of the quickstart, run by bash as written (the pip lines left out), in a fresh folder."""
    folder = tmp_path_factory.mktemp("quickstart")
    (shell,) = [b for b in _blocks("quickstart.md", "bash") if "paddlex-npu assets" in b]
    script = "\n".join(line for line in shell.splitlines() if not line.startswith("pip install"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    script += '\necho "ASSETS=$ASSETS"\n'
    out = subprocess.run(["bash", "-e", "-c", script], cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"ASSETS={asset_root}" in out.stdout and "Traceback" not in out.stderr, out.stderr[-3000:]
    assets.render_text_image(assets.DEMO_LINES, folder / "page.png")
    return folder


def _run(code: str, folder: Path, asset_root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PADDLEX_NPU_RUNTIME": "reference", "ASSETS": str(asset_root)}
    cmd = [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=300, env=env)


def test_the_create_pipeline_quickstart_runs_as_written(quickstart_dir, asset_root):
    (code,) = _blocks("quickstart.md", "python")[:1]
    out = _run(code, quickstart_dir, asset_root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert str(list(assets.DEMO_LINES)) in out.stdout, out.stdout
    assert "inference.onnx (dymshape, the ONNX the OM is built from) on npu:0 via reference" in out.stderr


def test_the_paddleocr_page_runs_as_written(quickstart_dir, asset_root):
    (code,) = _blocks("paddleocr.md", "python")[:1]
    out = _run(code, quickstart_dir, asset_root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert str(list(assets.DEMO_LINES)) in out.stdout, out.stdout
