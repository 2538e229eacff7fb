"""A model with a data-dependent ``Loop`` (an autoregressive decoder, e.g. SLANet's structure decoder: up to 500
steps, ended by its own condition) split into what ATC can build, read from the graph alone (no table per model):

- ``encoder``: the nodes before the Loop that compute its inputs (and what the tail reads of them);
- ``step``: the Loop's body as a model of its own, one decoder step: the loop-invariant constants it carries
  folded into it as weights, the other carried values inputs (and outputs, unless the body passes them through);
- ``tail``: the nodes after the Loop, from the Loop's results to the model's outputs.

The host runs the loop (``run/loop.py``): encoder once, the step until the condition is false or the trip count is
reached, the tail once. ATC's ONNX parser adapts no Loop body (:mod:`.atc_ops`), so this is what runs on the device;
each part is an OM package of its own, run through the same ``InferSession`` contract.

ONNX's Loop passes the iteration number and the condition as scalars, and carried values keep whatever shape the
body gives them: paddle2onnx's bodies turn some ``[]`` into ``[1]`` on the first step. A device model has one
shape per input, so each carried input takes the shape the step returns (from a sample run), and the host reshapes
a first value of the same size to it. Where a first value has another size (paddle2onnx's placeholder ``[]`` for
a buffer the body fills, ``[1, 501, 8]`` after it), the first iteration runs a ``first/`` package: the same body
with the first values' shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from pydantic import BaseModel, ConfigDict

from ..errors import ConvertError


class Carried(BaseModel):
    """One loop-carried value: its first value (an encoder output), the step's input and output (None: the body
    passes it through, the host keeps it), the Loop's result it becomes, and the step input's shape."""

    model_config = ConfigDict(extra="forbid")

    init: str
    input: str
    output: Optional[str] = None
    result: str
    shape: Optional[List[int]] = None  # None: as it comes (before convert sampled the shapes)


class LoopSpec(BaseModel):
    """How the host drives a split model (recorded in the manifest as ``loop``)."""

    model_config = ConfigDict(extra="forbid")

    step: str = "step"  # sub-package folders
    tail: str = "tail"
    first: Optional[str] = None  # the step for the first iteration, when its inputs have other shapes (below)
    node: str  # the Loop node of the original graph
    trip_count: Optional[str] = None  # encoder output with M (None: no limit but the condition)
    max_steps: Optional[int] = None  # M when it is a constant of the graph
    unroll: int = 1  # decoder steps per call of the step package (build/step_unroll.py: the condition in the graph)
    cond_init: Optional[str] = None  # encoder output with the first condition (None: true)
    iter_input: str
    cond_input: str
    cond_output: str
    cond_shape: Optional[List[int]] = None  # the step's condition input (the shape its output has)
    carried: List[Carried]
    scans: List[Tuple[str, str]] = []  # (step output, Loop result) stacked over the steps
    outer: List[str] = []  # values of the main graph the body reads by name: encoder outputs, step inputs
    tail_inputs: List[str]  # names from the encoder's outputs and the Loop's results


# A step package that runs several steps per call (build/step_unroll.py) takes how many more steps the trip count
# allows and returns how many of its copies ran.
REMAINING = "remaining_steps"  # input, int64 0-d
STEPS_RUN = "steps_run"  # output, int64 [1]

# A part's 0-d input is fed as [1] under this suffixed name and reshaped to a scalar in the graph: ais_bench's
# dymshape string and ATC's --input_shape have no syntax for a 0-d input.
SCALAR_SUFFIX = "__1d"


def vector_scalars(model: Any) -> None:
    """Every 0-d input of ``model`` taken as ``[1]`` (``<name>__1d``) and reshaped to ``[]`` by a first node."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    nodes = []
    for v in graph.input:
        t = v.type.tensor_type
        if t.HasField("shape") and len(t.shape.dim) == 0:
            name = v.name
            v.name = name + SCALAR_SUFFIX
            t.shape.dim.add().dim_value = 1
            shape = name + SCALAR_SUFFIX + "_shape"
            graph.initializer.append(numpy_helper.from_array(np.zeros((0,), np.int64), shape))
            nodes.append(helper.make_node("Reshape", [v.name, shape], [name], name=name + SCALAR_SUFFIX))
    for node in reversed(nodes):
        graph.node.insert(0, node)


