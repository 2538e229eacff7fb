"""Tiny ONNX graphs for contract tests of the session and the runner."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import onnx
from onnx import TensorProto, helper


def _save(graph, path: Path, opsets=(("", 13),)) -> Path:
    """``graph`` as an ONNX file at ``path`` (IR 8, the given (domain, version) opsets)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


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
    return _save(graph, path)


def static_model(path: Path) -> Path:
    """A static model: ``x`` float32 [1,4] -> ``y`` = x + 1."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "static", [x], [y], initializer=[one])
    return _save(graph, path)


def image_model(path: Path) -> Path:
    """One NCHW image ``x`` float32 [N,3,H,W] -> ``y`` = x * 2."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return _save(helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"])], "image", [x], [y], [two]), path)


def small_input_first_model(path: Path) -> Path:
    """Inputs ``s`` float32 [1,2] (rank 2, first) then ``x`` float32 [1,3,H,W]; ``y`` = x * 2, ``t`` = s."""
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "H", "W"])
    t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 2])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"]), helper.make_node("Identity", ["s"], ["t"])]
    return _save(helper.make_graph(nodes, "small_first", [s, x], [y, t], [two]), path)


def nonzero_model(path: Path) -> Path:
    """A data-dependent output, as NMS boxes are: ``x`` float32 [1,4] -> ``idx`` = NonZero(x) int64 [2, K]
    (K: how many values are non-zero) and ``y`` = x + 1 [1,4]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2, "K"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [helper.make_node("NonZero", ["x"], ["idx"]), helper.make_node("Add", ["x", "one"], ["y"])]
    return _save(helper.make_graph(nodes, "nonzero", [x], [idx, y], [one]), path)


def add_model(path: Path) -> Path:
    """ais_bench's own test model (``test/generate_add_model.py``): ``input1`` + ``input2`` -> ``output``, all float32
    [N,3,H,W] (upstream writes the dynamic dims as -1; symbolic names here, which ONNX Runtime reads the same)."""
    shape = ["N", 3, "H", "W"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("input1", "input2")]
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)
    node = helper.make_node("Add", ["input1", "input2"], ["output"], name="add1")
    return _save(helper.make_graph([node], "test-add-model", inputs, [output]), path, (("", 11),))


def tiny_package(folder: Path, model: Callable[[Path], Path] = two_input_model, name: str = "test") -> Path:
    """A PaddleX model folder as the route reads it: ``inference.yml`` (``Global.model_name``) beside the
    ``inference.onnx`` of one of the graphs above (no manifest: the runtime derives one)."""
    model(folder / "inference.onnx")
    (folder / "inference.yml").write_text(f"Global:\n  model_name: {name}\n")
    return folder


def rec_model(path: Path) -> Path:
    """A text-recognition-shaped model: ``x`` float32 [N,3,8,W] -> ``y`` [N, T, 3], T = ceil(W / 4): the max of
    each 8x4 window (ceil_mode: a last, partial window where W is not a multiple of 4), steps before channels."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T", 3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[8, 4], strides=[8, 4], ceil_mode=1),
        helper.make_node("Squeeze", ["p", "axes"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[0, 2, 1]),
    ]
    return _save(helper.make_graph(nodes, "rec", [x], [y], [axes]), path)


def ctc_reduced_model(path: Path) -> Path:
    """A recognition model whose CTC output was reduced (manifest ``reduction``): ``x`` float32 [N,3,8,W] ->
    ``ctc_indices`` int32 [N, W] (the argmax over the channels of the column means) and ``ctc_scores`` float32
    [N, W] (their max)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, "W"])
    ind = helper.make_tensor_value_info("ctc_indices", TensorProto.INT32, ["N", "W"])
    sco = helper.make_tensor_value_info("ctc_scores", TensorProto.FLOAT, ["N", "W"])
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[2], keepdims=0),
        helper.make_node("ArgMax", ["m"], ["a"], axis=1, keepdims=0),
        helper.make_node("Cast", ["a"], ["ctc_indices"], to=TensorProto.INT32),
        helper.make_node("ReduceMax", ["m"], ["ctc_scores"], axes=[1], keepdims=0),
    ]
    return _save(helper.make_graph(nodes, "ctc", [x], [ind, sco]), path)


def contrib_model(path: Path) -> Path:
    """Outputs ONNX shape inference cannot size: ``x`` float32 [N,4] -> ``y`` = com.microsoft Gelu(x) [N,4] (an
    op onnx has no schema for: its output dims stay unknown) and ``idx`` = NonZero(x) unsqueezed, int64 [1,2,K]
    (data-dependent)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 2, "K"])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft"),
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Unsqueeze", ["nz", "axes"], ["idx"]),
    ]
    graph = helper.make_graph(nodes, "contrib", [x], [y, idx], [axes])
    return _save(graph, path, (("", 13), ("com.microsoft", 1)))


