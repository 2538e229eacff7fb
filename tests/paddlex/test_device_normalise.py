"""Detection's input normalisation on the device (issue 42): ``convert`` makes a text detection model take 8-bit
pixels and puts PaddleX's ``NormalizeImage`` arithmetic at the head of the graph; the route's predictor hands it
the pixels (``paddlex_npu.paddlex.host_steps``).

Checked on the reference runtime (ONNX Runtime runs the ONNX the OM is built from): boxes and scores equal to
PaddleX's own engine on rendered pages and a photo-like image with a four-channel copy, for PP-OCRv4 and v6
tiny/small detectors, in dymshape and gear packages; the device's probability map equal to the float32 package's
given PaddleX's normalised input; the source model given back exactly; a float32 input and a changed
``inference.yml`` refused with the reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List

import cv2
import numpy as np
import pytest
import yaml

from paddlex_npu.build.convert import convert
from paddlex_npu.build.normalisation import affine_of, unnormalised
from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError, ConvertError, InputMismatchError
from paddlex_npu.om import manifest as mf
from paddlex_npu.run.runner import build_om_runner
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, own_engine

DETS = [assets.DET] + ([] if LEGACY else [assets.DET_V6_TINY, assets.DET_V6_SMALL])


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> List[str]:
    """Two rendered pages, a noisy photo-like crop of one, and the same as RGBA (PaddleX drops the alpha)."""
    d = tmp_path_factory.mktemp("norm_pages")
    out = [str(p) for p in assets.render_pages(d, 2, lines=6)]
    page = cv2.imread(out[0])
    rng = np.random.default_rng(0)
    crop = page[20:300, 30:700].astype(np.int16)
    noisy = np.clip(crop + rng.integers(-40, 40, crop.shape), 0, 255)
    cv2.imwrite(str(d / "noisy.png"), noisy.astype(np.uint8))
    cv2.imwrite(str(d / "rgba.png"), cv2.cvtColor(noisy.astype(np.uint8), cv2.COLOR_BGR2BGRA))
    return out + [str(d / "noisy.png"), str(d / "rgba.png")]


def _package(asset_root: Path, dest: Path, model: str, mode: str = "dymshape", **options) -> Path:
    convert(asset_root / "om" / model, dest / model, "Ascend310P3", mode, run=False, **options)
    return dest / model


def _detect(model: str, folder: Path, pages: List[str], **kw) -> List[tuple]:
    from paddlex import create_model

    predictor = create_model(
        model, model_dir=str(folder), **(kw or dict(device="npu:0", use_hpip=True, hpi_config=NPU_HPI))
    )
    try:
        return [(np.asarray(r["dt_polys"]), np.asarray(r["dt_scores"])) for r in predictor.predict(pages)]
    finally:
        predictor.close()


def _runner(folder: Path):
    return build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig())


def _paddlex_own(model: str, asset_root: Path, pages: List[str]) -> List[tuple]:
    return _detect(model, asset_root / "paddle" / model, pages, **own_engine())


@pytest.mark.parametrize("model", DETS)
def test_pixels_on_the_device_detect_as_paddlex(model, asset_root, pages, tmp_path):
    package = _package(asset_root, tmp_path, model)
    man = mf.load(package / mf.MANIFEST_NAME)
    assert man.normalisation is not None and man.inputs[0].dtype == "uint8"
    got, want = _detect(model, package, pages), _paddlex_own(model, asset_root, pages)
    for (polys, scores), (want_polys, want_scores) in zip(got, want):
        assert polys.shape == want_polys.shape and len(polys) > 0
        assert np.abs(polys.astype(int) - want_polys.astype(int)).max(initial=0) <= 1
        np.testing.assert_allclose(scores, want_scores, atol=1e-4)


def test_the_map_equals_the_float32_packages_on_paddlexs_own_normalisation(asset_root, pages, tmp_path):
    """The uint8 package given the pixels and the bundled float32 package given PaddleX's normalised input."""
    from paddlex.inference.models.text_detection.processors import NormalizeImage

    package = _package(asset_root, tmp_path, assets.DET)
    pixels = cv2.cvtColor(cv2.imread(pages[0]), cv2.COLOR_BGR2RGB)[:288, :640]
    cfg = yaml.safe_load((package / "inference.yml").read_text())
    step = next(op["NormalizeImage"] for op in cfg["PreProcess"]["transform_ops"] if "NormalizeImage" in op)
    normalised = NormalizeImage(**step)([pixels])[0].transpose(2, 0, 1)[None]
    on_device, on_host = _runner(package), _runner(asset_root / "om" / assets.DET)
    try:
        got = on_device(x=np.ascontiguousarray(pixels.transpose(2, 0, 1)[None]))[0]
        want = on_host(x=np.ascontiguousarray(normalised))[0]
    finally:
        on_device.close()
        on_host.close()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_gear_packages_take_pixels_too(asset_root, pages, tmp_path):
    package = _package(asset_root, tmp_path, assets.DET, "gears", gears="448,640;960,960")
    got, want = _detect(assets.DET, package, pages[:1]), _detect(assets.DET, asset_root / "om" / assets.DET, pages[:1])
    assert len(got[0][0]) == len(want[0][0]) > 0


def test_the_source_model_is_given_back_and_no_device_normalise_keeps_float32(asset_root, tmp_path):
    import onnx

    package = _package(asset_root, tmp_path / "on", assets.DET)
    plain = _package(asset_root, tmp_path / "off", assets.DET, device_normalise=False)
    assert mf.load(plain / mf.MANIFEST_NAME).normalisation is None
    back = unnormalised(
        package / "inference.onnx", mf.load(package / mf.MANIFEST_NAME).normalisation, tmp_path / "b.onnx"
    )
    assert onnx.load(str(back)).graph == onnx.load(str(plain / "inference.onnx")).graph
    cfg = yaml.safe_load((package / "inference.yml").read_text())
    assert affine_of(cfg) == tuple(
        mf.load(package / mf.MANIFEST_NAME).normalisation.model_dump()[k] for k in ("alpha", "beta")
    )


def test_float32_input_and_a_changed_normalisation_are_refused(asset_root, pages, tmp_path):
    package = _package(asset_root, tmp_path, assets.DET)
    runner = _runner(package)
    try:
        with pytest.raises(InputMismatchError, match="takes 8-bit pixels"):
            runner(x=np.zeros((1, 3, 64, 64), np.float32))
    finally:
        runner.close()
    changed = tmp_path / "changed"
    shutil.copytree(package, changed)
    cfg = yaml.safe_load((changed / "inference.yml").read_text())
    step = next(op["NormalizeImage"] for op in cfg["PreProcess"]["transform_ops"] if "NormalizeImage" in op)
    step["mean"] = [0.5, 0.5, 0.5]
    (changed / "inference.yml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="normalises its input on the device"):
        _detect(assets.DET, changed, pages[:1])


def test_a_package_converted_again_keeps_its_normalisation_once(asset_root, tmp_path):
    import onnx

    first = _package(asset_root, tmp_path / "a", assets.DET)
    again = tmp_path / "b" / assets.DET
    convert(first, again, "Ascend310P3", "dymshape", run=False)
    assert mf.load(again / mf.MANIFEST_NAME).normalisation == mf.load(first / mf.MANIFEST_NAME).normalisation
    assert onnx.load(str(again / "inference.onnx")).graph == onnx.load(str(first / "inference.onnx")).graph
    with pytest.raises(ConvertError, match="already normalises on the device"):
        convert(first, tmp_path / "c" / assets.DET, "Ascend310P3", "dymshape", run=False, device_normalise=False)
