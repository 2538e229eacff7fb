"""The CPU reference runtime honours the ais_bench ``InferSession`` contract: descriptors, checks, errors."""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest

from paddlex_npu.run.reference import InferSession, dtype
from tests.helpers import raises_acl_failure
from tests.onnx_models import static_model, two_input_model


@pytest.fixture()
def dyn(tmp_path):
    two_input_model(tmp_path / "inference.onnx")
    return InferSession(0, str(tmp_path / "inference.om"))


@pytest.fixture()
def static(tmp_path):
    static_model(tmp_path / "inference.onnx")
    return InferSession(0, str(tmp_path / "inference.om"))


def feeds(n=2, h=8, w=16):
    return [np.random.rand(n, 3, h, w).astype(np.float32), np.arange(n * 2, dtype=np.int32).reshape(n, 2)]


def test_descriptors_mark_dynamic_dims_and_zero_size(dyn):
    ins, outs = dyn.get_inputs(), dyn.get_outputs()
    assert [d.name for d in ins] == ["x", "a"]
    assert ins[0].shape == [-1, 3, -1, -1] and ins[0].datatype == dtype.float32
    assert ins[1].shape == [-1, 2] and ins[1].datatype == dtype.int32
    assert all(d.size == 0 and d.realsize == 0 for d in ins + outs)
    # GE names a built OM's outputs "<node>:<index>:<tensor>" (correction 32; hicann/ge net_output_pass.cc:204-205)
    assert [d.name for d in outs] == ["Mul_0:0:x_out", "Identity_1:0:a_out"]
    assert dyn.outputs_names == [d.name for d in outs]  # ais_bench's interface.py: the descriptors' names
    named = dict(zip(dyn.outputs_names, dyn.infer(feeds(), mode="dymshape", custom_sizes=[10000, 1000])))
    with pytest.raises(KeyError):  # code that looks an output up by its ONNX name fails, as on a box
        named["x_out"]


def test_static_descriptors_have_byte_sizes(static):
    (d,) = static.get_inputs()
    assert d.shape == [1, 4] and d.size == d.realsize == 16
    assert static.get_outputs()[0].size == 16


def test_dymshape_runs_the_real_model_in_output_order(dyn, tmp_path):
    f = feeds()
    out = dyn.infer(f, mode="dymshape", custom_sizes=[10000, 1000])
    ref = ort.InferenceSession(str(tmp_path / "inference.onnx")).run(None, {"x": f[0], "a": f[1]})
    assert [o.dtype for o in out] == [np.float32, np.int32]
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])
    assert dyn.get_inputs()[0].realsize == f[0].nbytes  # realsize follows the current shapes


def test_static_mode(static):
    (y,) = static.infer([np.zeros((1, 4), np.float32)])
    np.testing.assert_array_equal(y, np.ones((1, 4), np.float32))


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        ((np.zeros(3),), ValueError, "not a list"),
        ([], ValueError, "list is empty"),
    ],
)
def test_feeds_must_be_a_non_empty_list(dyn, bad, exc, match):
    with pytest.raises(exc, match=match):
        dyn.infer(list(bad) if isinstance(bad, list) else bad, mode="dymshape")


def test_feed_types(dyn):
    with pytest.raises(RuntimeError, match="type:.*invalid"):
        dyn.infer([[1.0, 2.0], np.zeros((1, 2), np.int32)], mode="dymshape")


@pytest.mark.parametrize(
    "sizes, exc, match",
    [
        (0, ValueError, "value:0 of custom_sizes is out of range"),
        (-5, ValueError, "value:-5 of custom_sizes is out of range"),
        (np.int64(100), TypeError, "is not a integer"),
        (1.5, TypeError, "is not a integer"),
        ([100, "x"], ValueError, "some value in list is not the expected type"),
        ([], ValueError, "the length of custom_sizes list must be in"),
        (None, ValueError, "custom_sizes can not be None in dymshape mode"),
        (17 * 1024**3, ValueError, "of custom_sizes is out of range"),
    ],
)
def test_custom_sizes_validation(dyn, sizes, exc, match):
    with pytest.raises(exc, match=match):
        dyn.infer(feeds(), mode="dymshape", custom_sizes=sizes)


def test_bad_mode_and_out_array(dyn):
    with pytest.raises(ValueError, match="infer mode is illegal"):
        dyn.infer(feeds(), mode="dynamic")
    with pytest.raises(TypeError, match="is not a bool"):
        dyn.infer(feeds(), mode="dymshape", out_array=1)


def test_output_larger_than_reserved(dyn, capsys):
    with raises_acl_failure(capsys, r"output 0 \(Mul_0:0:x_out\) needs 3072 bytes, larger than the 100"):
        dyn.infer(feeds(2, 8, 16), mode="dymshape", custom_sizes=100)


def test_byte_size_must_match_the_model_dtype(static, capsys):
    with raises_acl_failure(capsys, "in size:32 needsize:16 not match"):
        static.infer([np.zeros((1, 4), np.float64)])


def test_static_mode_on_a_range_model_fails_like_the_device(dyn, capsys):
    with raises_acl_failure(capsys, "needsize:0"):
        dyn.infer(feeds(), mode="static")