@dataclass
class SplitGraphs:
    encoder: Any
    step: Any
    tail: Any
    spec: LoopSpec


def top_loops(graph: Any) -> List[int]:
    return [i for i, n in enumerate(graph.node) if n.op_type == "Loop"]


def _constants(graph: Any) -> Dict[str, Any]:
    from onnx import numpy_helper

    out = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _needed(nodes: Sequence[Any], wanted: Set[str]) -> List[Any]:
    """The nodes of ``nodes`` (topologically sorted) that ``wanted`` depends on, in order."""
    need, keep = set(wanted), []
    for n in reversed(nodes):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
            need.update(_outer_refs(n))
    return list(reversed(keep))


def _outer_refs(node: Any) -> Set[str]:
    refs: Set[str] = set()
    for a in node.attribute:
        if a.HasField("g"):
            defined = {i.name for i in a.g.input} | {i.name for i in a.g.initializer}
            defined |= {o for n in a.g.node for o in n.output}
            for n in a.g.node:
                refs.update(i for i in n.input if i and i not in defined)
                refs.update(_outer_refs(n) - defined)
    return refs


def _untyped(graph: Any) -> None:
    """Drop the graph's and its subgraphs' intermediate shape annotations (paddle2onnx's are stale inside Loop
    bodies: ``[]`` for values that are ``[1]``); types stay, shapes are inferred again."""
    del graph.value_info[:]
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("g"):
                _untyped(a.g)
                for o in a.g.output:
                    o.type.tensor_type.ClearField("shape")


def _model(proto: Any, nodes: List[Any], inputs: List[Any], outputs: List[Any], inits: List[Any], name: str) -> Any:
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    _untyped(graph)
    model = helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    return model


