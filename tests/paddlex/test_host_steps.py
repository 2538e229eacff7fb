"""The OM route's recognition pre-processing (``paddlex_npu.paddlex.host_steps``): its resize and batch give the
very arrays PaddleX's ``OCRReisizeNormImg`` and ``ToBatch`` give, bit for bit, over lines of every shape the
dynamic-width step meets (narrow, square, wider than 3200 px at 48 px high, one pixel wide), 8-bit and float, in
batches of mixed widths; and the route's predictor is fitted only on the OM route."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.paddlex.host_steps import RecBatch, RecResize, fit_recognition
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI
from tests.paddlex.compat import runner_of

SHAPES = [(48, 10), (32, 320), (64, 64), (20, 1500), (48, 3300), (10, 1), (100, 37), (31, 999)]


def _paddlex_steps():
    from paddlex.inference.models.text_recognition.processors import OCRReisizeNormImg, ToBatch

    return OCRReisizeNormImg(rec_image_shape=[3, 48, 320]), ToBatch()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_resize_and_batch_are_paddlexs_to_the_bit(dtype):
    rng = np.random.default_rng(0)
    step, batch = _paddlex_steps()
    lines = [rng.integers(0, 256, (h, w, 3)).astype(dtype) for h, w in SHAPES]
    for group in (lines, lines[:1], lines[2:5], lines[4:5]):
        want = batch(step(group))[0]
        got = RecBatch()(RecResize(step, None)(group))[0]
        assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # the bits, -0.0 and all


def test_only_the_om_routes_recognition_predictor_is_fitted(asset_root):
    from paddlex import create_model

    ours = create_model(
        assets.REC, model_dir=str(asset_root / "om" / assets.REC), device="npu:0", use_hpip=True, hpi_config=NPU_HPI
    )
    try:
        assert fit_recognition(ours) and isinstance(ours.pre_tfs["ToBatch"], RecBatch)
        assert runner_of(ours) is not None
    finally:
        ours.close()
    step, _ = _paddlex_steps()

    class NotOnTheRoute:
        pre_tfs = {"ReisizeNorm": step}

    assert not fit_recognition(NotOnTheRoute())
