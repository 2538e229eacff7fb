"""``k`` decoder steps in one device call: the (static) step of :mod:`.loop_split` chained ``k`` times in one graph,
the stop condition kept inside it.

Copy ``j`` runs only while the loop would: ``run_j = cond_{j-1} and j < remaining`` (``remaining``: the steps the
trip count still allows, an input). A copy that does not run leaves every carried value and the condition as they
were (``Where(run_j, new, old)``), so the outputs after ``k`` copies are the loop's state after the steps it really
ran, and ``steps_run`` says how many. The host (:func:`paddlex_npu.run.loop.run_split`) calls it until the
condition is false: ``ceil(steps / k)`` calls and copies instead of one per step (ais_bench mallocs, copies and
frees every input and output of every call, correction 34). A step with scan outputs (a value stacked per step)
is not unrolled.
"""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from ..om.loop_split import REMAINING, STEPS_RUN, LoopSpec


def _copy_nodes(graph: Any, nodes: List[Any], j: int, inputs: Dict[str, str]) -> Dict[str, str]:
    """Append to ``graph`` a copy of the step's nodes whose values are suffixed ``__u{j}``; ``inputs`` maps the
    step's inputs to this copy's values. Returns the step's value names -> this copy's."""
    from onnx import helper

    names = dict(inputs)
    for index, node in enumerate(nodes):
        outs = [f"{o}__u{j}" if o else "" for o in node.output]
        for o, new in zip(node.output, outs):
            names[o] = new
        copy = helper.make_node(
            node.op_type,
            [names.get(i, i) for i in node.input],
            outs,
            name=f"{node.name or f'{node.op_type}_{index}'}__u{j}",
        )
        copy.attribute.extend(node.attribute)
        graph.node.append(copy)
    return names


def unroll(step: Any, spec: LoopSpec, k: int) -> Any:
    """The model running up to ``k`` steps of ``step`` (a static step: no subgraphs) per call."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    body = step.graph
    if any(a.HasField("g") for n in body.node for a in n.attribute):
        raise ValueError("a step with subgraphs cannot be unrolled")
    model = onnx.ModelProto()
    model.CopyFrom(step)
    g = model.graph
    del g.node[:]
    del g.output[:]
    del g.value_info[:]
    g.input.append(helper.make_tensor_value_info(REMAINING, TensorProto.INT64, []))
    state = {c.input: c.input for c in running_carried(spec)}
    cond, steps = spec.cond_input, None

    def const(name: str, value: np.ndarray) -> str:
        g.initializer.append(numpy_helper.from_array(value, name))
        return name

    scalar = const("unroll__scalar_shape", np.zeros((0,), np.int64))
    # the guard and the count in int32 (int64 Less has no 310P AI Core kernel; int64 <-> int32 Casts do, P:4174)
    g.node.append(helper.make_node("Cast", [REMAINING], ["unroll__remaining32"], to=TensorProto.INT32))
    types = {o.name: o.type.tensor_type.elem_type for o in body.output}
    for j in range(k):
        it = spec.iter_input if j == 0 else f"{spec.iter_input}__u{j}"
        if j:
            g.node.append(
                helper.make_node("Add", [spec.iter_input, const(f"unroll__j{j}", np.array(j, np.int64))], [it])
            )
        prev = f"unroll__cond{j}"
        g.node.append(helper.make_node("Reshape", [cond, scalar], [prev]))
        more = f"unroll__more{j}"
        k32 = const(f"unroll__k{j}", np.array(j, np.int32))
        g.node.append(helper.make_node("Less", [k32, "unroll__remaining32"], [more]))
        run = f"unroll__run{j}"
        g.node.append(helper.make_node("And", [prev, more], [run]))
        names = _copy_nodes(g, list(body.node), j, {spec.iter_input: it, spec.cond_input: cond, **state})
        for c in running_carried(spec):
            state[c.input] = _select(g, run, names[c.output], state[c.input], types[c.output] == BOOL)
        cond = _select(g, run, names[spec.cond_output], cond, types[spec.cond_output] == BOOL)
        ran = f"unroll__ran{j}"
        g.node.append(helper.make_node("Cast", [run], [ran], to=TensorProto.INT32))
        if steps is not None:
            g.node.append(helper.make_node("Add", [steps, ran], [f"unroll__steps{j}"]))
            ran = f"unroll__steps{j}"
        steps = ran
    _outputs(g, spec, state, cond, steps, types, const)
    return model


def _outputs(
    g: Any, spec: LoopSpec, state: Dict[str, str], cond: str, steps: str, types: Dict[str, int], const: Any
) -> None:
    """The unrolled graph's outputs: the condition and the carried values after the last copy, named as the step's,
    and how many copies ran."""
    from onnx import TensorProto, helper

    g.node.append(helper.make_node("Identity", [cond], [spec.cond_output]))
    g.output.append(helper.make_tensor_value_info(spec.cond_output, types[spec.cond_output], None))
    for c in running_carried(spec):
        g.node.append(helper.make_node("Identity", [state[c.input]], [c.output]))
        g.output.append(helper.make_tensor_value_info(c.output, types[c.output], None))
    g.node.append(helper.make_node("Cast", [steps], ["unroll__steps64"], to=TensorProto.INT64))
    g.node.append(
        helper.make_node("Reshape", ["unroll__steps64", const("unroll__one", np.array([1], np.int64))], [STEPS_RUN])
    )
    g.output.append(helper.make_tensor_value_info(STEPS_RUN, TensorProto.INT64, [1]))


BOOL = 9  # TensorProto.BOOL


def _select(graph: Any, run: str, new: str, old: str, boolean: bool) -> str:
    """``new`` where ``run`` else ``old`` (bool values by And/Or/Not: ``Where`` takes no bool before opset 16)."""
    from onnx import helper

    out = f"{new}__kept"
    if boolean:
        graph.node.append(helper.make_node("And", [run, new], [out + "_yes"]))
        graph.node.append(helper.make_node("Not", [run], [out + "_not"]))
        graph.node.append(helper.make_node("And", [out + "_not", old], [out + "_no"]))
        graph.node.append(helper.make_node("Or", [out + "_yes", out + "_no"], [out]))
    else:
        graph.node.append(helper.make_node("Where", [run, new, old], [out]))
    return out


def running_carried(spec: LoopSpec) -> List[Any]:
    """The carried values the step changes (a pass-through stays the host's)."""
    return [c for c in spec.carried if c.output is not None]
