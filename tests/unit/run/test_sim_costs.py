"""What the simulated device charges a call beyond the model: ais_bench's per-buffer mallocs, synchronous copies and
frees (Yanguan619/aclruntime @8da7f645), a host sync per ``If`` where GE runs the graph on its hybrid executor
(hicann/ge ``hybrid_model_builder.cc:63``), and each AI CPU node (correction 35). The figures asserted are the ones
the graph's structure and the call's buffers give (device slots as reserved, no timing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from paddlex_npu.config import SimulationConfig
from paddlex_npu.run import simulated
from paddlex_npu.run.simulated import SimulatedSession, graph_profile
from tests.onnx_models import _save, two_input_model

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
FIGURES = {"malloc_us": 1.0, "free_us": 2.0, "memcpy_us": 10.0, "aicpu_us": 100.0}


def _const(name, dtype, dims, values):
    return helper.make_tensor(name, dtype, dims, values)


def _branch(name, dims):
    """An If branch returning a float constant of ``dims``."""
    out = helper.make_tensor_value_info(f"{name}_out", F, dims)
    value = _const(f"{name}_v", F, dims, [1.0] * int(np.prod(dims or [1])))
    return helper.make_graph([helper.make_node("Constant", [], [f"{name}_out"], value=value)], name, [], [out])


def step_model(path: Path) -> Path:
    """A decoder step as SLANet's is (inputs ``n`` int64 [1], ``x`` float [1,4]): ``Range`` to the counter (a
    shape from a value: the hybrid executor), a Cast int64 -> float, a ScatterElements and an int64 Less (AI CPU on
    310P), an ``If`` whose branches return [] and [1], reshaped to [1]; a Cast of a constant (folded by GE)."""
    nodes = [
        helper.make_node("Squeeze", ["n", "axis0"], ["n0"], name="squeeze"),
        helper.make_node("Range", ["zero", "n0", "one"], ["r"], name="range"),
        helper.make_node("Cast", ["r"], ["rf"], to=F, name="cast"),
        helper.make_node("ReduceSum", ["rf"], ["s0"], keepdims=1, name="sum"),
        helper.make_node("Cast", ["one"], ["onef"], to=F, name="folded_cast"),
        helper.make_node("Add", ["s0", "onef"], ["s"], name="add"),
        helper.make_node("ScatterElements", ["x", "idx", "upd"], ["xs"], axis=1, name="scatter"),
        helper.make_node("Less", ["n", "limit"], ["lt"], name="less"),
        helper.make_node("Squeeze", ["lt", "axis0"], ["cond"], name="squeeze_cond"),
        helper.make_node(
            "If", ["cond"], ["y"], name="stop", then_branch=_branch("then", []), else_branch=_branch("else", [1])
        ),
        helper.make_node("Reshape", ["y", "shape1"], ["y1"], name="reshape"),
    ]
    inits = [
        _const("axis0", I64, [1], [0]),
        _const("zero", I64, [], [0]),
        _const("one", I64, [], [1]),
        _const("idx", I64, [1, 1], [2]),
        _const("upd", F, [1, 1], [5.0]),
        _const("limit", I64, [1], [10]),
        _const("shape1", I64, [1], [1]),
    ]
    graph = helper.make_graph(
        nodes,
        "step",
        [helper.make_tensor_value_info("n", I64, [1]), helper.make_tensor_value_info("x", F, [1, 4])],
        [
            helper.make_tensor_value_info("s", F, [1]),
            helper.make_tensor_value_info("xs", F, [1, 4]),
            helper.make_tensor_value_info("y1", F, [1]),
        ],
        inits,
    )
    return _save(graph, path)


def static_if_model(path: Path) -> Path:
    """A static graph: ``x`` float [1,4] reshaped to its own Shape (known at build time), an int64 constant cast to
    float (folded), an ``If`` on ``c`` bool [] whose branches both return [1]: GE types it all, no hybrid executor."""
    nodes = [
        helper.make_node("Shape", ["x"], ["xshape"], name="shape"),
        helper.make_node("Reshape", ["x", "xshape"], ["xr"], name="reshape"),
        helper.make_node("Cast", ["one"], ["onef"], to=F, name="folded_cast"),
        helper.make_node("Add", ["xr", "onef"], ["y"], name="add"),
        helper.make_node(
            "If", ["c"], ["z"], name="branch", then_branch=_branch("t", [1]), else_branch=_branch("e", [1])
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "static_if",
        [helper.make_tensor_value_info("x", F, [1, 4]), helper.make_tensor_value_info("c", B, [])],
        [helper.make_tensor_value_info("y", F, [1, 4]), helper.make_tensor_value_info("z", F, [1])],
        [_const("one", I64, [], [1])],
    )
    return _save(graph, path)


def _session(tmp_path: Path, make, name: str, **figures) -> SimulatedSession:
    onnx = make(tmp_path / name / "inference.onnx")
    sim = SimulationConfig(
        base_ms=0.0,
        ms_per_melem=0.0,
        pcie_gbps=0.0,
        store=str(tmp_path / "store"),
        lock_dir=str(tmp_path / "locks"),
        **{**FIGURES, **figures},
    )
    return SimulatedSession(0, str(onnx.with_suffix(".om")), simulation=sim)


def test_a_decoder_step_pays_buffers_a_host_sync_and_its_ai_cpu_nodes(tmp_path):
    """2 inputs, 3 outputs: 2 + 2 x 3 = 8 mallocs and frees (1 + 2 us), 5 synchronous copies (10 us); one If on the
    hybrid executor: one host sync (10 us); 4 AI CPU nodes (100 us): 74 + 10 + 400 = 484 us a call."""
    sim = _session(tmp_path, step_model, "step")
    before = simulated.model_stats().get("step", {})
    feed = [np.array([3], dtype=np.int64), np.zeros((1, 4), dtype=np.float32)]
    out = sim.infer(feed, mode="static")
    np.testing.assert_array_equal(out[0], [4.0])  # 0 + 1 + 2, plus the folded 1: the model ran
    sim.infer([np.array([12], dtype=np.int64), feed[1]], mode="static")
    g = sim.graph
    assert g.hybrid.startswith("Range range") and g.if_nodes == 1 and g.host_syncs == 1
    assert g.aicpu == ("Range range", "Cast cast", "ScatterElements scatter", "Less less")
    assert [end - start for start, end in sim.device_intervals] == pytest.approx([484e-6] * 2)
    m = simulated.model_stats()["step"]
    assert m["calls"] - before.get("calls", 0) == 2
    assert m["host_syncs"] - before.get("host_syncs", 0) == 2
    assert m["mallocs"] - before.get("mallocs", 0) == 16 and m["buffers"] == 8
    assert m["aicpu_nodes"] == 4 and m["if_nodes"] == 1 and m["hybrid"] == g.hybrid
    assert m["buffer_ms"] - before.get("buffer_ms", 0) == pytest.approx(2 * 0.074)
    assert m["sync_ms"] - before.get("sync_ms", 0) == pytest.approx(2 * 0.010)
    assert m["aicpu_ms"] - before.get("aicpu_ms", 0) == pytest.approx(2 * 0.400)
    assert m["device_ms"] - before.get("device_ms", 0) == pytest.approx(2 * 0.484)


def test_a_static_graph_runs_its_if_on_the_device(tmp_path):
    """Shape of a static tensor and a cast constant are folded at build time; an If whose branches agree is typed:
    no hybrid executor, no host sync, no AI CPU node; the call pays its buffers only (2 in, 2 out: 6 mallocs,
    4 copies = 58 us)."""
    sim = _session(tmp_path, static_if_model, "static_if")
    sim.infer([np.zeros((1, 4), dtype=np.float32), np.array(True)], mode="static")
    assert sim.graph == simulated.GraphProfile(hybrid="", if_nodes=1, aicpu=())
    ((start, end),) = sim.device_intervals
    assert end - start == pytest.approx(58e-6)
    assert simulated.model_stats()["static_if"]["host_syncs"] == 0


def test_a_dymshape_om_is_on_the_hybrid_executor(tmp_path):
    """Unknown dims: GE runs the OM dynamically whatever its operators (no If here: no host sync)."""
    onnx = two_input_model(tmp_path / "dyn" / "inference.onnx")
    g = graph_profile(str(onnx), {"x": (1, 3, 8, 8), "a": (1, 2)}, dynamic=True)
    assert g.hybrid == "dymshape OM (unknown dims)" and g.host_syncs == 0 and g.aicpu == ()


@pytest.mark.parametrize(
    "op, dtype, to, on_aicpu",
    [
        ("Min", I64, None, True),
        ("Min", F, None, False),
        ("Less", I64, None, True),
        ("Less", I32, None, False),
        ("Cast", I64, F, True),
        ("Cast", B, I64, True),
        ("Cast", I32, I64, False),
        ("Cast", F, TensorProto.FLOAT16, False),
        ("Tile", I64, None, True),
        ("Tile", F, None, False),
    ],
)
def test_ai_cpu_by_operator_and_dtype(tmp_path, op, dtype, to, on_aicpu):
    """Correction 35's 310P placements: int64 Min/Less/Tile, Casts between int64 and float or bool."""
    x = helper.make_tensor_value_info("x", dtype, [2, 2])
    inputs, inits, attrs = ["x", "x"], [], {}
    if op == "Cast":
        inputs, attrs = ["x"], {"to": to}
    elif op == "Tile":
        inputs, inits = ["x", "reps"], [_const("reps", I64, [2], [1, 2])]
    out_type = B if op == "Less" else (to or dtype)
    node = helper.make_node(op, inputs, ["y"], name="n", **attrs)
    graph = helper.make_graph([node], "one", [x], [helper.make_tensor_value_info("y", out_type, None)], inits)
    g = graph_profile(str(_save(graph, tmp_path / "m.onnx")), {"x": (2, 2)}, dynamic=False)
    assert g.aicpu == ((f"{op} n",) if on_aicpu else ()) and g.hybrid == ""
