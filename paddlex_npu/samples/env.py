"""The environment the tests, the demo and the benchmarks run PaddleX in: offline, with a local font, and the
CPU reference runtime when this machine has no ais_bench. Call :func:`prepare` before PaddleX is imported."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

from .. import envs

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


def prepare(assets_dir: Optional[Path] = None, default_runtime: bool = True) -> str:
    """Set PaddleX's offline settings (no model-source check; the local font, or PaddleX downloads one to draw
    results), the asset cache, and ``PADDLEX_NPU_RUNTIME`` when unset: ``ais_bench`` when it is installed, else
    ``reference``. Returns the runtime. Values already set in the environment win."""
    os.environ.setdefault(envs.PDX_SOURCE_CHECK.name, "True")
    if FONT.is_file():
        os.environ.setdefault(envs.PDX_FONT.name, str(FONT))
    if assets_dir is not None:
        os.environ.setdefault(envs.ASSETS.name, str(assets_dir))
    if default_runtime and envs.runtime() is None:
        os.environ[envs.RUNTIME.name] = "ais_bench" if importlib.util.find_spec("ais_bench") else "reference"
    return envs.runtime() or "ais_bench"