def test_gear_modes_on_a_range_model(dyn):
    with pytest.raises(RuntimeError, match="not a dymbatch model! this OM was built as dymshape"):
        dyn.infer(feeds(), mode="dymbatch")


def test_input_count(dyn):
    with pytest.raises(RuntimeError, match="nums not matched"):
        dyn.infer(feeds()[:1], mode="dymshape")


def test_shape_outside_range(tmp_path, capsys):
    two_input_model(tmp_path / "inference.onnx")
    manifest = {
        "mode": "dymshape",
        "inputs": [
            {"name": "x", "shape": [-1, 3, -1, -1], "range": [[1, 4], [3, 3], [8, 64], [8, 64]]},
            {"name": "a", "dtype": "int32", "shape": [-1, 2], "range": [[1, 4], [2, 2]]},
        ],
    }
    s = InferSession(0, str(tmp_path / "inference.om"), manifest=manifest)
    s.infer(feeds(2, 8, 64), mode="dymshape", custom_sizes=10**6)
    with raises_acl_failure(capsys, r"shape \[2, 3, 8, 128\] is outside the range .*\[1~4,3,8~64,8~64\]"):
        s.infer(feeds(2, 8, 128), mode="dymshape", custom_sizes=10**6)
    with raises_acl_failure(capsys, "outside the range"):
        s.infer([np.zeros((1, 4, 8, 8), np.float32), np.zeros((1, 2), np.int32)], mode="dymshape")


def test_illegal_dynamic_shape_string(dyn):
    with pytest.raises(RuntimeError, match="illegal"):
        dyn.set_dynamic_shape("x:1,3,0,8;a:1,2")
    with pytest.raises(RuntimeError, match="illegal"):
        dyn.set_dynamic_shape("x:1,1,1,1,1,1,1;a:1,2")


def test_constructor_checks(tmp_path):
    two_input_model(tmp_path / "inference.onnx")
    with pytest.raises(RuntimeError, match="empty model path"):
        InferSession(0, "")
    with pytest.raises(ValueError, match="not an OM file"):
        InferSession(0, str(tmp_path / "inference.onnx"))
    with pytest.raises(ValueError, match=r"device_id:256 out of range \[0, 255\]"):
        InferSession(256, str(tmp_path / "inference.om"))
    with pytest.raises(TypeError, match="device_id:'0' is not a integer"):
        InferSession("0", str(tmp_path / "inference.om"))
    with pytest.raises(ValueError, match=r"loop:0 out of range \[1, 100000\]"):
        InferSession(0, str(tmp_path / "inference.om"), loop=0)
    with pytest.raises(RuntimeError, match="no ONNX model"):
        InferSession(0, str(tmp_path / "other.om"))


def test_free_resource_and_summary(dyn):
    before = time.perf_counter()
    dyn.infer(feeds(), mode="dymshape", custom_sizes=10**6)
    dyn.infer(feeds(), mode="dymshape", custom_sizes=10**6)
    after_ms = (time.perf_counter() - before) * 1000.0
    (s1, e1), (s2, e2) = dyn.summary().exec_time_list
    assert 0 < s1 < e1 <= s2 < e2  # one (start, end) per execution, in order, since the session began
    assert e2 - s1 <= after_ms + 1.0  # and within the time the two calls took
    dyn.free_resource()
    with pytest.raises(RuntimeError, match="freed"):
        dyn.infer(feeds(), mode="dymshape")


@pytest.mark.parametrize("pinned", [False, True])
def test_a_static_output_through_an_if_of_two_ranks_is_of_unknown_rank_unless_pinned(tmp_path, pinned):
    """GE infers a static OM's output shapes itself, ignoring the ONNX's annotations: an ``If`` whose branches
    return ``[]`` and ``[1]`` merges to UNKNOWN_RANK (correction 33; hicann/ge
    ``docs/en/design/features/infer_shape.md:300``), which ACL reports as ``[-2]`` and the runner refuses for a
    static OM; a ``Reshape`` to a constant shape types it again. The ONNX declares ``y`` as ``[1]`` either way."""
    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.run.runner import build_om_runner
    from tests.onnx_models import if_rank_model, tiny_package

    tiny_package(tmp_path, lambda p: if_rank_model(p, pinned=pinned))
    static = {"mode": "static", "inputs": [{"name": "x", "shape": [1, 4], "format": "ND"}], "outputs": ["y"]}
    (y,) = InferSession(0, str(tmp_path / "inference.om"), manifest=static).get_outputs()
    assert y.name == ("pin:0:y" if pinned else "plus_one:0:y")
    assert y.shape == ([1] if pinned else [-2]) and y.size == (4 if pinned else 0)
    config = OMBackendConfig(manifest=static)
    if pinned:
        runner = build_om_runner(tmp_path, runtime="reference", device_id=0, config=config)
        assert runner(x=[np.ones((1, 4), np.float32)])[0].tolist() == [2.0]
        runner.close()
    else:
        with pytest.raises(ConfigError, match=r"static OM has outputs \['plus_one:0:y'\] whose shape is not fixed"):
            build_om_runner(tmp_path, runtime="reference", device_id=0, config=config)
