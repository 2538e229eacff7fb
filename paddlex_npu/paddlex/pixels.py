"""A text detection predictor fitted to a package that normalises on the device (:mod:`..build.normalisation`).

Such a package takes the page's 8-bit pixels. PaddleX's detection predictor would normalise them on the host first
(``pre_tfs["Normalize"]``) and stack float32 (``pre_tfs["ToBatch"]``); on its first call, a predictor whose runner
is an OM runner with ``normalisation`` in its manifest gets, in its own ``pre_tfs`` only (PaddleX's other predictors
and routes untouched):

- ``Normalize`` -> :class:`KeepPixels`: the pixels as they are (RGBA made RGB, as PaddleX's step does), after
  checking that PaddleX would have normalised them exactly as the package does;
- ``ToBatch`` -> :class:`PixelBatch`: the uint8 batch written once in C order (PaddleX's ``np.stack`` of the
  transposed views keeps their memory order, and the runner would copy it again).

Resize and ``ToCHW`` stay PaddleX's. The texts and boxes are PaddleX's: the device computes ``float32(x) *
alpha + beta`` per channel, the same float32 operations PaddleX's ``NormalizeImage`` does
(tests/paddlex/test_device_normalise.py).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional

import numpy as np

from ..errors import ConfigError, InputMismatchError
from ..run.runner import OMRunner
from .adapter import PATCHED_MARK
from .record import PatchRecord

_FITTED = "_paddlex_npu_pixels_fitted"


class KeepPixels:
    """In place of PaddleX's ``NormalizeImage``: 8-bit pixels, RGBA made RGB, left for the device."""

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
    """In place of PaddleX's ``ToBatch``: the images stacked once into a C-ordered uint8 batch."""

    def __call__(self, imgs: List[np.ndarray]) -> List[np.ndarray]:
        if not imgs:
            return []
        if any(img.shape != imgs[0].shape for img in imgs):
            raise ValueError("all input arrays must have the same shape")  # np.stack's words, as PaddleX's ToBatch
        batch = np.empty((len(imgs), *imgs[0].shape), dtype=np.uint8)
        for i, img in enumerate(imgs):
            batch[i] = img
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


def fit(predictor: Any) -> bool:
    """Fit ``predictor``'s ``pre_tfs`` to its package's device normalisation; False when it has none."""
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


def fitted(original: Callable[..., Any]) -> Callable[..., Any]:
    """The detection predictor's ``process``, fitting the predictor on its first call."""

    @functools.wraps(original)
    def process(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, _FITTED, False):
            fit(self)
            setattr(self, _FITTED, True)
        return original(self, *args, **kwargs)

    setattr(process, PATCHED_MARK, True)
    return process


def _predictor_class() -> type:
    from paddlex.inference.models.text_detection import predictor

    cls = getattr(predictor, "TextDetRunnerPredictor", None) or getattr(predictor, "TextDetPredictor", None)
    if cls is None:
        raise ConfigError(
            "this PaddleX has neither TextDetRunnerPredictor (3.5+) nor TextDetPredictor (3.0-3.4) in "
            "paddlex.inference.models.text_detection.predictor: its layout is unknown to this paddlex-npu"
        )
    return cls


def apply(record: PatchRecord) -> None:
    """Install the fitting into PaddleX's detection predictor (both generations), recorded for uninstall."""
    cls = _predictor_class()
    record.set_attr(cls, "process", fitted(cls.process))


def enable_fork() -> None:
    """The same for good, in a fork-patched PaddleX (which :func:`apply` never touches); idempotent."""
    cls = _predictor_class()
    if not getattr(cls.process, PATCHED_MARK, False):
        cls.process = fitted(cls.process)
