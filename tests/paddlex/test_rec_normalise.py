"""Recognition's input normalisation on the device (issue 57): ``convert`` makes a text recognition model take 8-bit
lines ``[N, C, H + 1, W]`` (row H of channel 0 marks each line's pixels) and puts PaddleX's ``OCRReisizeNormImg``
arithmetic and its 0.0 padding at the head of the graph; the route writes the resized lines into a uint8 batch
(``paddlex_npu.paddlex.host_steps.RecPixelBatch``).

Checked on the reference runtime (ONNX Runtime runs the ONNX the OM is built from): the head's output bit-equal to
PaddleX's own batch over lines of every width in mixed batches; texts and scores equal to PaddleX's own engine on
lines cut from rendered pages, for PP-OCRv4 and v6 tiny/small recognisers (dymshape), and a gear package's equal to
the float32 gear package's; a quarter
of the bytes; the source model given back exactly; a float32 input refused with the reason; a package converted
again keeps its head once.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import cv2
import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.build.normalisation import unnormalised
from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import InputMismatchError
from paddlex_npu.om import manifest as mf
from paddlex_npu.paddlex.host_steps import RecPixelBatch, RecResize
from paddlex_npu.run.runner import build_om_runner
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, own_engine

RECS = [assets.REC] + ([] if LEGACY else [assets.REC_V6_TINY, assets.REC_V6_SMALL])
SHAPES = [(48, 10), (32, 320), (64, 64), (20, 1500), (48, 3300), (10, 1), (100, 37), (31, 999)]


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> List[np.ndarray]:
    """Text lines cut from rendered pages at their rows (widths from a word to a line), and a noisy copy of each."""
    d = tmp_path_factory.mktemp("rec_lines")
    out = []
    for path in assets.render_pages(d, 2, lines=6):
        page = cv2.imread(str(path))
        ink = np.flatnonzero(page.min(axis=(1, 2)) < 128)
        rows = np.split(ink, np.flatnonzero(np.diff(ink) > 1) + 1)
        for k, r in enumerate(rows):
            cols = np.flatnonzero(page[r[0] : r[-1] + 1].min(axis=(0, 2)) < 128)
            right = cols[-1] + 4 if k % 2 else cols[0] + (cols[-1] - cols[0]) // 3
            out.append(page[max(r[0] - 4, 0) : r[-1] + 5, max(cols[0] - 4, 0) : right])
    rng = np.random.default_rng(0)
    noisy = [np.clip(line + rng.integers(-30, 30, line.shape), 0, 255).astype(np.uint8) for line in out[:6]]
    return out + noisy


def _package(asset_root: Path, dest: Path, model: str, mode: str = "dymshape", **options) -> Path:
    convert(asset_root / "om" / model, dest / model, "Ascend310P3", mode, run=False, **options)
    return dest / model


def _recognise(model: str, folder: Path, lines: List[np.ndarray], **kw) -> List[tuple]:
    from paddlex import create_model

    kw = kw or dict(device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    predictor = create_model(model, model_dir=str(folder), batch_size=6, **kw)
    try:
        return [(r["rec_text"], float(r["rec_score"])) for r in predictor.predict(lines)]
    finally:
        predictor.close()


def _paddlex_own(model: str, asset_root: Path, lines: List[np.ndarray]) -> List[tuple]:
    return _recognise(model, asset_root / "paddle" / model, lines, **own_engine())


@pytest.mark.parametrize("model", RECS)
def test_lines_on_the_device_read_as_paddlex(model, asset_root, lines, tmp_path):
    package = _package(asset_root, tmp_path, model)
    man = mf.load(package / mf.MANIFEST_NAME)
    assert man.normalisation.kind == "rec_uint8_masked" and man.inputs[0].dtype == "uint8"
    assert man.inputs[0].shape[2] == man.normalisation.mask_row + 1 == 49
    got, want = _recognise(model, package, lines), _paddlex_own(model, asset_root, lines)
    assert [t for t, _ in got] == [t for t, _ in want] and any(t for t, _ in got)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-5)


def test_the_head_gives_paddlexs_batch_to_the_bit(asset_root, tmp_path):
    """The normalised, masked tensor the model reads, from ONNX Runtime, against PaddleX's own steps' batch."""
    import onnx
    import onnxruntime as ort
    from paddlex.inference.models.text_recognition.processors import OCRReisizeNormImg, ToBatch

    package = _package(asset_root, tmp_path, assets.REC)
    model = onnx.load(str(package / "inference.onnx"))
    del model.graph.output[:]
    out = onnx.helper.make_tensor_value_info("paddlex_npu_norm_out", onnx.TensorProto.FLOAT, None)
    model.graph.output.extend([out])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    step = OCRReisizeNormImg(rec_image_shape=[3, 48, 320])
    rng = np.random.default_rng(0)
    group = [rng.integers(0, 256, (h, w, 3)).astype(np.uint8) for h, w in SHAPES]
    for part in (group, group[:1], group[2:5], group[:4]):
        want = ToBatch()(step(part))[0]
        pixels = RecPixelBatch(48)(RecResize(step, None)(part))[0]
        assert pixels.dtype == np.uint8 and pixels.nbytes * 4 <= want.nbytes * 49 / 48 + 1
        got = session.run(None, {"x": pixels})[0]
        assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_gear_packages_read_as_the_float32_gear_package(asset_root, lines, tmp_path):
    """Gears pad the lines wider than PaddleX's batch (0.0 in a float32 package, a mask of 0 here): the same texts
    and scores as the float32 package of the same gears, bit for bit."""
    gears = "1,320;6,960;6,1920;6,3200"
    package = _package(asset_root, tmp_path / "u8", assets.REC, "gears", gears=gears)
    plain = _package(asset_root, tmp_path / "f32", assets.REC, "gears", gears=gears, device_normalise=False)
    got, want = _recognise(assets.REC, package, lines), _recognise(assets.REC, plain, lines)
    assert got == want and any(t for t, _ in got)


def test_the_source_model_is_given_back_float32_refused_and_converted_again_once(asset_root, tmp_path):
    import onnx

    package = _package(asset_root, tmp_path / "on", assets.REC)
    plain = _package(asset_root, tmp_path / "off", assets.REC, device_normalise=False)
    man = mf.load(package / mf.MANIFEST_NAME)
    assert mf.load(plain / mf.MANIFEST_NAME).normalisation is None
    back = unnormalised(package / "inference.onnx", man.normalisation, tmp_path / "b.onnx")
    assert onnx.load(str(back)).graph == onnx.load(str(plain / "inference.onnx")).graph
    runner = build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig())
    try:
        with pytest.raises(InputMismatchError, match="takes 8-bit pixels"):
            runner(x=np.zeros((1, 3, 49, 320), np.float32))
    finally:
        runner.close()
    again = tmp_path / "again" / assets.REC
    convert(package, again, "Ascend310P3", "dymshape", run=False, reduce=False)  # its outputs reduced already
    assert mf.load(again / mf.MANIFEST_NAME).normalisation == man.normalisation
    assert mf.load(again / mf.MANIFEST_NAME).inputs == man.inputs
    assert onnx.load(str(again / "inference.onnx")).graph == onnx.load(str(package / "inference.onnx")).graph
