"""paddlex-npu convert on PIR model folders (inference.json, what PaddleX 3 exports and hosts), made from the
real PP-OCRv4 det, rec and direction-classifier weights with paddlepaddle 3.0.0's Paddle Inference, exported in
the export environment that `--export-env auto` makes (created here by the CLI, once per machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from paddlex_npu.build import export_env
from paddlex_npu.build.convert import convert
from paddlex_npu.build.export import OnnxModel, pir_version
from paddlex_npu.errors import ConfigError, ConvertError
from paddlex_npu.om import manifest as mf
from paddlex_npu.samples import assets
from tests.helpers import CHINESE, ENGLISH, NPU_HPI, norm
from tests.paddlex.compat import ocr_modes_and_texts

FAILED_OP = "op pd_op.nearest_interp (op_id "
P2O_ERROR = "the 0th elementwise MUST be ir::FloatAttribute"


@pytest.fixture(scope="module")
def newer_pir(asset_root) -> Path:
    """The det model translated to PIR by this environment's Paddle (3.3.1 writes PIR version 4)."""
    folder = assets.build_pir_folders(asset_root, Path(sys.executable), "pir-newer", (assets.DET,)) / assets.DET
    if pir_version(folder / "inference.json") == 1:
        pytest.skip("this environment's Paddle writes PIR version 1, which the export environment reads")
    return folder


