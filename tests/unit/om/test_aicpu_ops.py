"""om/aicpu_ops.py: the nodes ATC places on the AI CPU per chip, from the 2022 open op-info lists (canndev's
``aic-ascend310p-ops-info.ini`` @7290acc7 and ``aic-ascend910b-ops-info.ini`` @81cc8745, in the GitHub copy
dengguojie/vue-element-admin; correction 35 of ../shared/reference/ais-bench-api.md), on graphs built here
(``convert``'s warning per part: tests/paddlex/test_convert_aicpu.py)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import onnx
import pytest
from onnx import TensorProto, helper

from paddlex_npu.om.aicpu_ops import aicpu_nodes, describe_placement, soc_family
from tests.onnx_models import loop_model

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL


def _model(
    nodes: list, inputs: List[Tuple[str, int, list]], output: str, inits: Optional[list] = None
) -> onnx.ModelProto:
    """A graph of ``nodes`` with typed ``inputs``; the output's type is left to shape inference."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.UNDEFINED, None)],
        inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _aicpu(model: onnx.ModelProto, soc: str) -> List[Tuple[str, str]]:
    placement = aicpu_nodes(model, soc)
    assert placement is not None
    return [(i.node, i.reason) for i in placement.aicpu]


def test_the_chip_families_with_a_known_list() -> None:
    assert [soc_family(s) for s in ("Ascend310P3", "Ascend310P3vir02", "Ascend910B4", "Ascend910B2C")] == [
        "310P", "310P", "910B", "910B",
    ]  # fmt: skip
    assert [soc_family(s) for s in ("Ascend310", "Ascend310B1", "Ascend910", "Ascend910_9391")] == [None] * 4
    model = _model([helper.make_node("ScatterElements", ["x", "i", "x"], ["y"])], [("x", F, [4]), ("i", I64, [4])], "y")
    assert aicpu_nodes(model, "Ascend310") is None  # not known here: nothing said


def test_scatter_elements_has_no_ai_core_kernel_on_either_list() -> None:
    # no [ScatterElements] entry in either ini; scatter_elements_plugin.cc:43-52 makes GE's ScatterElements
    node = helper.make_node("ScatterElements", ["x", "i", "x"], ["y"], name="scatter")
    model = _model([node], [("x", F, [4]), ("i", I64, [4])], "y")
    for soc in ("Ascend310P3", "Ascend910B4"):
        assert _aicpu(model, soc) == [("scatter", "no ScatterElements kernel at all")]


def test_range_with_tensor_inputs_goes_to_the_ai_cpu_and_a_constant_one_is_folded() -> None:
    # no [Range] entry; [RangeD] (P:13531, B:13672) takes constants only
    tensor = _model(
        [helper.make_node("Range", ["zero", "n", "one"], ["y"], name="range")],
        [("n", I64, [])],
        "y",
        [helper.make_tensor("zero", I64, [], [0]), helper.make_tensor("one", I64, [], [1])],
    )
    assert _aicpu(tensor, "Ascend310P3") == [("range", "tensor inputs (an AI Core RangeD takes constants only)")]
    # the limit is the Shape of a static input: ATC folds Shape, Gather and Range into constants
    static = _model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"]),
            helper.make_node("Range", ["zero", "n", "one"], ["y"], name="range"),
        ],
        [("x", F, [5, 3])],
        "y",
        [helper.make_tensor("zero", I64, [], [0]), helper.make_tensor("one", I64, [], [1])],
    )
    assert _aicpu(static, "Ascend310P3") == []


@pytest.mark.parametrize(
    ("op", "ge_op"), [("Min", "Minimum"), ("Max", "Maximum"), ("Less", "Less"), ("Greater", "Greater")]
)
def test_int64_operands_have_no_ai_core_kernel_int32_ones_do(op: str, ge_op: str) -> None:
    # Minimum P:4049 B:3755, Maximum P:4032 B:3738, Less P:3538 B:3099, Greater P:6301 B:5970: no int64
    for dtype, want in ((I64, [("n", f"{ge_op} for int64")]), (I32, [])):
        model = _model([helper.make_node(op, ["a", "b"], ["y"], name="n")], [("a", dtype, [2]), ("b", dtype, [2])], "y")
        assert _aicpu(model, "Ascend310P3") == want
        assert _aicpu(model, "Ascend910B4") == want


