"""The text recognition decode of CTC outputs reduced on the device (:mod:`paddlex_npu.build.reduction`).

PaddleX's ``CTCLabelDecode.__call__`` (the same in 3.0-3.4 and 3.5+) takes the model's ``[N, T, classes]``
output, keeps ``argmax`` and ``max`` over the classes, and hands them to ``self.decode`` (collapse repeats, drop the
blank and the other ignored tokens, the mean of the kept scores, word boxes when asked). On the route an OM built
with the reduction returns those two arrays already (the runner's :class:`~paddlex_npu.run.runner.CTCReduced`):
the replacement passes them to PaddleX's own ``self.decode`` and finishes as PaddleX's ``__call__`` does, so texts,
scores and word boxes are PaddleX's. Any other input (a full CTC output, PaddleX's own engines) goes to PaddleX's
``__call__`` unchanged. Its row is one of the route's speed-ups (:mod:`.speedups`, ``docs/patch-ledger.md``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Tuple

from ..run.runner import CTCReduced
from .record import PATCHED_MARK, Row


def decode_reduced(decoder: Any, pred: CTCReduced, return_word_box: bool = False, **kwargs: Any) -> Tuple[List, List]:
    """``CTCLabelDecode.__call__`` on reduced outputs: PaddleX's own ``decoder.decode`` on (indices, scores), and
    the word boxes' width ratio as PaddleX's ``__call__`` applies it."""
    indices, scores = pred
    text = decoder.decode(indices, scores, is_remove_duplicate=True, return_word_box=return_word_box)
    if return_word_box:
        for rec_idx, rec in enumerate(text):
            rec[2][0] = rec[2][0] * (kwargs["wh_ratio_list"][rec_idx] / kwargs["max_wh_ratio"])
    return [t[0] if len(t) <= 2 else (t[0], t[2]) for t in text], [t[1] for t in text]


def reduced_aware(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CTCLabelDecode.__call__`` that decodes the runner's reduced outputs, and calls ``original`` otherwise."""

    @functools.wraps(original)
    def __call__(self: Any, pred: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - replaces __call__
        if isinstance(pred, CTCReduced):
            return decode_reduced(self, pred, *args, **kwargs)
        return original(self, pred, *args, **kwargs)

    setattr(__call__, PATCHED_MARK, True)
    return __call__


_DECODER = "paddlex.inference.models.text_recognition.processors:CTCLabelDecode"

# This speed-up's rows (both generations), applied by the registry (:mod:`.speedups`)
ROWS = (Row(_DECODER, "__call__", reduced_aware, uses=(f"{_DECODER}.decode",)),)
