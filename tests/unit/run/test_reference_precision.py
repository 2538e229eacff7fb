"""run/reference_precision.py: ATC's fp16 (every weight and operator output stored in float16, the operators
--keep_dtype names kept float32) on ONNX Runtime, and the reference runtime running a package at its precision."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from paddlex_npu.run import reference_precision as rp
from paddlex_npu.run.reference import InferSession, numerics


def _model() -> onnx.ModelProto:
    """y = (x * w) + b, then z = y * 1e4 (overflows fp16 for |y| > 6.55), and an int output (ArgMax)."""
    w = numpy_helper.from_array(np.array([1.0 + 2**-13], np.float32), "w")  # rounds to 1.0 in fp16
    big = numpy_helper.from_array(np.array([1e4], np.float32), "big")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "w"], ["y"], name="add"),
        helper.make_node("Mul", ["y", "big"], ["z"], name="scale"),
        helper.make_node("ArgMax", ["y"], ["i"], name="argmax", axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
        ],
        [w, big],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


X = np.array([[0.1, 1.0, 3.0, 7.0]], np.float32)


def test_every_output_and_weight_is_stored_in_fp16():
    y32, z32, i32 = _run(_model(), X)
    model, rounded = rp.fp16_storage(_model())
    y16, z16, i16 = _run(model, X)
    assert rounded == 3  # mul, add, scale: ArgMax's output is int64
    expected = ((X.astype(np.float16).astype(np.float32) * 1.0).astype(np.float16) + np.float16(1.0)).astype(np.float16)
    np.testing.assert_array_equal(y16, expected.astype(np.float32))
    assert not np.array_equal(y16, y32)  # the weight 1 + 2**-13 is 1.0 in fp16
    assert np.isinf(z16[0, 3]) and np.isfinite(z32).all()  # 8e4 is past fp16's 65504
    assert i16.dtype == i32.dtype == np.int64


def test_keep_dtype_keeps_named_operators_and_their_weights_in_fp32():
    model, rounded = rp.fp16_storage(_model(), keep=["mul", "add", "scale"])
    y, z, _ = _run(model, X)
    assert rounded == 0
    y32, z32, _ = _run(_model(), X)
    np.testing.assert_array_equal(z, z32)
    np.testing.assert_array_equal(y, y32)


def test_the_reference_session_runs_a_package_at_its_precision(tmp_path):
    onnx.save(_model(), str(tmp_path / "inference.onnx"))
    man = {
        "schema": "paddlex-npu/om-manifest/1",
        "mode": "static",
        "inputs": [{"name": "x", "shape": [1, 4]}],
        "precision": "fp16",
    }
    from paddlex_npu.om.manifest import SCHEMA

    man["schema"] = SCHEMA
    as_built = InferSession(0, str(tmp_path / "inference.om"), manifest=man, precision="package")
    plain = InferSession(0, str(tmp_path / "inference.om"), manifest=man)
    assert (as_built.precision, plain.precision) == ("fp16", "fp32")
    with numerics("package"):
        assert InferSession(0, str(tmp_path / "inference.om"), manifest=man).precision == "fp16"
    kept = InferSession(0, str(tmp_path / "inference.om"), manifest={**man, "precision": "fp32"}, precision="package")
    assert kept.precision == "fp32"  # --precision fp32 (ATC origin): nothing rounded
    out16, out32 = as_built.infer([X])[1], plain.infer([X])[1]
    assert np.isinf(out16[0, 3]) and np.isfinite(out32).all()


def test_an_empty_resize_scales_constant_and_a_split_s_outputs_stay_runnable():
    """SLANet's encoder (paddle2onnx): Resize's `roi` and `scales` are empty float Constants beside `sizes` (rounded
    behind Casts they no longer read as absent: ONNX Runtime refuses "sizes or scales, not both"), and a Split has
    two float outputs (one Cast pair each, named apart). The fp16 model runs and equals the float16-rounded math."""
    empty = helper.make_tensor("e", TensorProto.FLOAT, [0], [])
    half = helper.make_tensor("h", TensorProto.FLOAT, [1], [1.0 + 2**-13])  # rounds to 1.0
    nodes = [
        helper.make_node("Constant", [], ["roi"], name="c_roi", value=empty),
        helper.make_node("Constant", [], ["scales"], name="c_scales", value=empty),
        helper.make_node("Constant", [], ["w"], name="c_w", value=half),
        helper.make_node(
            "Constant", [], ["sizes"], name="c_sizes", value=numpy_helper.from_array(np.array([1, 1, 2, 4], np.int64))
        ),
        helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["r"], name="resize", mode="nearest"),
        helper.make_node("Split", ["r"], ["a", "b"], name="split", axis=2, num_outputs=2),
        helper.make_node("Mul", ["a", "w"], ["y"], name="mul"),
        helper.make_node("Add", ["y", "b"], ["z"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 1, 1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.array([[[[0.5, 0.25]]]], np.float32)
    fp16, _ = rp.fp16_storage(model)
    (got,) = _run(fp16, x)
    np.testing.assert_array_equal(got, np.repeat(x, 2, axis=-1) * 2)  # w is 1.0 in float16: a + b = 2 * x
