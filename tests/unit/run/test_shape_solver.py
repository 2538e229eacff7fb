"""run/shape_solver.py on tiny ONNX graphs: the output dims it solves, as expressions of the input dims, are the
shapes ONNX Runtime computes when the graph runs; what it cannot solve is None (per output, or per dim where the
input values decide)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from paddlex_npu.om.output_shapes import compile_dim

pytest.importorskip("sympy")  # the reference extra's; requirements/unit.txt installs it

from paddlex_npu.run import shape_solver  # noqa: E402
from paddlex_npu.run.shape_solver import derive  # noqa: E402

SOLVER_LOG = "onnxruntime.tools.symbolic_shape_infer"


def _model(nodes: list, inputs: list, outputs: list, inits: Sequence[Any] = (), opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name: str, shape: Optional[list], elem: int = TensorProto.FLOAT) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _ints(name: str, values: list) -> Any:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _evaluate(dims: List[Any], values: Dict[str, int]) -> List[int]:
    return [d if isinstance(d, int) else compile_dim(d)(values) for d in dims]


def _run_shapes(model: onnx.ModelProto, *shapes: tuple) -> List[tuple]:
    """The output shapes ONNX Runtime computes for inputs of ``shapes``."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros(s, np.float32) for i, s in zip(sess.get_inputs(), shapes)}
    return [tuple(o.shape) for o in sess.run(None, feeds)]


# ---- ConvTranspose (DB detectors' upsampling): onnxruntime's solver has no rule for it, ours is ONNX's formula --
WEIGHT = numpy_helper.from_array(np.full((4, 1, 3, 2), 0.5, np.float32), "w")  # C_in 4, C_out/group 1, kernel 3x2


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [3, 2], "dilations": [2, 3], "pads": [1, 0, 2, 1], "output_padding": [1, 0], "group": 2},
        {"strides": [2, 3], "kernel_shape": [3, 2], "pads": [0, 1, 1, 0]},
        {"auto_pad": "VALID"},
        {"dilations": [3, 2], "output_padding": [0, 1], "strides": [2, 2]},
    ],
)
def test_conv_transpose_dims_are_what_onnxruntime_computes(attrs: Dict[str, Any]) -> None:
    model = _model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)],
        [_vi("x", ["N", 4, "H", "W"])],
        [_vi("y", None)],
        [WEIGHT],
    )
    (dims,) = derive(model)
    assert dims is not None and dims[0] == "d0_0" and dims[1] == attrs.get("group", 1)
    for n, hh, ww in ((1, 5, 7), (2, 9, 4)):
        solved = _evaluate(dims, {"d0_0": n, "d0_2": hh, "d0_3": ww})
        assert tuple(solved) == _run_shapes(model, (n, 4, hh, ww))[0], attrs


@pytest.mark.parametrize("attrs", [{"auto_pad": "SAME_UPPER"}, {"output_shape": [10, 10]}])
def test_conv_transpose_sized_by_padding_rules_is_left_unsolved(attrs: Dict[str, Any]) -> None:
    """auto_pad SAME / output_shape size the output from rules the formula does not follow: asked per shape."""
    model = _model(
        [
            helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], **attrs),
            helper.make_node("Relu", ["x"], ["r"]),
        ],
        [_vi("x", ["N", 4, "H", "W"])],
        [_vi("y", None), _vi("r", None)],
        [WEIGHT],
    )
    assert derive(model) == [None, None]  # the whole solve stops: every output is asked per shape


# ---- paddle2onnx's patterns: Shape -> Identity -> ..., Concat(axis=-1) of 1-D shape pieces, constant Concats ----
def test_identity_passes_on_the_values_of_a_shape() -> None:
    model = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Identity", ["s"], ["s2"]),
            helper.make_node("ConstantOfShape", ["s2"], ["y"]),
            helper.make_node("Identity", ["x"], ["x2"]),
        ],
        [_vi("x", ["N", 1, 0, -1])],  # 1 is a fixed dim; 0 and -1, like a name, are dynamic
        [_vi("y", None), _vi("x2", None)],
    )
    assert derive(model) == [["d0_0", 1, "d0_2", "d0_3"], ["d0_0", 1, "d0_2", "d0_3"]]