def gelu_model(path: Path) -> Path:
    """``x`` float32 [N,4] -> ``y`` = com.microsoft Gelu(x) [N,4]: an op onnx has no schema for, so ONNX shape
    inference leaves ``y``'s dims unknown (ONNX Runtime runs it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")], "gelu", [x], [y])
    return _save(graph, path, (("", 13), ("com.microsoft", 1)))


def gray_model(path: Path) -> Path:
    """One-channel images: ``x`` float32 [N,1,H,W] -> ``y`` = x * 2."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, "H", "W"])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return _save(helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"])], "gray", [x], [y], [two]), path)


def empty_output_model(path: Path) -> Path:
    """A static model with an empty output: ``x`` float32 [1,4] -> ``y`` = x[:, 0:0], [1, 0]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 0])
    bounds = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("start", 0), ("end", 0), ("axis", 1))]
    node = helper.make_node("Slice", ["x", "start", "end", "axis"], ["y"])
    return _save(helper.make_graph([node], "empty", [x], [y], bounds), path)


def one_op_model(path: Path, op: str, opset: int = 13, **attrs) -> Path:
    """``x`` float32 [N,4] -> ``y`` = ``op``(x) (node name ``the_<op>``), for the ATC operator check."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info(
        "y", TensorProto.FLOAT if op not in ("ArgMax", "ArgMin") else TensorProto.INT64, None
    )
    node = helper.make_node(op, ["x"], ["y"], name=f"the_{op}", **attrs)
    return _save(helper.make_graph([node], op.lower(), [x], [y]), path, (("", opset),))


