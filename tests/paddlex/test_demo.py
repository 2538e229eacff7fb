"""The demo (``bash scripts/demo.sh`` = ``examples/ocr_npu.py``) reads what is written, spaces included, with
PP-OCRv6 small (PaddleOCR 3.7's default family) on the route, and prints PaddleX's own CPU result and PaddleOCR
3.7's (``enable_hpi=True``) beside it; on PaddleX 3.4, which has no PP-OCRv6, it says so and uses PP-OCRv4 det and
PP-OCRv5 rec."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from paddlex_npu.samples import assets
from tests.paddlex.compat import LEGACY

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ocr_npu.py"
_LINE = re.compile(r"^  (\d\.\d{3})  (.*)$")


def _blocks(stdout: str) -> Dict[str, List[str]]:
    """The texts printed under each heading (``NPU route ...:``, ``PaddleX's own CPU engine ...:``)."""
    blocks: Dict[str, List[str]] = {}
    current = None
    for line in stdout.splitlines():
        m = _LINE.match(line)
        if m and current is not None:
            blocks[current].append(m.group(2))
        elif line.endswith(":") and not line.startswith(" "):
            current = line.split(" (")[0]
            blocks[current] = []
    return blocks


def test_demo_reads_the_lines_exactly_as_rendered(asset_root, tmp_path):
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PADDLEX_NPU_RUNTIME": "reference"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    blocks = _blocks(out.stdout)
    assert blocks["NPU route"] == list(assets.DEMO_LINES), out.stdout
    if LEGACY:
        assert "needs PaddleX 3.5+" in out.stdout
        assert "has no PP-OCRv6_small_det (PP-OCRv6 came with 3.7): using PP-OCRv4_mobile_det" in out.stdout
    else:
        assert "PP-OCRv6_small_det + PP-OCRv6_small_rec" in out.stdout
        assert blocks["PaddleX's own CPU engine"] == list(assets.DEMO_LINES), out.stdout
        assert "texts identical: yes (3 lines)" in out.stdout
        assert blocks["PaddleOCR 3.7"] == list(assets.DEMO_LINES), out.stdout
    assert (tmp_path / "out" / "sample_ocr_res_img.png").is_file()
