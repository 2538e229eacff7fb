"""PaddleX's host steps as the OM route runs them: the same outputs, less host work, per predictor and pipeline.

On its first call, a text detection or recognition predictor whose runner is an OM runner gets, in its own
steps only (PaddleX's other predictors and routes untouched):

- **detection**, when the package normalises on the device (manifest ``normalisation``,
  :mod:`..build.normalisation`): ``Normalize`` -> :class:`KeepPixels` (the 8-bit pixels, RGBA made RGB as
  PaddleX's step does, after checking that PaddleX would normalise exactly as the package does) and ``ToBatch`` ->
  :class:`PixelBatch` (the uint8 batch written once in C order; PaddleX's ``np.stack`` of the transposed views
  keeps their memory order, and the runner would copy it again), each image's channels written by ``cv2.split``
  into their planes of the batch (20 times faster than NumPy's strided copy);
- **detection's post-processing** (PaddleX's ``DBPostProcess``): ``boxes_from_bitmap`` given the boolean mask as
  the 0/1 bytes it is (``bitmap * 255`` is then computed on bytes, not on a 64-bit integer copy of the map);
- **recognition** (PaddleX's dynamic-width ``OCRReisizeNormImg``, not a fixed ``input_shape``): ``ReisizeNorm`` ->
  :class:`RecResize` (PaddleX's own geometry and ``cv2.resize``, the normalisation left for the batch) and
  ``ToBatch`` -> :class:`RecBatch` (each line normalised with PaddleX's own float32 operations and written once
  into the zero-padded batch, where PaddleX pads each line, then ``np.pad``s it again to the widest and stacks:
  bit-equal, one allocation instead of three copies); when the package normalises its lines on the device
  (manifest ``rec_uint8_masked``), ``ToBatch`` -> :class:`RecPixelBatch` (the 8-bit lines and the mask row of their
  pixels written once into a uint8 batch, a quarter of the bytes).

And on its first call, an OCR pipeline (PaddleX's ``_OCRPipeline``, also inside PP-StructureV3 and table
recognition) whose detector is on the OM route crops its text boxes with :class:`TranslatedCrop`: where PaddleX's
perspective warp of a box is a translation by whole pixels (an axis-aligned box, as most lines of a digital page
are), the warp reads every source pixel at a whole position, where its cubic weights are (0, 1, 0, 0) in 8-bit
fixed point: the crop is the slice, copied. Every other box (rotated, scaled by ``boxPoints``' rounding, at the
image's border, not 8-bit) goes to PaddleX's warp. Its reader, and that of a document pipeline (table
recognition, layout parsing, PP-StructureV3) with a model on the route, reads PNG files by
:class:`..kernels.png_read.FastRead` (OpenCV's pixels, the inflate by zlib-ng); a table pipeline matches OCR boxes to
cells by :mod:`.table_match` (PaddleX's matches, computed at once).

Resize and ``ToCHW`` of detection stay PaddleX's. Texts, scores and boxes are PaddleX's
(tests/paddlex/test_device_normalise.py, tests/paddlex/test_host_steps.py).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np

from ..errors import ConfigError, InputMismatchError
from ..kernels import png_read
from ..run.runner import OMRunner
from .record import Row


class KeepPixels:
    """In place of PaddleX's detection ``NormalizeImage``: 8-bit pixels, RGBA made RGB, left for the device."""

    def __call__(self, imgs: List[np.ndarray]) -> List[np.ndarray]:
        import cv2

        out = []
        for img in imgs:
            if img.dtype != np.uint8:
                raise InputMismatchError(
                    f"an image of dtype {img.dtype}: this detection package takes 8-bit pixels and normalises them "
                    "on the device; pass uint8 images (as cv2.imread or a file gives them), or convert the model "
                    "with `paddlex-npu convert --no-device-normalise`"
                )
            out.append(cv2.cvtColor(img, cv2.COLOR_RGBA2RGB) if img.shape[2] == 4 else img)
        return out