def _value(name: str, elem: int, shape: Optional[Sequence[int]] = None) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _elem_types(proto: Any) -> Dict[str, int]:
    """Element type of every value of the top graph and the loop body (declared or inferred)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    types: Dict[str, int] = {}

    def collect(graph: Any) -> None:
        for v in list(graph.input) + list(graph.output) + list(graph.value_info):
            if v.type.tensor_type.elem_type:
                types.setdefault(v.name, v.type.tensor_type.elem_type)
        for i in graph.initializer:
            types.setdefault(i.name, i.data_type)
        for n in graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                types.setdefault(n.output[0], n.attribute[0].t.data_type)
            for a in n.attribute:
                if a.HasField("g"):
                    collect(a.g)

    collect(inferred.graph)
    return types


def _the_loop(graph: Any) -> int:
    loops = top_loops(graph)
    if len(loops) != 1:
        raise ConvertError(f"the graph has {len(loops)} top-level Loop nodes: convert splits a model around one")
    loop = graph.node[loops[0]]
    body = next(a.g for a in loop.attribute if a.name == "body")
    if any(n.op_type in ("Loop", "Scan") for n in body.node):
        raise ConvertError(f"{loop.name}: a Loop inside a Loop's body cannot be split into device models")
    return loops[0]


def _carried(graph: Any, li: int, consts: Dict[str, Any]) -> Tuple[List[Carried], List[Any]]:
    """The carried values the host passes from step to step, and the loop-invariant constants folded into the step
    as weights (a pass-through of a constant whose final value nothing after the Loop reads)."""
    from onnx import numpy_helper

    loop = graph.node[li]
    body = next(a.g for a in loop.attribute if a.name == "body")
    used_after = {i for n in graph.node[li + 1 :] for i in n.input} | {o.name for o in graph.output}
    folded, carried = [], []
    for k in range(len(loop.input) - 2):
        init, b_in, b_out, result = loop.input[2 + k], body.input[2 + k].name, body.output[1 + k].name, loop.output[k]
        passthrough = b_in == b_out
        if passthrough and init in consts and result not in used_after:
            folded.append(numpy_helper.from_array(consts[init], b_in))
            continue
        carried.append(Carried(init=init, input=b_in, output=None if passthrough else b_out, result=result))
    return carried, folded


def _tail(graph: Any, li: int, consts: Dict[str, Any]) -> Tuple[List[Any], List[str], List[str]]:
    """The nodes after the Loop that make the outputs, the values they read (Loop results, encoder outputs), and the
    constants of the main graph they read (copied into the tail as weights)."""
    loop_results = set(graph.node[li].output)
    nodes = _needed(list(graph.node[li + 1 :]), {o.name for o in graph.output})
    produced = {o for n in nodes for o in n.output}
    reads = {i for n in nodes for i in list(n.input) + sorted(_outer_refs(n))} - produced - {""}
    reads |= {o.name for o in graph.output} - produced  # a Loop result that is an output as it is
    inputs = [t for t in sorted(reads) if t not in consts or t in loop_results]
    weights = sorted(({i for n in nodes for i in n.input} & set(consts)) - loop_results - produced)
    return nodes, inputs, weights


def split_loop(proto: Any) -> SplitGraphs:
    """The encoder, step and tail models of ``proto`` (one top-level Loop, no Loop inside its body)."""
    from onnx import numpy_helper

    graph = proto.graph
    li = _the_loop(graph)
    loop = graph.node[li]
    body = next(a.g for a in loop.attribute if a.name == "body")
    consts, types = _constants(graph), _elem_types(proto)
    outer_refs = sorted(_outer_refs(loop))
    outer = [r for r in outer_refs if r not in consts]
    carried, folded = _carried(graph, li, consts)
    n_carried = len(loop.input) - 2
    body_out = [v.name for v in body.output]
    scans = [(body_out[1 + n_carried + j], loop.output[n_carried + j]) for j in range(len(body_out) - 1 - n_carried)]
    tail_nodes, tail_inputs, tail_consts = _tail(graph, li, consts)
    pre = [t for t in tail_inputs if t not in set(loop.output)]
    trip, cond = loop.input[0] or None, loop.input[1] or None
    enc_outputs = list(dict.fromkeys([t for t in (trip, cond) if t] + [c.init for c in carried] + pre + outer))
    enc_nodes = _needed(list(graph.node[:li]), set(enc_outputs))
    enc_inits = [i for i in graph.initializer if i.name in {x for n in enc_nodes for x in n.input}]
    encoder = _model(
        proto, enc_nodes, list(graph.input), [_value(n, types[n]) for n in enc_outputs], enc_inits, "encoder"
    )
    step_inputs = [body.input[0], body.input[1]] + [v for v in body.input[2:] if v.name in {c.input for c in carried}]
    step_outputs = [body.output[0]] + [
        v for v in body.output[1:] if v.name in {c.output for c in carried} | {s for s, _ in scans}
    ]
    step = _model(
        proto,
        list(body.node),
        [_value(v.name, v.type.tensor_type.elem_type) for v in step_inputs] + [_value(r, types[r]) for r in outer],
        [_value(v.name, v.type.tensor_type.elem_type) for v in step_outputs],  # shapes: from a sample run
        list(body.initializer) + folded + [numpy_helper.from_array(consts[r], r) for r in outer_refs if r in consts],
        "step",
    )
    tail_weights = [numpy_helper.from_array(consts[c], c) for c in tail_consts]
    tail = _model(
        proto, tail_nodes, [_value(n, types[n]) for n in tail_inputs], list(graph.output), tail_weights, "tail"
    )
    spec = LoopSpec(
        node=loop.name or "Loop",
        trip_count=trip,
        max_steps=int(consts[trip].reshape(-1)[0]) if trip and trip in consts else None,
        cond_init=cond,
        iter_input=body.input[0].name,
        cond_input=body.input[1].name,
        cond_output=body_out[0],
        carried=carried,
        scans=scans,
        outer=outer,
        tail_inputs=tail_inputs,
    )
    return SplitGraphs(encoder, step, tail, spec)
