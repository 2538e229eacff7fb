"""Supported PaddleX versions, as data: one PEP 440 range per adapter (``setup.cfg`` must agree; a test checks)."""

from __future__ import annotations

SUPPORTED = {
    # 3.0-3.4: BasePredictor.create_static_infer builds PaddleInfer/HPInfer (tested: 3.4.3).
    "paddlex_34": ">=3.0,<3.5",
    # 3.5+: create_predictor builds a runner through the engine registry (tested: 3.7.2).
    "paddlex_35": ">=3.5,<3.8",
}
TESTED = {"paddlex_34": "3.4.3", "paddlex_35": "3.7.2"}
REQUIREMENT = "paddlex>=3.0,<3.8"  # the union of SUPPORTED, as setup.cfg's install_requires says it
SUPPORTED_TEXT = f"{REQUIREMENT} (3.0-3.4: create_static_infer layout; 3.5-3.7: runner/engine layout)"