def test_concat_of_1d_shape_pieces_at_axis_minus_1_passes_on_values() -> None:
    model = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Concat", ["s", "five"], ["c"], axis=-1),
            helper.make_node("ConstantOfShape", ["c"], ["y"]),
            helper.make_node("Concat", ["x", "x", "x"], ["z"], axis=-1),  # 2-D: axis -1 stays the last axis
        ],
        [_vi("x", ["N", "C"])],
        [_vi("y", None), _vi("z", None)],
        [_ints("five", [5])],
    )
    assert derive(model) == [["d0_0", "d0_1", 5], ["d0_0", "3*d0_1"]]


def test_constant_concats_are_folded_before_solving() -> None:
    a = numpy_helper.from_array(np.arange(2, dtype=np.float32).reshape(1, 2), "a")
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32).reshape(1, 3), "b")
    model = _model(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=1), helper.make_node("Add", ["x", "c"], ["y"])],
        [_vi("x", ["N", 5])],
        [_vi("y", None)],
        [a, b],
    )
    assert derive(model) == [["d0_0", 5]]
    assert [n.op_type for n in model.graph.node] == ["Concat", "Add"]  # derive works on a copy


def test_fold_constant_concats_replaces_each_by_its_value() -> None:
    """Concat of initializers only -> an initializer of its value (axis given, or ONNX's 0); others stay, in order."""
    parts = [_ints("p", [[1, 2]]), _ints("q", [[3, 4]]), _ints("r", [[7]]), _ints("t", [[8], [9]])]
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["x1"]),
            helper.make_node("Concat", ["p", "q"], ["pq"], axis=1),
            helper.make_node("Concat", ["r", "t"], ["rt"]),
            helper.make_node("Concat", ["pq", "p"], ["pqp"], axis=1),  # of a folded one: folded too
            helper.make_node("Concat", ["x1", "x"], ["y"], axis=0),
        ],
        [_vi("x", ["N", 2])],
        [_vi("y", None)],
        parts,
    )
    shape_solver._fold_constant_concats(model)
    values = {i.name: numpy_helper.to_array(i).tolist() for i in model.graph.initializer}
    assert values["pq"] == [[1, 2, 3, 4]] and values["rt"] == [[7], [8], [9]] and values["pqp"] == [[1, 2, 3, 4, 1, 2]]
    assert [(n.op_type, list(n.input)) for n in model.graph.node] == [("Relu", ["x"]), ("Concat", ["x1", "x"])]


# ---- what the solver is given: symbols for the dynamic input dims, merges, Slice bounds ----------------------
def test_inputs_are_numbered_without_initializers_listed_as_inputs() -> None:
    """Older exporters list initializers among the graph inputs: only the real inputs are numbered (d{k}_{j})."""
    model = _model(
        [helper.make_node("Add", ["x", "bias"], ["y"]), helper.make_node("Concat", ["z", "z"], ["u"], axis=0)],
        [_vi("bias", [1, 3]), _vi("x", ["N", 3]), _vi("z", ["M", 1])],
        [_vi("y", None), _vi("u", None)],
        [numpy_helper.from_array(np.zeros((1, 3), np.float32), "bias")],
    )
    assert derive(model) == [["d0_0", 3], ["2*d1_0", 1]]


def test_broadcast_dims_of_two_inputs_are_merged() -> None:
    """Add of [N] and [M]: onnxruntime's solver merges the two (auto_merge) instead of giving up; which name it
    keeps depends on a set's order (string hashing)."""
    model = _model([helper.make_node("Add", ["x", "z"], ["y"])], [_vi("x", ["N"]), _vi("z", ["M"])], [_vi("y", None)])
    assert derive(model) in ([["d0_0"]], [["d1_0"]])


