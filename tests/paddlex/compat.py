"""What the suite needs to know of the PaddleX generation it runs on, asked of the adapter (no branching here
beyond PaddleX's own CPU APIs, which the tests compare against)."""

from __future__ import annotations

import pytest

from paddlex_npu.paddlex.patcher import adapter, paddlex_version

ADAPTER = adapter()
LEGACY = ADAPTER.name == "paddlex_34"
only_runner_layout = pytest.mark.skipif(
    LEGACY, reason=f"PaddleX {paddlex_version()} has no engine registry (engine='om', onnxruntime engine: 3.5+)"
)


def runner_of(predictor):
    """The static-inference object: ``predictor.runner`` on 3.5+, ``predictor.infer`` on 3.0-3.4."""
    return ADAPTER.static_infer_of(predictor)


def paddle_inference_class():
    """PaddleX's own Paddle Inference wrapper class of this generation."""
    if LEGACY:
        from paddlex.inference.models.common import PaddleInfer

        return PaddleInfer
    from paddlex.inference.models.runners import PaddleStaticRunner

    return PaddleStaticRunner


def own_engine() -> dict:
    """``create_model``'s keywords for PaddleX's own CPU engine: onnxruntime (3.5+), Paddle Inference (3.0-3.4)."""
    if LEGACY:
        from paddlex.inference import PaddlePredictorOption

        return dict(device="cpu", pp_option=PaddlePredictorOption(run_mode="paddle"))
    return dict(device="cpu", engine="onnxruntime")


def cpu_pipeline(config, engine: str):
    """PaddleX's own CPU pipeline: ``paddle_static`` (run_mode paddle) or ``onnxruntime`` (3.5+)."""
    from paddlex import create_pipeline
    from paddlex.inference import PaddlePredictorOption

    if LEGACY:
        assert engine == "paddle_static"
        return create_pipeline(config=config, device="cpu", pp_option=PaddlePredictorOption(run_mode="paddle"))
    kw = {"engine_config": {"run_mode": "paddle"}} if engine == "paddle_static" else {}
    return create_pipeline(config=config, device="cpu", engine=engine, **kw)


def ocr_modes_and_texts(root, images):
    """The OCR pipeline on the OM packages under ``root`` (NPU route, reference runtime): the (det, rec) runner
    modes and the results on the English and Chinese images."""
    from paddlex import create_pipeline

    from paddlex_npu.samples import assets
    from tests.helpers import NPU_HPI, run_ocr

    p = create_pipeline(config=assets.ocr_pipeline_config(root), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        modes = (runner_of(p.text_det_model).mode, runner_of(p.text_rec_model).mode)
        return modes, run_ocr(p, {"english": images["english"], "chinese": images["chinese"]})
    finally:
        p.close()
