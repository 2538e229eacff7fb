"""The OM route's host steps (``paddlex_npu.paddlex.host_steps``), each against PaddleX's own: recognition's resize
and batch give the very arrays ``OCRReisizeNormImg`` and ``ToBatch`` give, bit for bit, over lines of every shape
the dynamic-width step meets (narrow, square, wider than 3200 px at 48 px high, one pixel wide), 8-bit and float,
in batches of mixed widths; detection's uint8 batch is NumPy's stack; the mask as bytes gives the same boxes;
the crops of axis-aligned boxes are PaddleX's warp's bytes; and each is fitted only on the OM route."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from paddlex_npu.paddlex.host_steps import (
    PixelBatch,
    RecBatch,
    RecResize,
    TranslatedCrop,
    fit_recognition,
    translated_crop,
    uint8_bitmap,
)
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


# ---- detection's batch and mask, and the crops of an OCR pipeline ------------------------------------------------


def test_pixel_batch_is_the_stack_of_the_chw_views():
    """Every image's channels split into the batch's planes: NumPy's stack of ToCHW's views, for 1, 3 and 4
    channels, and for an image that is not the view of a C-ordered one (the copy that stays)."""
    rng = np.random.default_rng(1)
    for channels in (1, 3, 4):
        imgs = [rng.integers(0, 256, (37, 53, channels), dtype=np.uint8).transpose(2, 0, 1) for _ in range(3)]
        assert np.array_equal(PixelBatch()(imgs)[0], np.stack(imgs))
    strided = [rng.integers(0, 256, (3, 40, 60), dtype=np.uint8)[:, ::2]]
    assert np.array_equal(PixelBatch()(strided)[0], np.stack(strided))


def test_the_mask_as_bytes_gives_paddlexs_boxes():
    """``boxes_from_bitmap`` on the boolean mask and on its 0/1 bytes: the same boxes and scores."""
    from paddlex.inference.models.text_detection.processors import DBPostProcess

    rng = np.random.default_rng(2)
    pred = np.zeros((320, 480), np.float32)
    for _ in range(25):  # text-line-like blobs of varied score
        y, x, h, w = rng.integers(0, 300), rng.integers(0, 400), rng.integers(6, 20), rng.integers(20, 200)
        pred[y : y + h, x : x + w] = rng.uniform(0.4, 1.0)
    mask = pred > 0.3
    post = DBPostProcess(thresh=0.3, box_thresh=0.6, unclip_ratio=1.5)
    want = post.boxes_from_bitmap(pred, mask, 960, 640, 0.6, 1.5)
    got = uint8_bitmap(post.boxes_from_bitmap)(pred, mask, 960, 640, 0.6, 1.5)
    assert len(want[0]) > 5 and np.array_equal(got[0], want[0]) and got[1] == want[1]


def _paddlex_crop():
    from paddlex.inference.pipelines.components.common.crop_image_regions import CropByPolys

    return CropByPolys(det_box_type="quad")


def test_a_whole_pixel_translation_is_cropped_as_paddlexs_warp_to_the_bit():
    """Axis-aligned boxes through PaddleX's own minimum-area-rectangle crop (boxPoints' float corners and all), at
    and near the image's border, wide and tall (turned), in 8-bit images of 1, 3 and 4 channels: the route's
    cropper gives PaddleX's warp's every byte, and takes the copy for most of them."""
    rng = np.random.default_rng(3)
    cropper, fast = _paddlex_crop(), 0
    ours = TranslatedCrop(cropper.get_rotate_crop_image)
    for k in range(300):
        channels = (1, 3, 4)[k % 3]
        img = rng.integers(0, 256, (211, 347, channels) if channels > 1 else (211, 347), dtype=np.uint8)
        x0, y0 = int(rng.integers(-3, 340)), int(rng.integers(-3, 205))
        w, h = (int(rng.integers(1, 120)), int(rng.integers(1, 40)))[:: 1 if k % 4 else -1]
        quad = np.array([[x0, y0], [x0 + w, y0], [x0 + w, y0 + h], [x0, y0 + h]])
        bounding = cv2.minAreaRect(quad.astype(np.int32))
        points = sorted(list(cv2.boxPoints(bounding)), key=lambda p: p[0])  # PaddleX's order, as its crop makes it
        a, d = (0, 1) if points[1][1] > points[0][1] else (1, 0)
        b, c = (2, 3) if points[3][1] > points[2][1] else (3, 2)
        box = np.array([points[a], points[b], points[c], points[d]])
        want = cropper.get_rotate_crop_image(img, box)
        fast += translated_crop(img, box) is not None
        got = ours(img, box)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (k, box)
    assert fast > 150  # the copy, not only PaddleX's warp, was compared


def test_boxes_that_are_no_whole_pixel_translation_go_to_paddlexs_warp():
    """A rotated box, one a hair off whole pixels, one past the border, a float image: no copy; PaddleX's warp."""
    rng = np.random.default_rng(4)
    img = rng.integers(0, 256, (120, 200, 3), dtype=np.uint8)
    boxes = [
        np.float32([[10, 12], [90, 15], [89, 40], [9, 37]]),  # rotated
        np.float32([[27, 47], [61.99997, 47], [61.99997, 77.99994], [27, 77.99994]]),  # boxPoints' rounding
        np.float32([[150, 10], [230, 10], [230, 30], [150, 30]]),  # past the right edge
    ]
    for box in boxes:
        assert translated_crop(img, box) is None
        assert np.array_equal(
            TranslatedCrop(_paddlex_crop().get_rotate_crop_image)(img, box),
            _paddlex_crop().get_rotate_crop_image(img, box),
        )
    assert translated_crop(img.astype(np.float32), np.float32([[1, 1], [50, 1], [50, 20], [1, 20]])) is None


def test_only_the_om_routes_ocr_pipeline_crops_and_reads_so(npu_pipeline, npu_results):
    from paddlex.inference.common.reader import ReadImage

    from paddlex_npu.kernels.png_read import FastRead
    from paddlex_npu.paddlex.host_steps import fit_pipeline

    assert isinstance(npu_pipeline._crop_by_polys.get_rotate_crop_image, TranslatedCrop)
    assert isinstance(npu_pipeline.img_reader._img_reader._backend.read_file, FastRead)

    class NotOnTheRoute:
        text_det_model = object()
        _crop_by_polys = _paddlex_crop()
        img_reader = ReadImage(format="BGR")

    assert not fit_pipeline(NotOnTheRoute())
    assert not isinstance(NotOnTheRoute._crop_by_polys.get_rotate_crop_image, TranslatedCrop)
    assert "read_file" not in vars(NotOnTheRoute.img_reader._img_reader._backend)
