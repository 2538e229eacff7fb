"""Supported PaddleX versions, as data: one PEP 440 range per adapter module in ``paddlex_npu.adapters``."""

from __future__ import annotations

SUPPORTED = {
    # 3.0-3.4: BasePredictor.create_static_infer builds PaddleInfer/HPInfer (tested: 3.4.3).
    "paddlex_34": ">=3.0,<3.5",
    # 3.5+: create_predictor builds a runner through the engine registry (tested: 3.7.2).
    "paddlex_35": ">=3.5,<3.8",
}
TESTED = {"paddlex_34": "3.4.3", "paddlex_35": "3.7.2"}
SUPPORTED_TEXT = "paddlex>=3.0,<3.8 (3.0-3.4: create_static_infer layout; 3.5-3.7: runner/engine layout)"
