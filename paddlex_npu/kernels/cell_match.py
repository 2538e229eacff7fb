"""OCR boxes matched to table cells, all pairs at once: for each box, the cell PaddleX's table recognition
(``table_recognition_post_processing.match_table_and_ocr``) chooses, the least ``(1 - IoU, L1 distance)``, which
PaddleX computes with two Python functions called once per (box, cell) pair.

:func:`best_cells` computes all pairs at once with NumPy, giving the values PaddleX's scalar code gives, where that
is exact to show: cells as PaddleX's structure model gives them (``int64``) and OCR boxes of integers (``int16``
``rec_boxes``), all below 2**23 in magnitude. PaddleX's arithmetic then mixes ``int64``, ``float32`` (the OCR box,
cast) and ``float64`` scalars; every operation of it is exact in ``float64`` except the ``float32`` products (the
OCR box's area, and the intersection where PaddleX's ``max``/``min`` pick all four sides from the OCR box), which
are computed here in ``float32``. Any other input is None: the caller (``paddlex/table_match.py``) leaves it to
PaddleX's function. Tested against PaddleX's in tests/paddlex/test_table_match.py (a differential test, NumPy 1 and
2), on hand-made cases in tests/unit/kernels/test_cell_match.py.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

_EXACT_BELOW = 2**23  # coordinates below this: their differences are exact in float32, their products in float64


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
