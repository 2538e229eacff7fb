"""The sample page and line images that ship with the package (``data/``), written where a user reads them.

``page.png`` holds :data:`paddlex_npu.samples.assets.DEMO_LINES` rendered with DejaVu Sans (the quickstart's page:
the PP-OCRv5 and PP-OCRv6 recognisers read it exactly); ``lines/line-N.png`` holds each line alone (text
recognition alone, ``convert --gears auto --samples-are lines``). Shipped as files, so no font is needed to
make them. Beside them :func:`write_samples` writes ``ocr.yaml``: PaddleX's OCR pipeline over the sample OM
packages (PP-OCRv4 mobile det, PP-OCRv5 mobile rec: the quickstart's).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Optional

import yaml

DATA = Path(__file__).resolve().parent / "data"
PAGE = "page.png"


def sample_files() -> List[Path]:
    """The shipped sample files, relative to :data:`DATA` (the page first)."""
    return [Path(PAGE)] + sorted(p.relative_to(DATA) for p in (DATA / "lines").glob("*.png"))


def write_samples(dest: Path, om_root: Optional[Path] = None) -> List[Path]:
    """Copy the sample page and line images into ``dest`` (made if missing) and, given the folder of the sample
    OM packages, write ``ocr.yaml`` over them; returns the paths written."""
    from .assets import REC_V5, ocr_pipeline_config

    written = []
    if om_root is not None:
        Path(dest).mkdir(parents=True, exist_ok=True)
        config = ocr_pipeline_config(Path(om_root), rec=REC_V5)
        (Path(dest) / "ocr.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        written.append(Path(dest) / "ocr.yaml")
    for rel in sample_files():
        target = Path(dest) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / rel, target)
        written.append(target)
    return written
