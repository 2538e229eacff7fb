"""install()/uninstall() are idempotent and restore PaddleX exactly; other paths reach PaddleX untouched."""

from __future__ import annotations

import logging

import pytest
from conftest import run_ocr

import paddlex_npu
from paddlex_npu import assets


def _snapshot():
    import paddlex
    import paddlex.inference as pdx_inference
    from paddlex.inference import models as pdx_models
    from paddlex.inference.models.bindings import default_registry
    from paddlex.inference.models.engines import InferenceEngine

    return {
        "paddlex.create_predictor": paddlex.create_predictor,
        "paddlex.inference.create_predictor": pdx_inference.create_predictor,
        "models.create_predictor": pdx_models.create_predictor,
        "engines": dict(InferenceEngine.all()),
        "bindings": {name: dict(m) for name, m in default_registry._registry.items()},
    }


@pytest.fixture()
def reinstall():
    yield
    if not paddlex_npu.is_installed():
        paddlex_npu.install()


def test_uninstall_restores_every_patched_object(reinstall):
    assert paddlex_npu.is_installed()
    patched = _snapshot()
    assert "om" in patched["engines"]
    assert getattr(patched["models.create_predictor"], "__paddlex_npu_patched__", False)

    assert paddlex_npu.uninstall() is True
    original = _snapshot()
    assert "om" not in original["engines"]
    assert not any("om" in m for m in original["bindings"].values())
    fn = original["models.create_predictor"]
    assert not hasattr(fn, "__paddlex_npu_patched__")
    assert patched["models.create_predictor"].__wrapped__ is fn
    assert original["paddlex.create_predictor"] is fn and original["paddlex.inference.create_predictor"] is fn

    assert paddlex_npu.install() is True
    again = _snapshot()
    assert again["engines"]["om"] is patched["engines"]["om"]
    assert paddlex_npu.uninstall() is True
    restored = _snapshot()
    assert all(restored[k] is original[k] for k in ("paddlex.create_predictor", "models.create_predictor"))
    assert restored["engines"] == original["engines"]
    assert {k: v for k, v in restored["bindings"].items()} == original["bindings"]


def test_install_and_uninstall_are_idempotent(reinstall, caplog):
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        assert paddlex_npu.install() is False
        assert "already installed" in caplog.text
        assert paddlex_npu.uninstall() is True
        assert paddlex_npu.uninstall() is False
        assert "not installed" in caplog.text


def _cpu_pipeline_runners(asset_root, engine):
    from paddlex import create_pipeline

    kw = {"engine_config": {"run_mode": "paddle"}} if engine == "paddle_static" else {}
    return create_pipeline(config=assets.ocr_pipeline_config(asset_root / "paddle"), device="cpu", engine=engine, **kw)


@pytest.mark.parametrize("engine", ["onnxruntime", "paddle_static"])
def test_cpu_pipeline_is_untouched(asset_root, images, reinstall, engine):
    from paddlex.inference.models.runners import ONNXRuntimeRunner, PaddleStaticRunner

    expected_cls = ONNXRuntimeRunner if engine == "onnxruntime" else PaddleStaticRunner
    one = {"english": images["english"]}

    p = _cpu_pipeline_runners(asset_root, engine)  # plugin installed
    assert type(p.text_det_model.runner) is expected_cls and type(p.text_rec_model.runner) is expected_cls
    with_plugin = run_ocr(p, one)
    p.close()

    paddlex_npu.uninstall()
    p = _cpu_pipeline_runners(asset_root, engine)
    without_plugin = run_ocr(p, one)
    p.close()
    assert with_plugin == without_plugin


def test_hpi_backends_other_than_om_reach_paddlex(asset_root):
    """PaddleX's own HPI path is taken (and fails as stock PaddleX does here: no ultra-infer)."""
    from paddlex import create_predictor

    with pytest.raises(RuntimeError, match="ultra-infer"):
        create_predictor("PP-OCRv4_mobile_det", model_dir=str(asset_root / "paddle" / "PP-OCRv4_mobile_det"),
                         device="cpu", use_hpip=True, hpi_config={"backend": "onnxruntime"})