class PixelBatch:
    """In place of PaddleX's detection ``ToBatch``: the images stacked once into a C-ordered uint8 batch."""

    def __call__(self, imgs: List[np.ndarray]) -> List[np.ndarray]:
        if not imgs:
            return []
        if any(img.shape != imgs[0].shape for img in imgs):
            raise ValueError("all input arrays must have the same shape")  # np.stack's words, as PaddleX's ToBatch
        import cv2

        batch = np.empty((len(imgs), *imgs[0].shape), dtype=np.uint8)
        for i, img in enumerate(imgs):
            hwc = img.transpose(1, 2, 0)  # ToCHW's view taken back: the image as resized, in its own memory
            planes = [batch[i, c] for c in range(img.shape[0])] if hwc.flags.c_contiguous else []
            if not planes or not all(
                np.shares_memory(out, batch) for out in cv2.split(hwc, planes)
            ):  # cv2 wrote elsewhere (it reallocates what it cannot write into)
                batch[i] = img
        return [batch]


def uint8_bitmap(boxes_from_bitmap: Callable[..., Any]) -> Callable[..., Any]:
    """PaddleX's ``DBPostProcess.boxes_from_bitmap`` given a boolean mask as its 0/1 bytes: the method computes
    ``(bitmap * 255).astype(np.uint8)``, 0 or 255 either way, on bytes instead of on a 64-bit copy of the map."""

    @functools.wraps(boxes_from_bitmap)
    def call(pred: np.ndarray, bitmap: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        if isinstance(bitmap, np.ndarray) and bitmap.dtype == np.bool_:
            bitmap = bitmap.view(np.uint8)
        return boxes_from_bitmap(pred, bitmap, *args, **kwargs)

    return call


# How far from a whole-pixel translation a warp's matrix may be: the warp rounds source positions to 1/32 pixel,
# and 1e-9 over 10^5 pixels moves a position by 1e-4 of a pixel.
_WHOLE = 1e-9


def translated_crop(img: np.ndarray, points: np.ndarray) -> Optional[np.ndarray]:
    """PaddleX's ``get_rotate_crop_image`` of an 8-bit image where its warp is a whole-pixel translation inside the
    image: the slice, copied (and turned as PaddleX turns tall crops); None where it is not."""
    import cv2

    if img.dtype != np.uint8 or img.ndim not in (2, 3) or np.shape(points) != (4, 2):
        return None
    (ax, ay), (bx, by), (cx, cy), (dx, dy) = np.asarray(points).tolist()
    if not (ay == by and dy == cy and ax == dx and bx == cx and float(ax).is_integer() and float(ay).is_integer()):
        return None  # not an axis-aligned box at whole pixels (PaddleX's order: top-left, clockwise)
    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))  # PaddleX's
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    if width <= 0 or height <= 0:
        return None
    target = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = cv2.getPerspectiveTransform(points, target).tolist()
    left, top = round(-m02), round(-m12)
    if not (
        max(abs(m00 - 1), abs(m01), abs(m10), abs(m11 - 1), abs(m20), abs(m21), abs(m22 - 1)) <= _WHOLE
        and abs(-m02 - left) <= _WHOLE
        and abs(-m12 - top) <= _WHOLE
        and 0 <= left
        and 0 <= top
        and left + width <= img.shape[1]
        and top + height <= img.shape[0]
    ):
        return None  # the warp moves it by other than whole pixels, or reads past the border (replicated there)
    crop = img[top : top + height, left : left + width].copy()
    return np.rot90(crop) if height * 1.0 / width >= 1.5 else crop  # PaddleX's turn of a tall crop


