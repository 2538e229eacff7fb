"""reports/route_check.py: selftest's shapes (base and the package's top), native-size rendering, and the
recognition comparison: ctc_scores within the fp16 tolerance, near-ties told from errors by the top-2 margin."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.om import manifest as mf
from paddlex_npu.reports import route_check as rc

REC = "PP-OCRv4_mobile_rec"


def _man(**fields):
    spec = {"schema": mf.SCHEMA, "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], **fields}
    return mf.parse(spec, "test")


def test_the_top_of_a_range_and_the_largest_gear_are_called():
    ranged = _man(
        mode="dymshape",
        inputs=[{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 6], [3, 3], [48, 48], [32, 3200]]}],
    )
    assert rc.call_shapes(ranged, REC) == {"base": [1, 3, 48, 320], "top": [6, 3, 48, 3200]}
    geared = _man(mode="dymdims", gears=[[1, 480], [2, 960], [1, 1280]])
    assert rc.call_shapes(geared, REC)["top"] == [2, 3, 48, 960]  # the most elements
    unbounded = _man(mode="dymshape")  # -1 dims without a range: unbounded, the base size kept
    assert rc.call_shapes(unbounded, REC) == {"base": [1, 3, 48, 320]}


def test_text_is_rendered_at_the_calls_own_size():
    pytest.importorskip("PIL", reason="rendering needs Pillow (the ocr extra)")
    (x,) = rc.render(REC, [2, 3, 48, 960])
    assert x.shape == (2, 3, 48, 960) and x.dtype == np.float32
    ink = (x[0, 0] < 0).mean(axis=0)  # columns with dark pixels: text across the width, not a 4x-upscaled blob
    assert ink[: 960 // 2].any() and ink[960 // 2 :].any()
    assert not np.array_equal(x[0], x[1])  # each sample its own line


def _reduced(path, score=0.9):
    steps = np.asarray([path], np.int32)
    return [steps, np.full(steps.shape, score, np.float32)]


def test_ctc_scores_are_compared_within_the_fp16_tolerance():
    ok = rc.compare(REC, _reduced([0, 3, 0]), _reduced([0, 3, 0], 0.9 + rc.CTC_SCORE_ATOL / 2))
    assert ok.ok and ok.data["ctc_scores_max_abs"] < rc.CTC_SCORE_ATOL
    bad = rc.compare(REC, _reduced([0, 3, 0], 0.5), _reduced([0, 3, 0]))
    assert not bad.ok and "ctc_scores differ by 0.4000 (> 0.03, the fp16 tolerance)" in bad.detail


def _probs(rows):
    return np.asarray([rows], np.float32)


def test_a_text_that_differs_at_a_near_tie_is_told_from_an_error():
    tie = _probs([[0.9, 0.05, 0.05], [0.05, 0.48, 0.47], [0.9, 0.05, 0.05]])  # step 1: 1 and 2 within 0.01
    device = _reduced([0, 2, 0])
    verdict = rc.compare(REC, device, _reduced([0, 1, 0]), probs=lambda: tie)
    assert verdict.ok and verdict.data["near_ties_only"] and "differ only at near-ties" in verdict.detail
    assert verdict.data["differing_steps"][0][:2] == [0, 1] and abs(verdict.data["differing_steps"][0][2] - 0.01) < 1e-6
    clear = _probs([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.9, 0.05, 0.05]])
    error = rc.compare(REC, device, _reduced([0, 1, 0]), probs=lambda: clear)
    assert not error.ok and "top-2 margins [0.85]" in error.detail
    unknown = rc.compare(REC, device, _reduced([0, 1, 0]))  # reduced, no probabilities to tell
    assert not unknown.ok and "no scores to tell a near-tie" in unknown.detail
