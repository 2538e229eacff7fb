"""PaddleX's pre-processing steps as the OM route runs them: the same outputs, less host work, per predictor.

On its first call, a text detection or recognition predictor whose runner is an OM runner gets, in its own
``pre_tfs`` only (PaddleX's other predictors and routes untouched):

- **detection**, when the package normalises on the device (manifest ``normalisation``,
  :mod:`..build.normalisation`): ``Normalize`` -> :class:`KeepPixels` (the 8-bit pixels, RGBA made RGB as
  PaddleX's step does, after checking that PaddleX would normalise exactly as the package does) and ``ToBatch`` ->
  :class:`PixelBatch` (the uint8 batch written once in C order; PaddleX's ``np.stack`` of the transposed views
  keeps their memory order, and the runner would copy it again);
- **recognition** (PaddleX's dynamic-width ``OCRReisizeNormImg``, not a fixed ``input_shape``): ``ReisizeNorm`` ->
  :class:`RecResize` (PaddleX's own geometry and ``cv2.resize``, the normalisation left for the batch) and
  ``ToBatch`` -> :class:`RecBatch` (each line normalised with PaddleX's own float32 operations and written once
  into the zero-padded batch, where PaddleX pads each line, then ``np.pad``s it again to the widest and stacks:
  bit-equal, one allocation instead of three copies).

Resize and ``ToCHW`` of detection stay PaddleX's. Texts, scores and boxes are PaddleX's
(tests/paddlex/test_device_normalise.py, tests/paddlex/test_host_steps.py).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np

from ..errors import ConfigError, InputMismatchError
from ..run.runner import OMRunner
from .adapter import PATCHED_MARK
from .record import PatchRecord

_FITTED = "_paddlex_npu_host_steps_fitted"


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
        batch = np.empty((len(imgs), *imgs[0].shape), dtype=np.uint8)
        for i, img in enumerate(imgs):
            batch[i] = img
        return [batch]


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
    """Fit a detection predictor's ``pre_tfs`` to its package's device normalisation; False when it has none."""
    runner = om_runner_of(predictor)
    norm = runner.manifest.normalisation if runner is not None else None
    if norm is None:
        return False
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

    pre = getattr(predictor, "pre_tfs", None)
    if om_runner_of(predictor) is None or not isinstance(pre, dict):
        return False
    step, batch = pre.get("ReisizeNorm"), pre.get("ToBatch")
    if type(step) is not processors.OCRReisizeNormImg or type(batch) is not processors.ToBatch:
        return False
    if step.input_shape is not None or len(step.rec_image_shape) != 3:
        return False
    validate = getattr(processors, "validate_text_rec_image_array", None)
    predictor.pre_tfs = {**pre, "ReisizeNorm": RecResize(step, validate), "ToBatch": RecBatch()}
    return True


def fitted(original: Callable[..., Any], fit: Callable[[Any], bool]) -> Callable[..., Any]:
    """A predictor's ``process``, fitting the predictor (``fit``) on its first call."""

    @functools.wraps(original)
    def process(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, _FITTED, False):
            fit(self)
            setattr(self, _FITTED, True)
        return original(self, *args, **kwargs)

    setattr(process, PATCHED_MARK, True)
    return process


def _class(module: str, names: tuple) -> type:
    import importlib

    mod = importlib.import_module(f"paddlex.inference.models.{module}.predictor")
    cls = next((getattr(mod, n) for n in names if hasattr(mod, n)), None)
    if cls is None:
        raise ConfigError(
            f"this PaddleX has none of {', '.join(names)} in paddlex.inference.models.{module}.predictor: its "
            "layout is unknown to this paddlex-npu"
        )
    return cls


def _targets() -> List[tuple]:
    """(predictor class, fit) of both generations: 3.5+ ``Text*RunnerPredictor``, 3.0-3.4 ``Text*Predictor``."""
    return [
        (_class("text_detection", ("TextDetRunnerPredictor", "TextDetPredictor")), fit_detection),
        (_class("text_recognition", ("TextRecRunnerPredictor", "TextRecPredictor")), fit_recognition),
    ]


def apply(record: PatchRecord) -> None:
    """Install the fitting into PaddleX's detection and recognition predictors, recorded for uninstall."""
    for cls, fit in _targets():
        record.set_attr(cls, "process", fitted(cls.process, fit))


def enable_fork() -> None:
    """The same for good, in a fork-patched PaddleX (which :func:`apply` never touches); idempotent."""
    for cls, fit in _targets():
        if not getattr(cls.process, PATCHED_MARK, False):
            cls.process = fitted(cls.process, fit)
