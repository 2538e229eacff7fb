"""PaddleX's matching of OCR boxes to table cells, as the OM route runs it: the same matches, computed at once.

PaddleX's table recognition (``table_recognition_post_processing.match_table_and_ocr``) gives every OCR box the
cell with the least ``(1 - IoU, L1 distance)``, two Python functions called once per (box, cell) pair: a quarter
of the route's host CPU on a table of 40 cells. :func:`best_cells` computes all pairs at once with NumPy, giving
the values PaddleX's scalar code gives, where that is exact to show: cells as PaddleX's structure model gives them
(``int64``) and OCR boxes of integers (``int16`` ``rec_boxes``), all below 2**23 in magnitude. PaddleX's
arithmetic then mixes ``int64``, ``float32`` (the OCR box, cast) and ``float64`` scalars; every operation of it is
exact in ``float64`` except the ``float32`` products (the OCR box's area, and the intersection where PaddleX's
``max``/``min`` pick all four sides from the OCR box), which are computed here in ``float32``. Any other input
goes to PaddleX's function (tests/paddlex/test_table_match.py: a differential test against PaddleX's, on NumPy 1 and 2).

It is used only inside ``predict_single_table_recognition_res`` of a table recognition pipeline with a model on the
OM route (also inside layout parsing); every other caller gets PaddleX's function.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .host_steps import ON_ROUTE_USES, on_route
from .record import PATCHED_MARK, Row

_ON_ROUTE: contextvars.ContextVar[bool] = contextvars.ContextVar("paddlex_npu_table_match", default=False)
_CHECKED = "_paddlex_npu_table_match_on_route"
_EXACT_BELOW = 2**23  # coordinates below this: their differences are exact in float32, their products in float64

POST = "paddlex.inference.pipelines.table_recognition.table_recognition_post_processing"
PIPELINE = "paddlex.inference.pipelines.table_recognition.pipeline"


def best_cells(cell_box_list: Any, ocr_dt_boxes: Any) -> Optional[np.ndarray]:
    """For each OCR box ``[x1, y1, x2, y2]``, the index of its cell as PaddleX's ``match_table_and_ocr`` chooses
    it (the first of the least ``(1 - IoU, distance)``); None when the inputs are not the exact case above."""
    cells, ocr = cell_box_list, np.array(ocr_dt_boxes)
    if not (
        isinstance(cells, np.ndarray)
        and cells.dtype == np.int64
        and cells.ndim == 2
        and cells.shape[1] == 4
        and len(cells)
        and ocr.dtype.kind == "i"
        and ocr.ndim == 2
        and ocr.shape[1] == 4
        and len(ocr)
        and _within(cells)
        and _within(ocr)
    ):
        return None
    o32 = ocr.astype(np.float32)[:, None, :]  # PaddleX: each OCR box cast to float32
    o, c = o32.astype(np.float64), cells.astype(np.float64)[None, :, :]
    # distance(table_box, ocr_box): float32 - int64 is float64, exact
    d = np.abs(o - c)
    near, far = d[..., 0] + d[..., 1], d[..., 2] + d[..., 3]
    distance = (near + d[..., 2]) + d[..., 3] + np.minimum(near, far)
    # compute_iou(table_box, ocr_box): Python's max/min keep the cell's value unless the OCR box's is beyond it
    from_ocr = np.stack([o[..., 0] > c[..., 0], o[..., 1] > c[..., 1], o[..., 2] < c[..., 2], o[..., 3] < c[..., 3]])
    left, top = np.maximum(o[..., 0], c[..., 0]), np.maximum(o[..., 1], c[..., 1])
    right, bottom = np.minimum(o[..., 2], c[..., 2]), np.minimum(o[..., 3], c[..., 3])
    apart = (left >= right) | (top >= bottom)
    width, height = right - left, bottom - top  # exact in every dtype PaddleX computes them in
    both32 = from_ocr.all(axis=0)  # then PaddleX's product is of two float32 values: rounded to float32
    intersect = np.where(both32, width.astype(np.float32) * height.astype(np.float32), width * height)
    cell_area = (cells[:, 2] - cells[:, 0]) * (cells[:, 3] - cells[:, 1])  # int64
    ocr_area = (o32[..., 2] - o32[..., 0]) * (o32[..., 3] - o32[..., 1])  # float32
    union = (cell_area[None, :] + ocr_area.astype(np.float64)) - intersect
    if np.any(~apart & (union <= 0)):
        return None  # PaddleX divides by zero or a negative union here: its own function says what follows
    with np.errstate(divide="ignore", invalid="ignore"):
        away = np.where(apart, 1.0, 1.0 - intersect / union)
    first = away == away.min(axis=1, keepdims=True)
    return np.argmin(np.where(first, distance, np.inf), axis=1)


def _within(values: np.ndarray) -> bool:
    """Every value in (-2**23, 2**23) (not by ``abs``: it keeps the most negative integer negative)."""
    return bool(values.min() > -_EXACT_BELOW and values.max() < _EXACT_BELOW)


def matched(best: np.ndarray, ocr_dt_boxes: Any, cell_sort_by_y_projection: bool) -> Dict[int, List[int]]:
    """PaddleX's result from the chosen cells: cell index -> OCR box indices, in PaddleX's order."""
    import importlib

    out: Dict[int, List[int]] = {}
    for i, j in enumerate(best.tolist()):
        out.setdefault(j, []).append(i)
    if cell_sort_by_y_projection:  # as PaddleX does it, with its own sort
        by_y = importlib.import_module(POST)._sort_box_by_y_projection
        for cell in out:
            order = by_y([ocr_dt_boxes[i] for i in out[cell]], 0.7)
            out[cell] = [out[cell][i] for i in order]
    return out


def dispatching(original: Callable[..., Dict[int, List[int]]]) -> Callable[..., Dict[int, List[int]]]:
    """PaddleX's ``match_table_and_ocr``, computed by :func:`best_cells` inside a table pipeline on the route."""

    @functools.wraps(original)
    def match_table_and_ocr(
        cell_box_list: Any, ocr_dt_boxes: Any, cell_sort_by_y_projection: bool = False
    ) -> Dict[int, List[int]]:
        best = best_cells(cell_box_list, ocr_dt_boxes) if _ON_ROUTE.get() else None
        if best is None:
            return original(cell_box_list, ocr_dt_boxes, cell_sort_by_y_projection)
        return matched(best, ocr_dt_boxes, cell_sort_by_y_projection)

    setattr(match_table_and_ocr, PATCHED_MARK, True)
    return match_table_and_ocr


def on_route_only(original: Callable[..., Any]) -> Callable[..., Any]:
    """A table pipeline's ``predict_single_table_recognition_res``, matching by :func:`best_cells` when a model of
    the pipeline is on the OM route (checked on its first call)."""

    @functools.wraps(original)
    def predict_single_table_recognition_res(self: Any, *args: Any, **kwargs: Any) -> Any:
        on = vars(self).get(_CHECKED)
        if on is None:
            on = on_route(self)
            setattr(self, _CHECKED, on)
        if not on:
            return original(self, *args, **kwargs)
        token = _ON_ROUTE.set(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            _ON_ROUTE.reset(token)

    setattr(predict_single_table_recognition_res, PATCHED_MARK, True)
    return predict_single_table_recognition_res


# This speed-up's rows, applied by the registry (:mod:`.speedups`)
ROWS = (
    Row(POST, "match_table_and_ocr", dispatching, uses=(f"{POST}:_sort_box_by_y_projection",)),
    Row(
        f"{PIPELINE}:_TableRecognitionPipeline",
        "predict_single_table_recognition_res",
        on_route_only,
        uses=ON_ROUTE_USES,
    ),
)
