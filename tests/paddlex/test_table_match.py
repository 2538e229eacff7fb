"""The OM route's matching of OCR boxes to table cells (:mod:`paddlex_npu.paddlex.table_match`) chooses what
PaddleX's own ``match_table_and_ocr`` chooses: a seeded differential test over grids of cells with the OCR boxes in
and across them, boxes far apart, nested, equal, degenerate and large enough for PaddleX's float32 products to
round or decide between IoUs 1e-9 apart, run on NumPy 1 (PaddleX 3.7's suite) and NumPy 2 (PaddleX 3.4's)."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.paddlex import table_match


def _paddlex():
    from paddlex.inference.pipelines.table_recognition import table_recognition_post_processing as post

    match = post.match_table_and_ocr
    return getattr(match, "__wrapped__", match)  # PaddleX's own, under the route's dispatcher


def _boxes(rng: np.random.Generator, n: int, scale: int) -> np.ndarray:
    x, y = rng.integers(0, scale, n), rng.integers(0, scale, n)
    w, h = rng.integers(-2, scale // 3 + 2, n), rng.integers(-2, scale // 3 + 2, n)  # some degenerate
    return np.stack([x, y, x + w, y + h], axis=1)


def _grid(rng: np.random.Generator, rows: int, cols: int, cell: int) -> np.ndarray:
    return np.array(
        [[c * cell, r * cell // 2, (c + 1) * cell, (r + 1) * cell // 2] for r in range(rows) for c in range(cols)],
        dtype=np.int64,
    ) + rng.integers(-1, 2, (rows * cols, 4))


def _cases(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for k in range(count):
        kind = k % 5
        if kind == 0:  # a table: a grid of cells, text boxes inside them, some across two
            cells = _grid(rng, int(rng.integers(1, 8)), int(rng.integers(1, 6)), int(rng.integers(20, 200)))
            pick = cells[rng.integers(0, len(cells), int(rng.integers(1, 40)))]
            ocr = pick + rng.integers(-15, 15, pick.shape)
        elif kind == 1:  # few distinct coordinates: ties in both keys
            cells = rng.integers(0, 6, (int(rng.integers(1, 30)), 4)) * 10
            ocr = rng.integers(0, 6, (int(rng.integers(1, 30)), 4)) * 10
        elif kind == 2:  # large boxes: PaddleX's float32 areas and intersections round
            cells = _boxes(rng, int(rng.integers(1, 30)), 30000)
            ocr = _boxes(rng, int(rng.integers(1, 30)), 30000)
        elif kind == 4:  # large near-squares and cells one pixel off: IoUs apart by 1e-9, float32's rounding decides
            side = rng.integers(20000, 32000, (int(rng.integers(1, 6)), 1))
            corner = rng.integers(0, 32767 - 32001, (len(side), 2))
            ocr = np.concatenate([corner, corner + side + rng.integers(0, 2, (len(side), 2))], axis=1)
            cells = np.repeat(ocr, 12, axis=0) + rng.integers(-1, 2, (12 * len(ocr), 4))
        else:  # equal and nested boxes
            cells = _boxes(rng, int(rng.integers(1, 20)), 500)
            ocr = np.concatenate([cells[: int(rng.integers(0, len(cells) + 1))], _boxes(rng, 5, 500)])
            ocr = ocr + rng.integers(0, 2, ocr.shape) * np.array([-3, -3, 3, 3])
        yield cells.astype(np.int64), np.clip(ocr, -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("by_y", [False, True])
def test_matches_are_paddlex_own(by_y):
    paddlex = _paddlex()
    for cells, ocr in _cases(7 + by_y, 240):
        best = table_match.best_cells(cells, ocr)
        assert best is not None  # every case is one the route computes (not PaddleX's function again)
        ours, theirs = table_match.matched(best, ocr, by_y), paddlex(cells, ocr, cell_sort_by_y_projection=by_y)
        assert list(ours.items()) == list(theirs.items()), (cells.tolist(), ocr.tolist())


# an OCR box strictly inside cell 1 (PaddleX's intersection is then a float32 product, rounded) and cell 0 one pixel
# off on other sides (its intersection exact in float64): their IoUs closer than that rounding, so it decides
# (found by a search over such boxes; the exact product would choose the other cell)
ROUNDING_DECIDES = [
    ([[100, 198, 12752, 15706], [99, 198, 12751, 15706]], [100, 200, 12750, 15705], 1),
    ([[100, 198, 12739, 17480], [99, 199, 12738, 17481]], [100, 200, 12737, 17479], 0),
    ([[100, 197, 21637, 30947], [99, 195, 21636, 30945]], [100, 200, 21633, 30943], 0),
    ([[100, 198, 13363, 17222], [99, 198, 13362, 17222]], [100, 200, 13360, 17217], 1),
]


@pytest.mark.parametrize("cells, box, cell", ROUNDING_DECIDES)
def test_float32_rounding_decides_as_in_paddlex(cells, box, cell):
    cells, ocr = np.array(cells, np.int64), np.array([box], np.int16)
    assert _paddlex()(cells, ocr) == {cell: [0]}
    assert table_match.matched(table_match.best_cells(cells, ocr), ocr, False) == {cell: [0]}


@pytest.mark.parametrize(
    "cells, ocr",
    [
        (np.array([[0.0, 0, 10, 10]]), np.array([[0, 0, 5, 5]], np.int16)),  # float cells
        (np.array([[0, 0, 10, 10]], np.int32), np.array([[0, 0, 5, 5]], np.int16)),  # not PaddleX's int64
        (np.array([[0, 0, 10, 10]], np.int64), np.array([[0.5, 0, 5, 5]])),  # float OCR boxes
        (np.array([[0, 0, 2**23, 10]], np.int64), np.array([[0, 0, 5, 5]], np.int16)),  # differences beyond float32's
        (np.array([[-(2**63), 0, 10, 10]], np.int64), np.array([[0, 0, 5, 5]], np.int16)),  # abs() stays negative
        (np.zeros((0, 4), np.int64), np.array([[0, 0, 5, 5]], np.int16)),  # no cells
        (np.array([[0, 0, 10, 10]], np.int64), np.zeros((0, 4), np.int16)),  # no OCR boxes
    ],
)
def test_other_inputs_go_to_paddlex(cells, ocr):
    assert table_match.best_cells(cells, ocr) is None


def test_only_a_pipeline_on_the_route_uses_it():
    """Outside a table pipeline on the route (PaddleX's other routes, other callers) the function is PaddleX's."""
    called = []

    def paddlex(*args):
        called.append(args)
        return {}

    match = table_match.dispatching(paddlex)
    cells, ocr = np.array([[0, 0, 10, 10]], np.int64), np.array([[0, 0, 5, 5]], np.int16)
    assert match(cells, ocr) == {} and len(called) == 1
    token = table_match._ON_ROUTE.set(True)
    try:
        assert match(cells, ocr) == {0: [0]} and len(called) == 1
    finally:
        table_match._ON_ROUTE.reset(token)