class TranslatedCrop:
    """In place of ``CropByPolys.get_rotate_crop_image`` on one cropper: :func:`translated_crop`, else PaddleX's."""

    def __init__(self, warp: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        self.warp = warp

    def __call__(self, img: np.ndarray, points: np.ndarray) -> np.ndarray:
        crop = translated_crop(img, points)
        return self.warp(img, points) if crop is None else crop


class Resized(NamedTuple):
    """A text line resized as PaddleX's ``OCRReisizeNormImg`` does, not yet normalised."""

    pixels: np.ndarray  # [H, resized_w, C], the image's dtype
    width: int  # the padded width PaddleX gives it (imgW)


class RecResize:
    """In place of PaddleX's ``OCRReisizeNormImg`` (dynamic width): its geometry and resize, no normalisation."""

    def __init__(self, step: Any, validate: Optional[Callable[..., None]]) -> None:
        self.imgC, self.imgH, self.imgW = step.rec_image_shape
        self.max_imgW = step.max_imgW
        self.validate = validate

    def __call__(self, imgs: List[np.ndarray]) -> List[Resized]:
        import cv2

        out = []
        for i, img in enumerate(imgs):
            if self.validate is not None:
                self.validate(img, index=i)
            h, w = img.shape[:2]
            assert self.imgC == img.shape[2]  # PaddleX's own check
            img_w = int(self.imgH * max(self.imgW / self.imgH, w * 1.0 / h))
            if img_w > self.max_imgW:
                resized_w = img_w = self.max_imgW
            else:
                resized_w = min(img_w, int(math.ceil(self.imgH * (w / float(h)))))
            out.append(Resized(cv2.resize(img, (resized_w, self.imgH)), img_w))
        return out


class RecBatch:
    """In place of PaddleX's recognition ``ToBatch``: every line normalised and written once into the zero-padded
    batch."""

    def __call__(self, imgs: List[Resized]) -> List[np.ndarray]:
        if not imgs:
            return []
        height, channels = imgs[0].pixels.shape[0], imgs[0].pixels.shape[2]
        batch = np.zeros((len(imgs), channels, height, max(r.width for r in imgs)), dtype=np.float32)
        for i, (pixels, _) in enumerate(imgs):
            norm = pixels.astype("float32").transpose((2, 0, 1)) / 255  # PaddleX's operations, in its order
            norm -= 0.5
            norm /= 0.5
            batch[i, :, :, : pixels.shape[1]] = norm
        return [batch]


class RecPixelBatch:
    """In place of PaddleX's recognition ``ToBatch`` for a package that normalises its lines on the device
    (manifest ``rec_uint8_masked``): the resized 8-bit lines written once into a uint8 batch ``[N, C, H + 1, W]``,
    row ``H`` of channel 0 set to 1 over each line's pixels (0 where PaddleX pads with 0.0 after normalising)."""

    def __init__(self, mask_row: int) -> None:
        self.mask_row = mask_row

    def __call__(self, imgs: List[Resized]) -> List[np.ndarray]:
        if not imgs:
            return []
        import cv2

        height, channels = imgs[0].pixels.shape[0], imgs[0].pixels.shape[2]
        if height != self.mask_row:
            raise ConfigError(
                f"text lines resized to height {height}, but the package's mask row is {self.mask_row} (an "
                "inference.yml changed after convert?): convert the model again, or with --no-device-normalise"
            )
        batch = np.zeros((len(imgs), channels, height + 1, max(r.width for r in imgs)), dtype=np.uint8)
        for i, (pixels, _) in enumerate(imgs):
            if pixels.dtype != np.uint8:
                raise InputMismatchError(
                    f"a text line of dtype {pixels.dtype}: this recognition package takes 8-bit pixels and "
                    "normalises them on the device; pass uint8 images, or convert the model with "
                    "`paddlex-npu convert --no-device-normalise`"
                )
            width = pixels.shape[1]
            planes = [batch[i, c, :height, :width] for c in range(channels)]
            if not all(np.shares_memory(out, batch) for out in cv2.split(pixels, planes)):
                batch[i, :, :height, :width] = pixels.transpose(2, 0, 1)  # cv2 wrote elsewhere
            batch[i, 0, height, :width] = 1
        return [batch]


def om_runner_of(predictor: Any) -> Optional[OMRunner]:
    """The predictor's OM runner (PaddleX 3.5+ ``runner``, 3.0-3.4 ``infer``; through wrappers that name what they
    stand for in ``__wrapped__``, as the benchmark's stage timer does), or None."""
    for attr in ("runner", "infer"):
        runner = getattr(predictor, attr, None)
        for _ in range(4):
            if isinstance(runner, OMRunner):
                return runner
            runner = getattr(runner, "__wrapped__", None)
    return None


def fit_detection(predictor: Any) -> bool:
    """Fit an OM-route detection predictor: its post-processing's mask (:func:`uint8_bitmap`) and its
    ``pre_tfs`` to its package's device normalisation, if it has one; False when it is not on the route."""
    runner = om_runner_of(predictor)
    if runner is None:
        return False
    post = getattr(predictor, "post_op", None)
    if callable(getattr(post, "boxes_from_bitmap", None)):
        post.boxes_from_bitmap = uint8_bitmap(post.boxes_from_bitmap)
    norm = runner.manifest.normalisation
    if norm is None:
        return True
    pre = getattr(predictor, "pre_tfs", None)
    step = pre.get("Normalize") if isinstance(pre, dict) else None
    ours = (np.float32(norm.alpha).tolist(), np.float32(norm.beta).tolist())
    theirs = (np.float32(getattr(step, "alpha", [])).tolist(), np.float32(getattr(step, "beta", [])).tolist())
    if step is None or "ToBatch" not in pre or getattr(step, "order", "hwc") != "hwc" or ours != theirs:
        differs = "does not normalise so" if step is not None else "has no Normalize step"
        raise ConfigError(
            f"{runner.name}: the package normalises its input on the device (alpha {norm.alpha}, beta {norm.beta}) "
            f"but this predictor's preprocessing {differs} (an inference.yml changed after convert?): convert the "
            "model again, or with --no-device-normalise"
        )
    predictor.pre_tfs = {**pre, "Normalize": KeepPixels(), "ToBatch": PixelBatch()}
    return True


def fit_recognition(predictor: Any) -> bool:
    """Fit a recognition predictor's resize and batch on the OM route; False when it is not on it, or when its
    steps are not PaddleX's dynamic-width ones this module reproduces."""
    from paddlex.inference.models.text_recognition import processors

    pre, runner = getattr(predictor, "pre_tfs", None), om_runner_of(predictor)
    if runner is None or not isinstance(pre, dict):
        return False
    norm = runner.manifest.normalisation
    step, batch = pre.get("ReisizeNorm"), pre.get("ToBatch")
    if (
        type(step) is not processors.OCRReisizeNormImg
        or type(batch) is not processors.ToBatch
        or step.input_shape is not None
        or len(step.rec_image_shape) != 3
    ):
        if norm is not None:
            raise ConfigError(
                f"{runner.name}: the package normalises its text lines on the device, but this predictor's "
                "preprocessing is not PaddleX's dynamic-width OCRReisizeNormImg and ToBatch (a fixed input_shape?): "
                "convert the model with --no-device-normalise"
            )
        return False
    validate = getattr(processors, "validate_text_rec_image_array", None)
    to_batch = RecBatch() if norm is None or norm.mask_row is None else RecPixelBatch(norm.mask_row)
    predictor.pre_tfs = {**pre, "ReisizeNorm": RecResize(step, validate), "ToBatch": to_batch}
    return True


def fit_pipeline(pipeline: Any) -> bool:
    """When an OCR pipeline's detector is on the OM route: its text boxes cropped by :class:`TranslatedCrop` (where
    its cropper is PaddleX's ``CropByPolys`` of quadrilaterals) and its image files read by
    :class:`..kernels.png_read.FastRead` (where its reader is PaddleX's OpenCV one and zlib-ng is installed). False when
    neither applies."""
    if om_runner_of(getattr(pipeline, "text_det_model", None)) is None:
        return False
    cropped = fit_cropper(getattr(pipeline, "_crop_by_polys", None))
    return fit_reader(getattr(pipeline, "img_reader", None)) or cropped


def fit_document(pipeline: Any) -> bool:
    """When any model of a document pipeline (table recognition, layout parsing, PP-StructureV3) is on the OM route:
    its own image files read by :class:`..kernels.png_read.FastRead`, as :func:`fit_pipeline` does for OCR (its OCR
    sub-pipeline is handed arrays, not files). False when it is not on the route or its reader is not PaddleX's
    OpenCV one."""
    return on_route(pipeline) and fit_reader(getattr(pipeline, "img_reader", None))


def on_route(pipeline: Any, depth: int = 3) -> bool:
    """Whether a model of ``pipeline`` (one of its predictors, or of its sub-pipelines ``depth`` levels down) has an
    OM runner."""
    from paddlex.inference.models import BasePredictor
    from paddlex.inference.pipelines.base import BasePipeline

    for value in vars(pipeline).values():  # predictors only: PaddleX 3.4's option objects raise on unknown names
        if isinstance(value, BasePredictor) and om_runner_of(value) is not None:
            return True
        if depth and isinstance(value, BasePipeline) and on_route(value, depth - 1):
            return True
    return False


def fit_cropper(cropper: Any) -> bool:
    """PaddleX's ``CropByPolys`` of quadrilaterals cropping by :class:`TranslatedCrop`; False for any other."""
    from paddlex.inference.pipelines.components.common.crop_image_regions import CropByPolys

    if type(cropper) is not CropByPolys or cropper.det_box_type != "quad":
        return False
    cropper.get_rotate_crop_image = TranslatedCrop(cropper.get_rotate_crop_image)
    return True


def fit_reader(reader: Any) -> bool:
    """PaddleX's ``ReadImage`` reading files by :class:`..kernels.png_read.FastRead` when its backend is PaddleX's
    OpenCV one and zlib-ng is installed; False otherwise."""
    from paddlex.inference.utils.io.readers import OpenCVImageReaderBackend

    backend = getattr(getattr(reader, "_img_reader", None), "_backend", None)
    if type(backend) is not OpenCVImageReaderBackend or not png_read.available():
        return False
    backend.read_file = png_read.FastRead(backend)
    return True


_MODELS = "paddlex.inference.models"
_PIPELINES = "paddlex.inference.pipelines"
_READER = "paddlex.inference.utils.io.readers:OpenCVImageReaderBackend"
ON_ROUTE_USES = (f"{_MODELS}:BasePredictor", f"{_PIPELINES}.base:BasePipeline")  # what on_route() reads

# PaddleX's document pipelines whose own reader reads the input files (3.0-3.7)
DOCUMENT_PIPELINES = (
    ("table_recognition.pipeline", "_TableRecognitionPipeline"),
    ("table_recognition.pipeline_v2", "_TableRecognitionPipelineV2"),
    ("layout_parsing.pipeline", "_LayoutParsingPipeline"),
    ("layout_parsing.pipeline_v2", "_LayoutParsingPipelineV2"),
)

# This speed-up's rows, applied by the registry (:mod:`.speedups`): each fits its instances on their first call.
# The predictors' ``process`` (3.5+ ``Text*RunnerPredictor``, 3.0-3.4 ``Text*Predictor``), the OCR pipeline's
# ``predict`` and the document pipelines' ``predict``.
ROWS = (
    Row(f"{_MODELS}.text_detection.predictor:TextDetRunnerPredictor|TextDetPredictor", "process", fit=fit_detection),
    Row(
        f"{_MODELS}.text_recognition.predictor:TextRecRunnerPredictor|TextRecPredictor",
        "process",
        fit=fit_recognition,
        uses=tuple(f"{_MODELS}.text_recognition.processors:{n}" for n in ("OCRReisizeNormImg", "ToBatch")),
    ),
    Row(
        f"{_PIPELINES}.ocr.pipeline:_OCRPipeline",
        "predict",
        fit=fit_pipeline,
        uses=(f"{_PIPELINES}.components.common.crop_image_regions:CropByPolys", _READER),
    ),
) + tuple(
    Row(f"{_PIPELINES}.{module}:{name}", "predict", fit=fit_document, uses=(*ON_ROUTE_USES, _READER))
    for module, name in DOCUMENT_PIPELINES
)
