"""The OCR pipeline on the NPU route (CPU reference runtime) reads the rendered texts, and agrees with
PaddleX's own onnxruntime and paddle_static engines on the same weights."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from paddlex_npu.samples import assets
from tests.helpers import EXPECTED, norm, run_ocr
from tests.paddlex.compat import cpu_pipeline, only_runner_layout, runner_of


def test_every_model_runs_on_the_om_runner(npu_pipeline):
    from paddlex_npu.run.runner import OMRunner

    for model in (npu_pipeline.text_det_model, npu_pipeline.text_rec_model):
        runner = runner_of(model)
        assert isinstance(runner, OMRunner)
        assert runner.runtime == "reference" and runner.mode == "dymshape"


@pytest.mark.parametrize("key", ["english", "chinese", "page"])
def test_npu_route_reads_the_text(npu_results, key):
    texts = npu_results[key]["texts"]
    if key == "chinese":
        assert texts == EXPECTED[key]
    else:
        assert norm(texts) == norm(EXPECTED[key])
    assert all(s > 0.8 for s in npu_results[key]["scores"])


@pytest.mark.slow
@pytest.mark.parametrize("engine", [pytest.param("onnxruntime", marks=only_runner_layout), "paddle_static"])
def test_parity_with_paddlex_own_engines(npu_results, asset_root, images, engine):
    """Identical texts, boxes within 1 px, scores within 1e-4 against PaddleX's engine on the same weights."""
    p = cpu_pipeline(assets.ocr_pipeline_config(asset_root / "paddle"), engine)
    try:
        theirs = run_ocr(p, images)
    finally:
        p.close()
    for key, ours in npu_results.items():
        assert ours["texts"] == theirs[key]["texts"], key
        np.testing.assert_allclose(ours["boxes"], theirs[key]["boxes"], atol=1.0, err_msg=key)
        np.testing.assert_allclose(ours["scores"], theirs[key]["scores"], atol=1e-4, err_msg=key)


@only_runner_layout
def test_native_om_engine_gives_the_same_result(asset_root, images, npu_results):
    from paddlex import create_pipeline

    p = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "om"),
        device="npu:0",
        engine="om",
        engine_config={"runtime": "reference"},
    )
    try:
        got = run_ocr(p, {"english": images["english"]})
    finally:
        p.close()
    assert got["english"] == npu_results["english"]


@only_runner_layout
def test_paddlex_cli_with_engine_om(asset_root, images, tmp_path):
    import yaml

    cfg = tmp_path / "ocr.yaml"
    cfg.write_text(yaml.safe_dump(assets.ocr_pipeline_config(asset_root / "om")))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "paddlex_npu.cli",
            "paddlex",
            "--pipeline",
            str(cfg),
            "--input",
            str(images["english"]),
            "--engine",
            "om",
            "--device",
            "npu:0",
            "--save_path",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PADDLEX_NPU_RUNTIME": "reference"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "quick" in out.stdout + out.stderr, out.stderr[-3000:]
    assert "OM runner" in out.stderr
