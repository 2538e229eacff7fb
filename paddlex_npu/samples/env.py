"""The environment the tests, the demo and the benchmarks run PaddleX in: offline, with a local font, and the
CPU reference runtime when this machine has no ais_bench. Call :func:`prepare` before PaddleX is imported."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def prepare(assets_dir: Optional[Path] = None, default_runtime: bool = True) -> str:
    """Set PaddleX's offline settings (no model-source check; the local font, or PaddleX downloads one to draw
    results), the asset cache, and ``PADDLEX_NPU_RUNTIME`` when unset: ``ais_bench`` when it is installed, else
    ``reference``. Returns the runtime. Values already set in the environment win."""
    os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")
    if FONT.is_file():
        os.environ.setdefault("PADDLE_PDX_LOCAL_FONT_FILE_PATH", str(FONT))
    if assets_dir is not None:
        os.environ.setdefault("PADDLEX_NPU_ASSETS", str(assets_dir))
    if default_runtime and "PADDLEX_NPU_RUNTIME" not in os.environ:
        os.environ["PADDLEX_NPU_RUNTIME"] = "ais_bench" if importlib.util.find_spec("ais_bench") else "reference"
    return os.environ.get("PADDLEX_NPU_RUNTIME", "ais_bench")