def test_slice_ends_at_int_max_mean_the_whole_dim() -> None:
    """paddle2onnx writes INT32_MAX for "to the end"; a smaller end is a bound."""
    ends = {"y1": 2**31 - 1, "y2": 2**31 - 2, "y3": 100, "y4": 2**31}
    inits = [_ints("one", [1]), _ints("axis", [1])] + [_ints(f"e_{o}", [e]) for o, e in ends.items()]
    model = _model(
        [helper.make_node("Slice", ["x", "one", f"e_{o}", "axis"], [o]) for o in ends],
        [_vi("x", ["N", "C"])],
        [_vi(o, None) for o in ends],
        inits,
    )
    assert derive(model) == [
        ["d0_0", "d0_1 - 1"],
        ["d0_0", "Min(2147483646, d0_1) - 1"],
        ["d0_0", "Min(100, d0_1) - 1"],
        ["d0_0", "d0_1 - 1"],
    ]


# ---- what comes back: fixed ints, expressions, None --------------------------------------------------------------
def test_data_dependent_outputs_get_none_dims_others_none_as_a_whole() -> None:
    """NonZero's count is the input values': a data-dependent output's dim is None (bounded later), any other
    output with such a dim is unsolved (None)."""
    model = _model(
        [helper.make_node("NonZero", ["x"], ["idx"]), helper.make_node("Relu", ["x"], ["y"])],
        [_vi("x", ["N", 4])],
        [_vi("idx", None, TensorProto.INT64), _vi("y", None)],
    )
    assert derive(model) == [None, ["d0_0", 4]]
    assert derive(model, ["idx"]) == [[2, None], ["d0_0", 4]]
    assert derive(model, ("y",)) == [None, ["d0_0", 4]]


def test_an_output_of_an_unknown_operator_is_unsolved() -> None:
    """A custom-domain op: no rank is guessed for its output (that would make up dims)."""
    model = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Foo", ["x"], ["y"], domain="custom")],
        [_vi("x", ["N", 2])],
        [_vi("y", None), _vi("r", None)],
    )
    model.opset_import.append(helper.make_opsetid("custom", 1))
    assert derive(model) == [None, ["d0_0", 2]]
    assert derive(model, ["y"]) == [None, ["d0_0", 2]]


def test_an_output_dim_of_0_is_no_size() -> None:
    """A 0 the solver writes (an empty Slice here) is not taken as a size: 0 in output dims means unknown."""
    inits = [_ints("four", [4]), _ints("one", [1])]
    model = _model(
        [helper.make_node("Slice", ["x", "four", "four", "one"], ["y"]), helper.make_node("Relu", ["x"], ["r"])],
        [_vi("x", ["N", 4])],
        [_vi("y", None), _vi("r", None)],
        inits,
    )
    assert derive(model) == [None, ["d0_0", 4]]
    assert derive(model, ["y"]) == [["d0_0", None], ["d0_0", 4]]


@pytest.mark.parametrize(
    "missing, feature",
    [
        ("onnx", "reading the model graph"),
        ("sympy", "solving output shapes from the ONNX graph"),
        ("onnxruntime", "solving output shapes from the ONNX graph"),
    ],
)
def test_a_missing_package_is_an_error_that_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: str, feature: str
) -> None:
    """Not an unsolved graph: ``convert`` would write packages without output dims and not say why."""
    import sys

    from paddlex_npu.errors import ConfigError

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N"])], [_vi("y", None)])
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(ConfigError, match=rf"^{feature} needs the Python package {missing}, which is not installed"):
        derive(model)


