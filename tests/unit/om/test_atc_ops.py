"""convert's ATC operator check (om/atc_ops.py) and the split of a model around its data-dependent Loop
(om/loop_split.py, run/loop.py), on tiny graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from paddlex_npu.om.atc_ops import check_ops
from tests.onnx_models import loop_model, one_op_model


def _check(path, cann="8"):
    return check_ops(onnx.load(str(path)), cann)


def test_an_operator_outside_the_cann_generation_is_refused_by_node(tmp_path):
    mish = one_op_model(tmp_path / "mish.onnx", "Mish", opset=18)
    refused, _ = _check(mish, "7")
    assert [(i.node, i.op) for i in refused] == [("(model)", "opset 18"), ("the_Mish", "Mish")]
    assert "not in CANN 7's ONNX operator list" in refused[1].reason
    assert _check(mish, "8") == ([], [])


def test_argmax_select_last_index_is_refused_and_the_default_passes(tmp_path):
    last = one_op_model(tmp_path / "last.onnx", "ArgMax", axis=1, select_last_index=1)
    (issue,), _ = _check(last)
    assert (issue.node, issue.op) == ("the_ArgMax", "ArgMax") and "select_last_index=1" in issue.reason
    assert _check(one_op_model(tmp_path / "first.onnx", "ArgMax", axis=1)) == ([], [])


def test_ai_cpu_operators_are_reported_not_refused(tmp_path):
    refused, aicpu = _check(one_op_model(tmp_path / "nz.onnx", "NonZero"))
    assert refused == [] and [(i.node, i.op) for i in aicpu] == [("the_NonZero", "NonZero")]


def test_a_loop_is_refused_naming_it_and_the_reason(tmp_path):
    refused, _ = _check(loop_model(tmp_path / "loop.onnx"))
    assert [(i.node, i.op) for i in refused] == [("decoder", "Loop")]
    assert "does not parse a Loop's body" in refused[0].reason


def test_the_load_time_check_names_the_loop_only(tmp_path):
    from paddlex_npu.om.atc_ops import unbuildable_control_flow

    assert [(i.node, i.op) for i in unbuildable_control_flow(onnx.load(str(loop_model(tmp_path / "l.onnx"))))] == [
        ("decoder", "Loop")
    ]
    assert unbuildable_control_flow(onnx.load(str(one_op_model(tmp_path / "m.onnx", "Mish", opset=18)))) == []


def test_an_unknown_cann_generation_is_refused():
    with pytest.raises(ValueError, match="choose one of 7, 8"):
        check_ops(onnx.ModelProto(), "6")


@pytest.mark.parametrize("row", [[0.9, 0.1, 0.7, 0.2], [0.0, 0.0, 0.0, 0.0], [0.6, 0.6, 0.6, 0.6]])
def test_the_split_model_run_by_the_host_loop_equals_the_whole(tmp_path, row):
    import onnxruntime as ort

    from paddlex_npu.build.loop_convert import _ort
    from paddlex_npu.om.loop_split import split_loop
    from paddlex_npu.run.loop import run_split

    path = loop_model(tmp_path / "loop.onnx")
    x = np.array([row], np.float32)
    whole = dict(zip(["out", "steps"], ort.InferenceSession(str(path)).run(None, {"x": x})))
    sg = split_loop(onnx.load(str(path)))
    assert "decoder" == sg.spec.node and sg.spec.outer == ["limit", "x"]
    calls = []
    step = _ort(sg.step)
    got = run_split(sg.spec, _ort(sg.encoder), lambda f: calls.append(1) or step(f), _ort(sg.tail), {"x": x})
    assert len(calls) == int((x > 0.5).sum()) + 1 == len(whole["steps"])
    for name, value in whole.items():
        np.testing.assert_array_equal(got[name], value)
