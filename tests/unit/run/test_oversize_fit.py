"""Oversize inputs on gear OMs and above dymshape ranges (backend_config ``oversize``): ``fit`` resizes them
down to the largest gear or into the ranges (rec: width squeezed; det: image scaled, DB map scaled back),
``error`` refuses them (pure numpy)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig, validate
from paddlex_npu.errors import ConfigError
from paddlex_npu.om.manifest import parse
from paddlex_npu.run.gears import InputShapeError, fit_shape, policy_for, resize_axis, run_with_gears

DET = policy_for("TextDetRunnerPredictor")
REC = policy_for("TextRecRunnerPredictor")
HW = parse(
    {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[320, 320], [640, 960]]}, "t"
)
DIMS = parse(
    {"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], "gears": [[1, 320], [4, 800]]}, "t"
)


def test_default_is_fit_and_only_error_or_fit_are_accepted():
    assert OMBackendConfig().oversize == "fit"
    assert validate(OMBackendConfig, {"oversize": "error"}, "backend_config").oversize == "error"
    with pytest.raises(ConfigError, match="oversize"):
        validate(OMBackendConfig, {"oversize": "crop"}, "backend_config")


def test_fit_shape_keeps_the_aspect_ratio_in_32_multiples_for_det_and_squeezes_rec_width():
    assert fit_shape(HW, [[1, 3, 1280, 960]], DET) == [1, 3, 640, 480]  # scale 0.5 for both sides
    assert fit_shape(HW, [[1, 3, 704, 1920]], DET) == [1, 3, 352, 960]
    assert fit_shape(DIMS, [[6, 3, 48, 2000]], REC) == [6, 3, 48, 800]  # batch is split later
    assert fit_shape(DIMS, [[6, 3, 48, 2000]], policy_for("ClasRunnerPredictor")) is None


def test_rec_width_is_squeezed_with_one_warning_hook_call_per_input():
    x = np.random.rand(6, 3, 48, 2000).astype(np.float32)
    seen, fits = [], []

    def infer(feeds):
        seen.append(feeds[0].shape)
        n, _, _, w = feeds[0].shape
        return [np.zeros((n, w // 8, 5), np.float32)]

    (out,) = run_with_gears(DIMS, [x], REC, infer, oversize="fit", on_fit=lambda r, f: fits.append((r, f)))
    assert seen == [(4, 3, 48, 800), (4, 3, 48, 800)]  # 6 rows split 4 + 2 (padded to 4)
    assert out.shape == (6, 100, 5)  # CTC steps of the squeezed line: its text, nothing to map back
    assert fits == [([6, 3, 48, 2000], [6, 3, 48, 800])]


def test_det_image_is_scaled_and_the_map_scaled_back_to_the_input_size():
    h, w = 1280, 960
    yy, xx = np.mgrid[0:h, 0:w]
    x = np.stack([(yy < 640) & (xx < 480)] * 3)[None].astype(np.float32)  # a block in the top-left quarter

    def infer(feeds):
        return [feeds[0][:, :1]]  # a DB-like map of the (scaled, padded) input

    (out,) = run_with_gears(HW, [x], DET, infer, oversize="fit")
    assert out.shape == (1, 1, h, w)
    mask = out[0, 0] > 0.5
    assert mask[:630, :470].all() and not mask[650:, :].any() and not mask[:, 490:].any()


def test_error_refuses_and_names_the_fit_option():
    x = np.zeros((1, 3, 1280, 960), np.float32)
    with pytest.raises(InputShapeError, match="oversize: 'fit'"):
        run_with_gears(HW, [x], DET, lambda f: [f[0][:, :1]], oversize="error")


def test_resize_axis_matches_opencv_inter_linear():
    cv2 = pytest.importorskip("cv2")
    a = np.random.rand(37, 53).astype(np.float32)
    want = cv2.resize(a, (20, 16), interpolation=cv2.INTER_LINEAR)
    got = resize_axis(resize_axis(a, 0, 16), 1, 20)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_runner_warns_once_per_model(caplog):
    from paddlex_npu.run.runner import OMRunner

    runner = OMRunner.__new__(OMRunner)
    runner.name, runner.manifest, runner.policy, runner._fit_warned = "m", DIMS, REC, False
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        runner._warn_fit([1, 3, 48, 2000], [1, 3, 48, 800])
        runner._warn_fit([1, 3, 48, 3000], [1, 3, 48, 800])
    warned = [r for r in caplog.records if "oversize 'fit'" in r.getMessage()]
    assert len(warned) == 1 and "width squeezed" in warned[0].getMessage()


RANGES = parse(
    {
        "mode": "dymshape",
        "inputs": [{"name": "x", "shape": [1, 3, -1, -1], "range": [[1, 1], [3, 3], [32, 960], [32, 960]]}],
    },
    "t",
)
REC_RANGES = parse(
    {
        "mode": "dymshape",
        "inputs": [{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 6], [3, 3], [48, 48], [32, 3200]]}],
    },
    "t",
)


def test_dymshape_fit_shrinks_into_the_ranges_and_maps_back():
    """A dymshape OM built with smaller ranges than the pipeline's limits: oversize ``fit`` resizes the input
    into them (det: aspect kept, 32-multiples, map scaled back; rec: width squeezed); inside them, nothing."""
    from paddlex_npu.run.gears import fit_to_ranges, run_in_ranges

    assert fit_to_ranges(RANGES, [[1, 3, 1280, 1920]], DET) == [1, 3, 640, 960]
    assert fit_to_ranges(RANGES, [[1, 3, 640, 960]], DET) is None  # already inside
    assert fit_to_ranges(REC_RANGES, [[6, 3, 48, 4000]], REC) == [6, 3, 48, 3200]
    assert fit_to_ranges(REC_RANGES, [[8, 3, 48, 4000]], REC) is None  # the batch stays out of range
    assert fit_to_ranges(RANGES, [[1, 3, 0, 2000]], DET) is None  # empty: refused as it is, no division by zero
    assert fit_to_ranges(RANGES, [[1, 3, 16, 2000]], DET) is None  # H would have to grow to 32: no fit
    seen, fits = [], []

    def infer(feeds):
        seen.append(feeds[0].shape)
        return [feeds[0][:, :1]]

    x = np.zeros((1, 3, 1280, 1920), np.float32)
    (out,) = run_in_ranges(RANGES, [x], DET, infer, oversize="fit", on_fit=lambda r, f: fits.append(f))
    assert seen == [(1, 3, 640, 960)] and out.shape == (1, 1, 1280, 1920) and fits == [[1, 3, 640, 960]]
    (out,) = run_in_ranges(RANGES, [x[..., :640, :960]], DET, infer, oversize="fit")
    assert seen[-1] == (1, 3, 640, 960) and out.shape == (1, 1, 640, 960)
    with pytest.raises(InputShapeError, match="outside the OM's .*oversize: 'fit' resizes it down into the ranges"):
        run_in_ranges(RANGES, [x], DET, infer, oversize="error")
    with pytest.raises(InputShapeError, match=r"of shape \[8, 3, 48, 4000\] is outside.*does not bring it inside"):
        run_in_ranges(REC_RANGES, [np.zeros((8, 3, 48, 4000), np.float32)], REC, infer, oversize="fit")


def test_a_map_mapped_back_below_one_pixel_keeps_one():
    """A fitted map mapped back to a real size under one pixel keeps one row, never none and never two."""
    from paddlex_npu.run.gears import _map_back

    (out,) = _map_back([np.ones((1, 1, 1, 4), np.float32)], [1, 3, 1, 4], [1, 3, 3, 4], DET)
    assert out.shape == (1, 1, 1, 4)
    (out,) = _map_back([np.ones((1, 1, 2, 4), np.float32)], [1, 3, 4, 4], [1, 3, 2, 4], DET)
    assert out.shape == (1, 1, 4, 4)  # and up by the same rule