def test_the_solvers_log_is_silenced_and_its_level_restored(caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime's solver warns when it cannot compare bounds (here a Slice ending at another input dim): the
    result says what was solved, its log would only alarm; the logger's own level is put back, also on failure."""
    quiet = logging.getLogger(SOLVER_LOG)
    before = quiet.level
    quiet.setLevel(logging.INFO)
    try:
        model = _model(
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
                helper.make_node("Slice", ["x", "zero", "n", "one"], ["y"]),
            ],
            [_vi("x", ["N", "C"])],
            [_vi("y", None)],
            [_ints("zero", [0]), _ints("one", [1])],
        )
        with caplog.at_level(logging.DEBUG, logger=SOLVER_LOG):
            quiet.setLevel(logging.INFO)
            assert derive(model) == [["d0_0", "d0_1"]]
            assert quiet.level == logging.INFO
            failing = _model(
                [helper.make_node("ConvTranspose", ["x", "w"], ["y"], auto_pad="SAME_LOWER")],
                [_vi("x", ["N", 4, "H", "W"])],
                [_vi("y", None)],
                [WEIGHT],
            )
            assert derive(failing) == [None]
            assert quiet.level == logging.INFO
        assert [r for r in caplog.records if r.name == SOLVER_LOG] == []
    finally:
        quiet.setLevel(before)


def test_parse_reads_sympy_text_and_refuses_what_is_not() -> None:
    sympy = pytest.importorskip("sympy")
    expr = shape_solver._parse(sympy, "floor((d0_3 + 3)/8)")
    assert expr == sympy.floor((sympy.Symbol("d0_3") + 3) / 8) and expr.subs("d0_3", 13) == 2
    for bad in ("d0_1 +", "d0_1 ) ("):
        assert shape_solver._parse(sympy, bad) is None, bad


# ---- derive_file: once per file content and data-dependent set --------------------------------------------------
def test_derive_file_solves_once_per_content_and_returns_copies(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(shape_solver, "_SOLVED", {})
    calls: List[tuple] = []
    real = shape_solver.derive

    def counted(proto: Any, data_dependent: Sequence[str] = ()) -> Any:
        calls.append(tuple(data_dependent))
        return real(proto, data_dependent)

    monkeypatch.setattr(shape_solver, "derive", counted)
    model = _model(
        [helper.make_node("NonZero", ["x"], ["idx"]), helper.make_node("Relu", ["x"], ["y"])],
        [_vi("x", ["N", 4])],
        [_vi("idx", None, TensorProto.INT64), _vi("y", None)],
    )
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, str(first))
    onnx.save(model, str(second))  # the same content elsewhere: the same entry
    got = shape_solver.derive_file(first)
    assert got == [None, ["d0_0", 4]]
    got[1].append("changed")  # the caller's copy, not the remembered one
    assert shape_solver.derive_file(second) == [None, ["d0_0", 4]]
    assert calls == [()]
    assert shape_solver.derive_file(first, ["y", "idx"]) == [[2, None], ["d0_0", 4]]
    assert shape_solver.derive_file(second, ["idx", "y"]) == [[2, None], ["d0_0", 4]]
    assert shape_solver.derive_file(first, ["idx"]) == [[2, None], ["d0_0", 4]]
    assert calls == [(), ("y", "idx"), ("idx",)]


def test_a_dim_text_is_evaluated_only_when_it_is_an_expression_of_input_dims():
    """sympify evaluates its text: a dim the model file names with code is refused, never run."""
    import sys

    import sympy

    d2, d3 = sympy.symbols("d0_2 d0_3")
    assert shape_solver._parse(sympy, "ceiling(d0_3/4) + Max(d0_2, 2)") == sympy.ceiling(d3 / 4) + sympy.Max(d2, 2)
    for text in ("__import__('sys').modules.setdefault('pwned_by_a_dim', sys)", "d0_3.__class__", "lambda: 1"):
        assert shape_solver._parse(sympy, text) is None
    assert "pwned_by_a_dim" not in sys.modules
