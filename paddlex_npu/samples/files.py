"""The sample page and line images that ship with the package (``data/``), written where a user reads them.

``page.png`` holds :data:`paddlex_npu.samples.assets.DEMO_LINES` rendered with DejaVu Sans (the quickstart's page:
the PP-OCRv5 and PP-OCRv6 recognisers read it exactly); ``lines/line-N.png`` holds each line alone (text
recognition alone, ``convert --gears auto --samples-are lines``). Shipped as files, so no font is needed to
make them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List

DATA = Path(__file__).resolve().parent / "data"
PAGE = "page.png"


def sample_files() -> List[Path]:
    """The shipped sample files, relative to :data:`DATA` (the page first)."""
    return [Path(PAGE)] + sorted(p.relative_to(DATA) for p in (DATA / "lines").glob("*.png"))


def write_samples(dest: Path) -> List[Path]:
    """Copy the sample page and line images into ``dest`` (made if missing); returns the paths written."""
    written = []
    for rel in sample_files():
        target = Path(dest) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / rel, target)
        written.append(target)
    return written
