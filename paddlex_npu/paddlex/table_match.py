"""PaddleX's matching of OCR boxes to table cells, as the OM route runs it: the same matches, computed at once.

PaddleX's table recognition (``table_recognition_post_processing.match_table_and_ocr``) gives every OCR box the
cell with the least ``(1 - IoU, L1 distance)``, two Python functions called once per (box, cell) pair: a quarter
of the route's host CPU on a table of 40 cells. :func:`~..kernels.cell_match.best_cells` computes all pairs at once
with NumPy, giving the values PaddleX's scalar code gives where that is exact to show (the kernel says when); any
other input goes to PaddleX's function (tests/paddlex/test_table_match.py: a differential test against PaddleX's, on
NumPy 1 and 2).

It is used only inside ``predict_single_table_recognition_res`` of a table recognition pipeline with a model on the
OM route (also inside layout parsing); every other caller gets PaddleX's function.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any, Callable, Dict, List

import numpy as np

from ..kernels.cell_match import best_cells
from .host_steps import ON_ROUTE_USES, on_route
from .record import PATCHED_MARK, Row

_ON_ROUTE: contextvars.ContextVar[bool] = contextvars.ContextVar("paddlex_npu_table_match", default=False)
_CHECKED = "_paddlex_npu_table_match_on_route"

POST = "paddlex.inference.pipelines.table_recognition.table_recognition_post_processing"
PIPELINE = "paddlex.inference.pipelines.table_recognition.pipeline"


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