def test_tile_and_expand_of_int64_data() -> None:
    # Tile P:2982 B:2558 and Expand P:342 B:19837 list no int64 data
    reps = helper.make_tensor("reps", I64, [1], [3])
    for op in ("Tile", "Expand"):
        for dtype, want in ((I64, [("n", f"{op} for int64")]), (F, [])):
            model = _model([helper.make_node(op, ["x", "reps"], ["y"], name="n")], [("x", dtype, [1])], "y", [reps])
            assert _aicpu(model, "Ascend310P3") == want


def test_equal_of_int64_differs_between_the_lists() -> None:
    # Equal P:6282 lists int64, B:5951 does not
    model = _model([helper.make_node("Equal", ["a", "b"], ["y"], name="eq")], [("a", I64, [2]), ("b", I64, [2])], "y")
    assert _aicpu(model, "Ascend310P3") == []
    assert _aicpu(model, "Ascend910B4") == [("eq", "Equal for int64")]


@pytest.mark.parametrize(
    ("src", "dst", "on_310p", "on_910b"),
    [
        (I64, F, True, False),  # 910B's list adds int64 <-> float32 (B:3879); 310P's has int64 <-> int32 only
        (F, I64, True, False),
        (B, I64, True, True),
        (I64, B, True, True),
        (I32, I64, False, False),
        (I64, I32, False, False),
        (F, B, True, True),  # P:4174 / B:3879 have float16 -> bool, not float32 -> bool
        (F, F, False, False),  # no cast at all
    ],
)
def test_casts_against_the_listed_pairs(src: int, dst: int, on_310p: bool, on_910b: bool) -> None:
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=dst)], [("x", src, [2])], "y")
    assert bool(_aicpu(model, "Ascend310P3")) is on_310p
    assert bool(_aicpu(model, "Ascend910B4")) is on_910b


def int64_loop_model(path: Path) -> Path:
    """tests/onnx_models.loop_model with its scan output computed through int64: Cast to int64, Min and Max with
    constants, Cast back (4 of the body's 7 operators have no 310P AI Core kernel, 2 none on 910B)."""
    loop_model(path)
    model = onnx.load(str(path))
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    scan = next(n for n in body.node if n.output[0] == "c_scan")
    body.node.remove(scan)
    body.initializer.extend([helper.make_tensor("cap", I64, [1], [1000]), helper.make_tensor("floor", I64, [1], [0])])
    body.node.extend(
        [
            helper.make_node("Cast", ["c_out"], ["ci"], name="to_int64", to=I64),
            helper.make_node("Min", ["ci", "cap"], ["cm"], name="min"),
            helper.make_node("Max", ["cm", "floor"], ["cx"], name="max"),
            helper.make_node("Cast", ["cx"], ["c_scan"], name="to_float", to=F),
        ]
    )
    onnx.save(model, str(path))
    return path


def test_a_loop_body_mostly_on_the_ai_cpu_is_said_so(tmp_path: Path) -> None:
    model = onnx.load(str(int64_loop_model(tmp_path / "loop.onnx")))
    placement = aicpu_nodes(model, "Ascend310P3")
    assert [i.node for i in placement.aicpu] == ["decoder/to_int64", "decoder/min", "decoder/max", "decoder/to_float"]
    (body,) = placement.bodies
    assert (body.node, body.aicpu, body.kernels) == ("decoder", 4, 7)
    text = describe_placement(placement, "the model", "Ascend310P3")
    assert (
        text.startswith("the model: 4 of its ")
        and "The loop body decoder runs mostly on the AI CPU (4 of its 7" in text
    )
    assert "Cast (float32 -> int64): decoder/to_int64" in text and "Min (Minimum for int64): decoder/min" in text
    on_910b = aicpu_nodes(model, "Ascend910B4")
    assert [i.node for i in on_910b.aicpu] == ["decoder/min", "decoder/max"]
    assert "mostly" not in describe_placement(on_910b, "the model", "Ascend910B4")
