"""OCR boxes matched to table cells all at once (``paddlex_npu/kernels/cell_match.py``), without PaddleX: each box's
cell by the least ``(1 - IoU, L1 distance)``, the first of equals, and None for any input whose PaddleX arithmetic it
does not show exactly. Its differential test against PaddleX's own matching: tests/paddlex/test_table_match.py."""

from __future__ import annotations

import numpy as np

from paddlex_npu.kernels.cell_match import best_cells

CELLS = np.array([[0, 0, 10, 10], [10, 0, 20, 10], [0, 10, 20, 20]], dtype=np.int64)


def test_each_box_gets_the_cell_it_overlaps_most():
    ocr = np.array([[1, 1, 9, 9], [11, 1, 19, 9], [2, 12, 18, 18], [9, 1, 19, 9]], dtype=np.int16)
    assert best_cells(CELLS, ocr).tolist() == [0, 1, 2, 1]


def test_equal_iou_then_the_nearer_cell_and_of_equals_the_first():
    # straddling cells 0 and 1 alike: IoU 16/116 with each and an L1 distance of 15 to each: the first cell
    assert best_cells(CELLS[:2], np.array([[8, 1, 12, 9]], dtype=np.int16)).tolist() == [0]
    # overlapping no cell: 1 - IoU is 1 for all, the least distance decides
    assert best_cells(CELLS, np.array([[30, 0, 32, 8]], dtype=np.int16)).tolist() == [1]


def test_inputs_it_cannot_show_exactly_are_left_to_paddlex():
    ocr = np.array([[1, 1, 9, 9]], dtype=np.int16)
    assert best_cells(CELLS.astype(np.int32), ocr) is None  # cells not as PaddleX's structure model gives them
    assert best_cells(CELLS, ocr.astype(np.float32)) is None  # OCR boxes not of integers
    assert best_cells(CELLS, np.array([[1, 1, 2**23, 9]])) is None  # beyond float32's exact integers
    assert best_cells(CELLS[:0], ocr) is None and best_cells(CELLS, ocr[:0]) is None  # nothing to match
    assert best_cells(CELLS.tolist(), ocr) is None  # a list: not PaddleX's array