@pytest.fixture(scope="module")
def failed_cli(newer_pir, tmp_path_factory) -> subprocess.CompletedProcess:
    """`paddlex-npu convert --export-env auto` on a JSON paddle2onnx cannot read: the documented command makes
    the export environment (when missing), then the export fails."""
    out = tmp_path_factory.mktemp("failed") / "det"
    args = ["convert", str(newer_pir), "-o", str(out), "--soc-version", "Ascend310P3", "--export-env", "auto"]
    run = subprocess.run([sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, timeout=1800)
    run.out_dir = out
    return run


@pytest.fixture(scope="module")
def pir_root(asset_root, failed_cli) -> Path:
    """det, rec and the classifier in PIR form, translated by the export environment's paddlepaddle 3.0.0."""
    env = export_env.resolve("auto")  # made by the CLI above; "auto" finds it ready
    return assets.build_pir_folders(asset_root, env.python)


@pytest.fixture(scope="module")
def pir_packages(pir_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("pir_packages")
    results = {
        assets.DET: convert(pir_root / assets.DET, out / assets.DET, "Ascend310P3", run=False, export_env="auto"),
        assets.REC: convert(
            pir_root / assets.REC, out / assets.REC, "Ascend310B1", "gears", run=False, export_env="auto"
        ),
        assets.TEXTLINE_ORI: convert(
            pir_root / assets.TEXTLINE_ORI, out / assets.TEXTLINE_ORI, "Ascend310P3", run=False, export_env="auto"
        ),
    }
    return out, results


def test_a_failing_export_names_the_op_and_the_fix(failed_cli):
    text = failed_cli.stdout + failed_cli.stderr
    assert failed_cli.returncode == 1, text
    assert FAILED_OP in text and P2O_ERROR in text, text
    assert "paddlepaddle 3.0.0 + paddle2onnx 2.0.2rc3" in text and "PIR version 4" in text
    assert "translate SRC DST" in text and "convert the legacy .pdmodel folder" in text
    assert not failed_cli.out_dir.exists()
    assert (export_env.default_env_dir() / export_env.STAMP).is_file()


def test_a_pir_folder_without_an_export_env_is_offered_auto(pir_root, tmp_path):
    with pytest.raises(ConvertError, match="holds a PIR model .* Pass --export-env auto") as err:
        convert(pir_root / assets.DET, tmp_path / "out", "Ascend310P3", run=False)
    assert str(export_env.default_env_dir()) in str(err.value) and "about 1 GB" in str(err.value)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="--export-env .*nowhere: no .*bin/python there"):
        convert(pir_root / assets.DET, tmp_path / "out", "Ascend310P3", run=False, export_env=str(tmp_path / "nowhere"))
    assert list(tmp_path.iterdir()) == []


def test_pir_packages_match_paddle_and_the_legacy_onnx(pir_packages, asset_root):
    out, results = pir_packages
    for model, shape in (
        (assets.DET, (1, 3, 320, 480)),
        (assets.REC, (2, 3, 48, 400)),
        (assets.TEXTLINE_ORI, (2, 3, 48, 192)),
    ):
        assert any(n.startswith("ONNX matches Paddle (the export environment") for n in results[model].notes), model
        x = {"x": np.random.default_rng(1).random(shape, dtype=np.float32)}
        ours = OnnxModel.open(out / model / "inference.onnx")
        legacy = OnnxModel.open(asset_root / "om" / model / "inference.onnx")
        norm = mf.load(out / model / mf.MANIFEST_NAME).normalisation
        if norm is not None and norm.mask_row is not None:  # recognition: 8-bit lines, all pixels (mask row of 1)
            lines = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
            marked = np.concatenate([lines, np.zeros(shape[:2] + (1, shape[3]), np.uint8)], axis=2)
            marked[:, 0, -1] = 1
            floats = (lines.astype(np.float32) / 255 - np.float32(0.5)) / np.float32(0.5)
            got, want = ours.session.run(None, {"x": marked}), legacy.session.run(None, {"x": floats})
        elif norm is not None:  # convert normalises detection on the device: ours takes the pixels, legacy floats
            pixels = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
            alpha, beta = (np.float32(v).reshape(1, 3, 1, 1) for v in (norm.alpha, norm.beta))
            got, want = ours.session.run(None, {"x": pixels}), legacy.session.run(None, {"x": pixels * alpha + beta})
        else:
            got, want = ours.session.run(None, x), legacy.session.run(None, x)
        if model == assets.REC:  # convert reduced the CTC output on the device: the legacy output's argmax and max
            want = [want[0].argmax(-1).astype(np.int32), want[0].max(-1)]
        assert len(got) == len(want), model
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert mf.load(out / assets.DET / mf.MANIFEST_NAME).mode == "dymshape"
    assert mf.load(out / assets.REC / mf.MANIFEST_NAME).mode == "dymdims"
    ori = mf.load(out / assets.TEXTLINE_ORI / mf.MANIFEST_NAME)
    assert ori.input_ranges()["x"] == [(1, 6), (3, 3), (48, 48), (192, 192)]


def test_pir_packages_read_text_on_the_npu_route(pir_packages, images):
    out, _ = pir_packages
    modes, got = ocr_modes_and_texts(out, images)
    assert modes == ("dymshape", "dymdims")
    assert norm(got["english"]["texts"]) == norm(ENGLISH)
    assert got["chinese"]["texts"] == CHINESE


def test_pir_classifier_gives_the_classes_of_paddlex_cpu_engine(pir_packages, pir_root, tmp_path):
    """The converted classifier on the NPU route vs PaddleX's own Paddle engine on the same PIR folder."""
    from paddlex import create_predictor
    from paddlex.inference import PaddlePredictorOption

    crops = []
    for i, t in enumerate(["Paid in full", "Total 12", "Thanks a lot", "Upside down"]):
        a = np.asarray(Image.open(assets.render_text_image([t], tmp_path / f"s{i}.png", size=28)).convert("RGB"))
        ys, xs = np.where(a.min(axis=2) < 128)  # the text line, cropped as the OCR pipeline does
        im = Image.fromarray(a[ys.min() - 4 : ys.max() + 5, xs.min() - 4 : xs.max() + 5])
        (im.rotate(180) if i % 2 else im).save(tmp_path / f"s{i}.png")
        crops.append(str(tmp_path / f"s{i}.png"))
    out, _ = pir_packages
    ours = create_predictor(
        assets.TEXTLINE_ORI, model_dir=str(out / assets.TEXTLINE_ORI), device="npu:0", use_hpip=True, hpi_config=NPU_HPI
    )
    kw = (
        {"pp_option": PaddlePredictorOption(run_mode="paddle")}
        if not hasattr(ours, "runner")
        else {"engine": "paddle_static", "engine_config": {"run_mode": "paddle"}}
    )
    theirs = create_predictor(assets.TEXTLINE_ORI, model_dir=str(pir_root / assets.TEXTLINE_ORI), device="cpu", **kw)
    a = [np.asarray(r["class_ids"]).ravel().tolist() for r in ours.predict(crops)]
    b = [np.asarray(r["class_ids"]).ravel().tolist() for r in theirs.predict(crops)]
    assert a == b == [[0], [1], [0], [1]]
