"""Tiny ONNX graphs for contract tests of the session and the runner."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


def two_input_model(path: Path) -> Path:
    """Inputs in model order ``x`` (float32 [N,3,H,W] dynamic) then ``a`` (int32 [N,2]);
    outputs ``x_out`` = x * 2 (same shape), ``a_out`` = a (int32)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    a = helper.make_tensor_value_info("a", TensorProto.INT32, ["N", 2])
    xo = helper.make_tensor_value_info("x_out", TensorProto.FLOAT, ["N", 3, "H", "W"])
    ao = helper.make_tensor_value_info("a_out", TensorProto.INT32, ["N", 2])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["x_out"]), helper.make_node("Identity", ["a"], ["a_out"])],
        "two_inputs",
        [x, a],
        [xo, ao],
        initializer=[two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def static_model(path: Path) -> Path:
    """A static model: ``x`` float32 [1,4] -> ``y`` = x + 1."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "static", [x], [y], initializer=[one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