def loop_model(path: Path) -> Path:
    """A data-dependent decoder as SLANet's is: ``x`` float32 [N,4]; a Loop (trip count 1024) adds x to ``y`` and 1
    to a counter ``c`` while c < sum(x > 0.5) + 1 (the input values decide the steps), stacks c per step (a scan
    output ``cs`` [K, 1]); after it, ``out`` = y * 2 [N,4] and ``steps`` = cs [K, 1]. The body reads ``x`` from the
    main graph by name."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [
            helper.make_node("Add", ["y_in", "x"], ["y_out"]),
            helper.make_node("Add", ["c_in", "one"], ["c_out"]),
            helper.make_node("Less", ["c_out", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["c_out"], ["c_scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", i64, []),
            helper.make_tensor_value_info("cond_in", b, []),
            helper.make_tensor_value_info("y_in", f, ["N", 4]),
            helper.make_tensor_value_info("c_in", f, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", b, [1]),
            helper.make_tensor_value_info("y_out", f, ["N", 4]),
            helper.make_tensor_value_info("c_out", f, [1]),
            helper.make_tensor_value_info("c_scan", f, [1]),
        ],
        [helper.make_tensor("one", f, [1], [1.0])],
    )
    const = helper.make_tensor
    nodes = [
        helper.make_node("Constant", [], ["M"], value=const("m", i64, [], [1024])),
        helper.make_node("Constant", [], ["cond0"], value=const("t", b, [], [True])),
        helper.make_node("Constant", [], ["c0"], value=const("z", f, [1], [0.0])),
        helper.make_node("Constant", [], ["half"], value=const("h", f, [], [0.5])),
        helper.make_node("Mul", ["x", "zero"], ["y0"]),
        helper.make_node("Greater", ["x", "half"], ["big"]),
        helper.make_node("Cast", ["big"], ["bigf"], to=f),
        helper.make_node("ReduceSum", ["bigf"], ["n_big"], keepdims=0),
        helper.make_node("Add", ["n_big", "onef"], ["limit0"]),
        helper.make_node("Reshape", ["limit0", "shape1"], ["limit"]),
        helper.make_node("Loop", ["M", "cond0", "y0", "c0"], ["y_last", "c_last", "cs"], name="decoder", body=body),
        helper.make_node("Mul", ["y_last", "two"], ["out"]),
        helper.make_node("Identity", ["cs"], ["steps"]),
    ]
    graph = helper.make_graph(
        nodes,
        "loop",
        [helper.make_tensor_value_info("x", f, ["N", 4])],
        [helper.make_tensor_value_info("out", f, ["N", 4]), helper.make_tensor_value_info("steps", f, ["K", 1])],
        [
            const("zero", f, [], [0.0]),
            const("onef", f, [], [1.0]),
            const("two", f, [], [2.0]),
            const("shape1", i64, [1], [1]),
        ],
    )
    return _save(graph, path, (("", 13),))


def if_rank_model(path: Path, pinned: bool = False) -> Path:
    """``x`` float32 [1, 4] -> ``y``: an ``If`` on ``sum(x) > 0`` whose then-branch returns a 0-d value and whose
    else-branch a ``[1]`` (as paddle2onnx writes SLANet's stop test), plus 1, declared ``[1]``. ``pinned``: ``y``
    ends in a ``Reshape`` to ``[1]``, as ``convert`` ends a static part's outputs."""
    f = TensorProto.FLOAT
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["t"], value=helper.make_tensor("tv", f, [], [1.0]))],
        "then",
        [],
        [helper.make_tensor_value_info("t", f, [])],
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], value=helper.make_tensor("ev", f, [1], [2.0]))],
        "else",
        [],
        [helper.make_tensor_value_info("e", f, [1])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["picked"], then_branch=then, else_branch=other, name="stop_test"),
        helper.make_node("Add", ["picked", "one"], ["y_open" if pinned else "y"], name="plus_one"),
    ]
    inits = [helper.make_tensor("zero", f, [], [0.0]), helper.make_tensor("one", f, [], [1.0])]
    if pinned:
        nodes.append(helper.make_node("Reshape", ["y_open", "shape"], ["y"], name="pin"))
        inits.append(helper.make_tensor("shape", TensorProto.INT64, [1], [1]))
    graph = helper.make_graph(
        nodes,
        "if_rank",
        [helper.make_tensor_value_info("x", f, [1, 4])],
        [helper.make_tensor_value_info("y", f, [1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def buffer_loop_model(path: Path) -> Path:
    """A decoder written as paddle2onnx writes SLANet's: ``x`` float32 [1, 1]; a Loop (trip count 8) doubles ``acc``
    and writes it into ``buf`` [1, 8] at the step counter ``n`` (``buf[:, n:min(n+1, 8)] = acc`` as ``Slice``,
    ``Range``, ``Expand`` and ``ScatterElements`` from the counter, all int64) while the new value is at most 20,
    the stop test an ``If`` whose branches return a 0-d ``false`` and a ``[1]`` ``true``; outputs ``buf`` and
    ``acc``. The steps depend on ``x``: 0.1 runs 8 (the condition), 0.01 runs 8 (the trip count), 6 runs 2."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    const = helper.make_tensor
    stop = helper.make_graph(
        [helper.make_node("Constant", [], ["no"], value=const("nv", b, [], [False]))],
        "stop",
        [],
        [helper.make_tensor_value_info("no", b, [])],
    )
    go = helper.make_graph(
        [helper.make_node("Constant", [], ["yes"], value=const("yv", b, [1], [True]))],
        "go",
        [],
        [helper.make_tensor_value_info("yes", b, [1])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "twof"], ["acc_out"]),
            helper.make_node("Reshape", ["n_in", "shape1"], ["start"]),
            helper.make_node("Add", ["start", "one64"], ["next"]),
            helper.make_node("Min", ["next", "eight"], ["end"]),
            helper.make_node("Slice", ["buf_in", "start", "end", "axis1"], ["window"]),
            helper.make_node("Shape", ["window"], ["window_shape"]),
            helper.make_node("Unsqueeze", ["acc_out", "axis1"], ["acc2d"]),
            helper.make_node("Expand", ["acc2d", "window_shape"], ["upd"]),
            helper.make_node("Squeeze", ["start"], ["s0"]),
            helper.make_node("Squeeze", ["end"], ["e0"]),
            helper.make_node("Range", ["s0", "e0", "one64s"], ["span"]),
            helper.make_node("Reshape", ["span", "row"], ["idx"]),
            helper.make_node("ScatterElements", ["buf_in", "idx", "upd"], ["buf_out"], axis=1),
            helper.make_node("Add", ["n_in", "one64s"], ["n_out"]),
            helper.make_node("Greater", ["acc_out", "limit"], ["over"]),
            helper.make_node("If", ["over"], ["cond_out"], then_branch=stop, else_branch=go, name="stop_test"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", i64, []),
            helper.make_tensor_value_info("cond_in", b, []),
            helper.make_tensor_value_info("buf_in", f, [1, 8]),
            helper.make_tensor_value_info("acc_in", f, [1]),
            helper.make_tensor_value_info("n_in", i64, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", b, None),
            helper.make_tensor_value_info("buf_out", f, [1, 8]),
            helper.make_tensor_value_info("acc_out", f, [1]),
            helper.make_tensor_value_info("n_out", i64, []),
        ],
        [
            const("twof", f, [], [2.0]),
            const("limit", f, [], [20.0]),
            const("shape1", i64, [1], [1]),
            const("row", i64, [2], [1, 1]),
            const("one64", i64, [1], [1]),
            const("one64s", i64, [], [1]),
            const("eight", i64, [1], [8]),
            const("axis1", i64, [1], [1]),
        ],
    )
    nodes = [
        helper.make_node("Constant", [], ["M"], value=const("m", i64, [], [8])),
        helper.make_node("Constant", [], ["cond0"], value=const("t", b, [], [True])),
        helper.make_node("Constant", [], ["buf0"], value=const("z", f, [1, 8], [0.0] * 8)),
        helper.make_node("Constant", [], ["n0"], value=const("n", i64, [], [0])),
        helper.make_node("Reshape", ["x", "shape1"], ["acc0"]),
        helper.make_node(
            "Loop", ["M", "cond0", "buf0", "acc0", "n0"], ["buf", "acc_last", "n_last"], name="decoder", body=body
        ),
        helper.make_node("Identity", ["acc_last"], ["acc"]),
    ]
    graph = helper.make_graph(
        nodes,
        "buffer_loop",
        [helper.make_tensor_value_info("x", f, [1, 1])],
        [helper.make_tensor_value_info("buf", f, [1, 8]), helper.make_tensor_value_info("acc", f, [1])],
        [const("shape1", i64, [1], [1])],
    )
    return _save(graph, path, (("", 13),))
