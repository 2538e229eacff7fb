"""The values the gear policy feeds the model and gives back (run/gears.py): padded elements, cut lengths, the
gear chosen where list order would choose another, and the load-time task rules."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError, InputShapeError
from paddlex_npu.om.manifest import OMManifest, parse
from paddlex_npu.run.gears import (
    DEFAULT,
    check_output_ranks,
    check_ranges,
    check_task_rules,
    choose_gear,
    cut_back,
    cut_length,
    fit_shape,
    fit_to_ranges,
    pad_to,
    policy_for,
    resize_axis,
    run_with_gears,
)

DET = policy_for("TextDetRunnerPredictor")
REC = policy_for("TextRecRunnerPredictor")


def m(**kw) -> OMManifest:
    return parse(kw, "test")


REC_GEARS = m(mode="dymdims", inputs=[{"name": "x", "shape": [-1, 3, 48, -1]}], gears=[[1, 320], [4, 640]])


def test_rec_pads_the_width_with_pad_value_and_the_batch_with_the_last_row():
    x = np.random.rand(3, 3, 48, 300).astype(np.float32)
    seen = []

    def infer(feeds):
        seen.append(feeds[0].copy())
        return [feeds[0][:, 0, 0, ::8, None]]  # [N, W/8, 1]

    (out,) = run_with_gears(REC_GEARS, [x], REC, infer, pad_value=-1.5)
    (fed,) = seen
    assert fed.shape == (4, 3, 48, 640) and fed.dtype == np.float32
    np.testing.assert_array_equal(fed[:3, :, :, :300], x)
    assert (fed[:, :, :, 300:] == -1.5).all()  # the padded columns hold pad_value, nothing else (not NaN)
    np.testing.assert_array_equal(fed[3, :, :, :300], x[2])  # the padded row repeats the last real one
    assert out.shape == (3, 37, 1)  # 300 wide: (300 + 4 - 1) // 8 = 37 steps of the 80
    np.testing.assert_array_equal(out[:, :, 0], x[:, 0, 0, :296:8])


def test_pad_to_constant_edge_and_no_padding():
    a = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    same = pad_to(a, [1, 1, 2, 3], 9.0, (0, 2, 3))
    assert same is a
    const = pad_to(a, [2, 1, 3, 4], 9.0, (0, 2, 3))
    np.testing.assert_array_equal(const[0], [[[0, 1, 2, 9], [3, 4, 5, 9], [9, 9, 9, 9]]])
    np.testing.assert_array_equal(const[1], const[0])  # batch rows repeat, never pad_value
    edge = pad_to(a, [1, 1, 3, 4], 9.0, (0, 2, 3), mode="edge")
    np.testing.assert_array_equal(edge[0], [[[0, 1, 2, 2], [3, 4, 5, 5], [3, 4, 5, 5]]])
    ints = pad_to(np.ones((1, 2), np.int64), [1, 4], 7, (0, 1))
    assert ints.dtype == np.int64 and ints.tolist() == [[1, 1, 7, 7]]
    # a batch of 1 asked for 3 rows, with batch not paddable: only the other dims pad
    assert pad_to(np.ones((1, 2), np.float32), [3, 2], 0.0, ()).shape == (1, 2)


def test_cut_length_stride_one_whole_stride_and_in_proportion():
    assert cut_length(320, 320, 100) == 100  # stride 1: the real length
    assert cut_length(40, 320, 317) == 40 and cut_length(40, 320, 325) == 41 and cut_length(40, 320, 316) == 39
    assert cut_length(80, 640, 1) == 1  # never below 1
    # no whole stride (320 / 50 = 6.4): in proportion, rounded
    assert cut_length(50, 320, 100) == 16  # 15.625
    assert cut_length(50, 320, 90) == 14  # 14.06
    assert cut_length(50, 320, 1) == 1  # 0.16 -> at least 1
    assert cut_length(0, 320, 100) == 1  # an empty output stays at least 1 long


def test_cut_back_takes_the_solved_output_dims_over_the_stride_rule():
    out = np.arange(4 * 80 * 2, dtype=np.float32).reshape(4, 80, 2)
    asked = []

    def output_dims(index, shapes):
        asked.append((index, shapes))
        return [shapes[0][0], 33, 2]  # what the graph says for these inputs (the stride rule would give 37)

    (cut,) = cut_back([out], [[3, 3, 48, 300]], [[4, 3, 48, 640]], REC, output_dims)
    assert asked == [(0, [[3, 3, 48, 300]])]
    assert cut.shape == (3, 33, 2) and cut.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(cut, out[:3, :33])
    (plain,) = cut_back([out], [[3, 3, 48, 300]], [[4, 3, 48, 640]], REC, lambda i, s: None)
    assert plain.shape == (3, 37, 2)  # no dims solved: the stride rule (300 + 3) // 8
    (short,) = cut_back([out], [[3, 3, 48, 300]], [[4, 3, 48, 640]], REC, lambda i, s: [3])
    assert short.shape == (3, 37, 2)  # dims without that axis: the stride rule too


def test_choose_gear_takes_the_fewest_padded_elements_not_the_first_listed():
    hw = m(mode="dymhw", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[[640, 640], [320, 960], [320, 640]])
    assert choose_gear(hw, [[1, 3, 300, 600]], DET) == [[1, 3, 320, 640]]
    assert choose_gear(hw, [[1, 3, 300, 700]], DET) == [[1, 3, 320, 960]]  # 307,200 < 409,600 elements
    assert choose_gear(hw, [[1, 3, 400, 600]], DET) == [[1, 3, 640, 640]]
    batch = m(mode="dymbatch", inputs=[{"name": "x", "shape": [-1, 8]}], gears=[[8], [2], [4]])
    assert choose_gear(batch, [[3, 8]], DEFAULT) == [[4, 8]]
    assert choose_gear(batch, [[2, 8]], DEFAULT) == [[2, 8]]


def test_a_model_with_two_batch_outputs_that_is_no_detector_keeps_both_whole():
    """Only a detection model's second output is a box count; any other model's outputs are cut by batch."""
    man = m(mode="dymbatch", inputs=[{"name": "x", "shape": [-1, 4]}], gears=[[1], [4]])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    def infer(feeds):
        f = feeds[0]
        return [f * 2, f.sum(axis=1).astype(np.int32)]

    a, b = run_with_gears(man, [x], DEFAULT, infer)
    np.testing.assert_array_equal(a, x * 2)
    assert b.tolist() == [6, 22, 38]
    one = run_with_gears(man, [x[:1]], DEFAULT, infer)  # the exact gear: nothing cut
    assert [o.shape for o in one] == [(1, 4), (1,)]


def test_detection_keeps_every_box_when_the_batch_is_exact():
    det = policy_for("DetRunnerPredictor")
    boxes, num = np.ones((5, 6), np.float32), np.array([2, 3], np.int32)
    kept = cut_back([boxes, num], [[2, 3, 64, 64]], [[2, 3, 64, 64]], det)
    assert kept[0].shape == (5, 6) and kept[1].tolist() == [2, 3]
    kept = cut_back([boxes, num, np.zeros((5, 8, 8))], [[1, 3, 64, 64]], [[2, 3, 64, 64]], det)
    assert kept[0].shape == (2, 6) and kept[1].tolist() == [2] and kept[2].shape == (2, 8, 8)


def _det_gears(mode, *gears):
    if mode == "static":
        return m(mode="static", inputs=[{"name": "x", "shape": [1, 3, *gears[0]]}])
    return m(mode=mode, inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[list(g) for g in gears])


def test_check_task_rules_refuses_text_detection_gears_off_32_multiples():
    check_task_rules(_det_gears("dymhw", (320, 320), (640, 960)), DET, "det")
    check_task_rules(_det_gears("static", (640, 640)), DET, "det")
    with pytest.raises(ConfigError, match=r"det: the dymhw gear x:1,3,640,970 has W=970, not a multiple of 32"):
        check_task_rules(_det_gears("dymhw", (320, 320), (640, 970)), DET, "det")
    with pytest.raises(ConfigError, match=r"the dymhw gear x:1,3,330,330 has H=330, W=330, not a multiple of 32"):
        check_task_rules(_det_gears("dymhw", (330, 330), (640, 640)), DET, "det")
    with pytest.raises(ConfigError, match=r"the static gear x:1,3,100,64 has H=100"):
        check_task_rules(_det_gears("static", (100, 64)), DET, "det")
    with pytest.raises(ConfigError, match="text detection needs 32-multiples there"):
        check_task_rules(_det_gears("dymhw", (32, 48), (64, 64)), DET, "det")
    # no rule for recognition, and none for dymshape (its ranges are checked per call)
    check_task_rules(_det_gears("dymhw", (48, 330), (48, 650)), REC, "rec")
    check_task_rules(m(mode="dymshape", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}]), DET, "det")
    # inputs of another rank (a scale factor [N, 2]) are not images: not checked
    two = m(
        mode="dymdims",
        inputs=[{"name": "x", "shape": [1, 3, -1, -1], "format": "ND"}, {"name": "s", "shape": [1, -1]}],
        gears=[[32, 64, 3], [64, 64, 5]],
    )
    check_task_rules(two, DET, "det")


def test_resize_axis_matches_opencv_inter_linear_up_and_down_on_any_axis():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    a = rng.random((37, 53), dtype=np.float32)
    for h, w in ((16, 20), (80, 100), (37, 7), (1, 53)):
        want = cv2.resize(a, (w, h), interpolation=cv2.INTER_LINEAR)
        got = resize_axis(resize_axis(a, 0, h), 1, w)
        assert got.shape == (h, w) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5)
    cube = rng.random((2, 9, 11), dtype=np.float32)
    np.testing.assert_allclose(
        resize_axis(cube, 2, 4)[1], cv2.resize(cube[1], (4, 9), interpolation=cv2.INTER_LINEAR), atol=1e-5
    )
    assert resize_axis(a, 0, 37) is a


SHAPE_REC = m(
    mode="dymshape", inputs=[{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 8], [3, 3], [48, 48], [16, 320]]}]
)


def test_check_ranges_says_what_fit_would_do_or_why_it_cannot():
    tail = "limit_side_len / max_side_limit, the batch size)"
    with pytest.raises(
        InputShapeError,
        match=r"of shape \[1, 3, 48, 400\] is outside .*"
        + r"\(backend_config oversize: 'fit' resizes it down into the ranges\)$",
    ):
        check_ranges(SHAPE_REC, [[1, 3, 48, 400]], REC)
    with pytest.raises(
        InputShapeError,
        match=r"\(oversize 'fit' shrinks only the image or line size, and that does not bring it inside\)$",
    ):
        check_ranges(SHAPE_REC, [[9, 3, 48, 100]], REC, oversize="fit")
    with pytest.raises(InputShapeError, match=tail.replace("(", r"\(").replace(")", r"\)") + "$"):
        check_ranges(SHAPE_REC, [[1, 3, 48, 400]], DEFAULT)
    check_ranges(SHAPE_REC, [[8, 3, 48, 320]], REC)


def test_fit_to_ranges_shrinks_bounded_dims_only_and_checks_every_input():
    det = m(
        mode="dymshape",
        inputs=[
            {"name": "x", "shape": [1, 3, -1, -1], "range": [[1, 1], [3, 3], [32, -1], [32, 640]]},
            {"name": "s", "shape": [1, 2]},
        ],
    )
    assert fit_to_ranges(det, [[1, 3, 2000, 1280], [1, 2]], DET) == [1, 3, 992, 640]  # H unbounded: scaled with W
    assert fit_to_ranges(det, [[1, 3, 2000, 1280], [1, 3]], DET) is None  # the second input is outside anyway
    assert fit_to_ranges(det, [[1, 3, 2016, 608], [1, 2]], DET) is None  # nothing to shrink
    rank3 = m(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 48, -1], "range": [[1, 4], [48, 48], [16, 320]]}])
    assert fit_to_ranges(rank3, [[1, 48, 5000]], REC) is None  # fit is for NCHW images and lines only
    assert fit_to_ranges(SHAPE_REC, [[1, 3, 48, 5000]], REC) == [1, 3, 48, 320]


def test_fit_shape_skips_gears_it_cannot_use():
    rank3 = m(mode="dymdims", inputs=[{"name": "x", "shape": [-1, 48, -1], "format": "ND"}], gears=[[1, 320], [4, 640]])
    assert fit_shape(rank3, [[1, 48, 5000]], REC) is None
    hw = m(mode="dymhw", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[[640, 640], [960, 960]])
    assert fit_shape(hw, [[1, 3, 20, 5000]], DET) is None  # 20 rows would have to grow to 32
    assert fit_shape(hw, [[1, 3, 1000, 5000]], DET) == [1, 3, 192, 960]
    two = m(
        mode="dymdims",
        inputs=[{"name": "x", "shape": [1, 3, -1, -1], "format": "ND"}, {"name": "s", "shape": [1, 2], "format": "ND"}],
        gears=[[640, 640], [960, 960]],
    )
    assert fit_shape(two, [[1, 3, 1000, 5000], [1, 2]], DET) == [1, 3, 192, 960]
    assert fit_shape(two, [[1, 3, 1000, 5000], [1, 3]], DET) is None  # the second input fits no gear


def test_pad_to_repeats_batch_rows_whatever_the_other_dims():
    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(pad_to(a, [3, 5], 0.0, (0,)), [a[0], a[1], a[1]])


def test_cut_back_of_scalar_inputs_and_outputs_that_are_not_batch_major():
    out = np.arange(6).reshape(2, 3)
    kept = cut_back([out], [[]], [[]], DEFAULT)  # a rank-0 input: batch 1 both, nothing cut
    np.testing.assert_array_equal(kept[0], out)
    vocab = np.arange(7)
    rows, table = cut_back([np.zeros((4, 2)), vocab], [[3, 2]], [[4, 2]], DEFAULT)
    assert rows.shape == (3, 2) and table.tolist() == list(range(7))  # dim 0 is not the batch: kept whole
    assert cut_back([], [[1, 3, 48, 300]], [[1, 3, 48, 640]], REC) == []


def test_detection_keeps_the_counts_of_images_without_boxes():
    det = policy_for("DetRunnerPredictor")
    boxes, num = np.ones((1, 6), np.float32), np.array([0, 0, 1, 0], np.int32)
    kept = cut_back([boxes, num], [[2, 3, 64, 64]], [[4, 3, 64, 64]], det)
    assert kept[0].shape == (0, 6) and kept[1].tolist() == [0, 0]


def test_a_batch_above_every_gear_is_split_not_fitted():
    seen, fits = [], []

    def infer(feeds):
        seen.append(feeds[0].shape)
        return [feeds[0][:, 0, 0, ::8, None]]

    x = np.random.rand(6, 3, 48, 320).astype(np.float32)
    (out,) = run_with_gears(REC_GEARS, [x], REC, infer, oversize="fit", on_fit=lambda r, f: fits.append((r, f)))
    assert fits == [] and seen == [(4, 3, 48, 640), (4, 3, 48, 640)] and out.shape == (6, 40, 1)


def test_split_batches_keep_pad_value_and_the_solved_output_dims():
    seen = []

    def infer(feeds):
        seen.append(feeds[0].copy())
        return [feeds[0][:, 0, 0, ::8, None]]

    x = np.random.rand(6, 3, 48, 300).astype(np.float32)
    (out,) = run_with_gears(REC_GEARS, [x], REC, infer, pad_value=-2.0, output_dims=lambda i, s: [s[0][0], 33, 1])
    assert out.shape == (6, 33, 1) and len(seen) == 2
    assert all((f[:, :, :, 300:] == -2.0).all() for f in seen)
    (plain,) = run_with_gears(REC_GEARS, [x[:2]], REC, infer, output_dims=lambda i, s: [s[0][0], 33, 1])
    assert plain.shape == (2, 33, 1) and (seen[-1][:, :, :, 300:] == 0).all()  # pad_value defaults to 0


def test_check_output_ranks_refuses_another_model():
    check_output_ranks([[1, 40, 97], [5]], ["logits", "x"], REC, "rec")
    check_output_ranks([[]], ["unknown"], REC, "rec")  # no descriptor dims: nothing to compare
    with pytest.raises(
        ConfigError, match=r"rec: output 0 \(p\) has rank 4 \(\[1, 1, 8, 8\]\), text recognition gives rank 3"
    ):
        check_output_ranks([[1, 1, 8, 8]], ["p"], REC, "rec")


def test_fitted_sizes_are_rounded_down_to_the_task_s_multiple_and_keep_dims_already_small():
    hw = m(mode="dymhw", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[[640, 640], [960, 960]])
    assert fit_shape(hw, [[1, 3, 1100, 5000]], DET) == [1, 3, 192, 960]  # 211.2 rows -> 192, a 32-multiple
    assert fit_shape(hw, [[1, 3, 32, 5000]], DET) == [1, 3, 32, 960]  # 32 rows stay 32 (the multiple itself)
    odd = m(mode="dymdims", inputs=[{"name": "x", "shape": [1, 3, 48, -1]}], gears=[[61], [125]])
    assert fit_shape(odd, [[1, 3, 48, 5000]], REC) == [1, 3, 48, 125]  # recognition: any width, no multiple


def test_an_input_of_another_rank_fits_no_gear():
    with pytest.raises(InputShapeError, match=r"dims by rank \{3: \(0,\)\}"):
        choose_gear(REC_GEARS, [[1, 48, 300]], REC)


def test_fewest_padded_elements_is_not_the_smallest_shape_in_list_order():
    hw = m(mode="dymhw", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[[320, 960], [640, 320]])
    assert choose_gear(hw, [[1, 3, 300, 300]], DET) == [[1, 3, 640, 320]]  # 204,800 elements, not 307,200


def test_edge_padding_of_an_empty_array_pads_with_the_constant():
    out = pad_to(np.zeros((1, 0), np.float32), [1, 4], 5.0, (0, 1), mode="edge")
    assert out.tolist() == [[5.0, 5.0, 5.0, 5.0]]


def test_a_fitted_run_keeps_every_input_and_maps_nothing_back_when_there_are_no_outputs():
    two = m(
        mode="dymdims",
        inputs=[{"name": "x", "shape": [1, 3, -1, -1], "format": "ND"}, {"name": "s", "shape": [1, 2], "format": "ND"}],
        gears=[[640, 640], [960, 960]],
    )
    seen = []

    def infer(feeds):
        seen.append([f.shape for f in feeds])
        return []

    img, scale = np.zeros((1, 3, 1100, 5000), np.float32), np.ones((1, 2), np.float32)
    assert run_with_gears(two, [img, scale], DET, infer, oversize="fit") == []
    assert seen == [[(1, 3, 960, 960), (1, 2)]]  # fitted to 192 x 960, padded to the gear


def test_scalar_inputs_are_never_batched_or_split():
    static = m(mode="static", inputs=[{"name": "k", "shape": []}])
    (out,) = run_with_gears(static, [np.array(3.0, np.float32)], DEFAULT, lambda f: [f[0] * 2])
    assert out.shape == () and float(out) == 6.0
    man = m(mode="dymbatch", inputs=[{"name": "x", "shape": [-1, 4]}, {"name": "k", "shape": []}], gears=[[1], [4]])
    seen = []

    def infer(feeds):
        seen.append((feeds[0].shape, feeds[1].shape))
        return [feeds[0] * feeds[1]]

    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    (y,) = run_with_gears(man, [x, np.array(2.0, np.float32)], DEFAULT, infer)
    np.testing.assert_array_equal(y, x * 2)
    assert seen == [((4, 4), ()), ((1, 4), ())]
    # a scalar first input (a loop step's counter): the batched input after it sets the batch, split and cut back
    first = m(mode="dymbatch", inputs=[{"name": "k", "shape": []}, {"name": "x", "shape": [-1, 4]}], gears=[[1], [4]])
    seen.clear()
    (y,) = run_with_gears(first, [np.array(2.0, np.float32), x], DEFAULT, lambda f: infer(f[::-1]))
    np.testing.assert_array_equal(y, x * 2)
    assert seen == [((4, 4), ()), ((1, 4), ())]  # 4 rows, then the fifth on the batch-1 gear
    (y,) = run_with_gears(first, [np.array(2.0, np.float32), x[:3]], DEFAULT, lambda f: infer(f[::-1]))
    np.testing.assert_array_equal(y, x[:3] * 2)  # padded to the batch-4 gear and cut back to 3 rows
    assert seen == [((4, 4), ()), ((1, 4), ()), ((4, 4), ())]


def test_exact_shapes_run_at_their_shape_and_refuse_any_other():
    """The exact-shapes policy pads nothing, not even the batch: the static shape runs as it is, any other shape
    is refused naming the OM's shapes (no input sets a batch to split by)."""
    from paddlex_npu.run import tasks
    from paddlex_npu.run.gears import _POLICIES

    exact = _POLICIES[tasks.EXACT]
    static = m(mode="static", inputs=[{"name": "x", "shape": [2, 4]}])
    x = np.ones((2, 4), np.float32)
    (y,) = run_with_gears(static, [x], exact, lambda f: [f[0] + 1])
    np.testing.assert_array_equal(y, x + 1)
    with pytest.raises(InputShapeError, match="fit none of the OM"):
        run_with_gears(static, [np.ones((1, 4), np.float32)], exact, lambda f: [f[0]])
