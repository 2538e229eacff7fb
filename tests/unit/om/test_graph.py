"""What the ONNX graph tells (:mod:`paddlex_npu.om.graph`): which outputs follow the input values, and the output
dims for given input shapes by strict shape inference (small graphs built here, no runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from paddlex_npu.errors import ShapeInferenceError
from paddlex_npu.om.graph import DATA_DEPENDENT_OPS, _first_error, data_dependent_outputs, load_graph, output_dims

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 13),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _out(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _save(model, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("op", sorted(DATA_DEPENDENT_OPS))
def test_each_data_dependent_op_taints_what_follows_it_unless_its_shape_is_declared(tmp_path, op):
    """``boxes [M, 6]`` after NMS is data-dependent, ``box_num [1]`` is not; a tensor computed from a tainted one is
    tainted too; a declared dim of 0, or no declared shape at all, is not a fixed shape."""
    nodes = [
        helper.make_node(op, ["x"], ["raw"]),
        helper.make_node("Identity", ["raw"], ["boxes"]),  # downstream of the op: tainted
        helper.make_node("Identity", ["raw"], ["box_num"]),
        helper.make_node("Identity", ["raw"], ["zero_rows"]),
        helper.make_node("Identity", ["raw"], ["shapeless"]),
        helper.make_node("Relu", ["x"], ["clean"]),  # not downstream: never reported
    ]
    outputs = [
        _out("boxes", ["M", 6]),
        _out("box_num", [1]),
        _out("zero_rows", [0, 6]),
        _out("shapeless", None),
        _out("clean", ["N", 3, "H", "W"]),
        _out("raw", [2, 3]),
    ]
    path = _save(_model(nodes, [X], outputs), tmp_path / "m.onnx")
    assert data_dependent_outputs(path) == ["boxes", "zero_rows", "shapeless"]


def test_an_op_outside_the_list_taints_nothing(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["y"], ["z"])]
    path = _save(_model(nodes, [X], [_out("z", ["N", 3, "H", "W"])]), tmp_path / "m.onnx")
    assert data_dependent_outputs(path) == []


def _external(tmp_path: Path) -> Path:
    """``y = x + w`` with ``w`` in a separate data file, which is then deleted: the graph alone must be readable."""
    w = numpy_helper.from_array(np.ones((1, 4096), np.float32), "w")  # raw data: what goes to the data file
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4096])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [_out("y", ["N", 4096])], [w])
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    (tmp_path / "ext.data").unlink()
    return path


def test_the_graph_is_read_without_its_weights(tmp_path):
    """Weights stay on disk (they can be GBs): a missing data file does not matter to the graph's questions."""
    path = _external(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 - the check that the data file is really gone
        onnx.load(str(path))
    assert data_dependent_outputs(path) == []
    proto = load_graph(path)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL
    assert output_dims(proto, [[5, 4096]], ["y"]) == [[5, 4096]]


def test_output_dims_follow_the_input_shapes_and_leave_the_proto_alone():
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    a = helper.make_tensor_value_info("a", TensorProto.INT32, ["N", 2])
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"]), helper.make_node("Identity", ["a"], ["b"])]
    proto = _model(nodes, [X, a], [_out("y", None), _out("b", None, TensorProto.INT32)], [two])
    before = proto.SerializeToString()
    assert output_dims(proto, [[2, 3, 64, 96], [2, 2]], ["y", "b"]) == [[2, 3, 64, 96], [2, 2]]
    assert output_dims(proto, [[1, 3, 32, 8], [1, 2]], ["b", "y"]) == [[1, 2], [1, 3, 32, 8]]
    assert proto.SerializeToString() == before  # the shapes went into a copy


def test_dims_that_need_the_input_values_propagated():
    """``ConstantOfShape(Shape(x))``: its dims are known only by data propagation (``data_prop=True``)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["z"])]
    proto = _model(nodes, [X], [_out("z", None)])
    assert output_dims(proto, [[2, 3, 5, 7]], ["z"]) == [[2, 3, 5, 7]]


def test_unknown_dims_and_names_are_0(tmp_path):
    """NonZero's count of kept values is unknown (0); an output inference does not shape at all (an op onnx does
    not know) is unknown too, not a scalar; a name the graph does not output has no dims ([0])."""
    from tests.onnx_models import nonzero_model

    proto = load_graph(nonzero_model(tmp_path / "nz.onnx"))
    assert output_dims(proto, [[1, 4]], ["idx", "y", "nope"]) == [[2, 0], [1, 4], [0]]
    custom = _model(
        [helper.make_node("Foo", ["x"], ["y"], domain="custom.ops")],
        [X],
        [_out("y", None)],
        opsets=(("", 13), ("custom.ops", 1)),
    )
    assert output_dims(custom, [[1, 3, 8, 8]], ["y"]) == [[0]]


def test_a_shape_the_model_cannot_take_is_refused_naming_the_node():
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])
    proto = _model([helper.make_node("Add", ["x", "b"], ["y"], name="the_add")], [X, b], [_out("y", None)])
    assert output_dims(proto, [[1, 3, 4, 4], [1, 4]], ["y"]) == [[1, 3, 4, 4]]
    with pytest.raises(ShapeInferenceError) as info:
        output_dims(proto, [[1, 3, 4, 5], [1, 4]], ["y"])
    assert str(info.value) == "(op_type:Add, node name: the_add): [ShapeInferenceError] Incompatible dimensions"


PREFIX = "[ShapeInferenceError] Inference error(s): "


@pytest.mark.parametrize(
    ("text", "first"),
    [
        # the first line naming a node wins, even one without "Error"
        ("an Error\n  (op_type:Add, node name: a): bad \n(op_type:Mul): worse", "(op_type:Add, node name: a): bad"),
        # the prefix onnx puts before it dropped
        (f"{PREFIX}\n{PREFIX}(op_type:Add, node name: a): bad", "(op_type:Add, node name: a): bad"),
        # no node named: the first line with "Error", not the lines around it
        ("context\n  TypeError one  \nValueError two", "TypeError one"),
        # neither: the whole text, stripped
        ("  nothing to go by \n", "nothing to go by"),
    ],
)
def test_the_first_node_error_of_an_inference_error(text, first):
    assert _first_error(text) == first


def test_the_first_error_is_cut_at_300_characters():
    assert _first_error("op_type:" + "x" * 400) == ("op_type:" + "x" * 400)[:300]
