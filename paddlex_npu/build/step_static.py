"""A decoder step (:mod:`.loop_split`) made static-shaped, for GE's static executor instead of its hybrid one.

paddle2onnx writes SLANet's "``buffer[:, i] = value``" as ``Slice``/``Range``/``Expand``/``Tile`` from the counter
and a ``ScatterElements``, and its stop test as an ``If``: value-dependent shapes, which GE runs on its hybrid
executor with a host sync at the ``If`` (correction 35), and operators the 310P AI Core lacks. Where a sample
decode shows that such a value has the same shape at every step, it is rewritten with that shape fixed:

- ``Range(start, limit, delta)`` of length L: ``start + [0..L) * delta``;
- ``Slice`` with computed starts on one axis, steps 1: a ``Gather`` of ``start + [0..L)`` on that axis;
- ``Expand``/``Tile`` to a computed shape: to the constant shape;
- ``ScatterElements`` whose indices are one position wide on its axis: ``Where(iota == indices, updates, data)``;
- ``If`` whose branches hold no subgraph: both branches inlined, ``Where(cond, then, else)``.

The rewritten step is kept only if it gives exactly the original step's outputs on every sampled step
(:func:`static_step`); otherwise the original is used and the note says why. No table per model: the rules read
the graph and the sampled shapes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

REWRITTEN = ("Range", "Slice", "Expand", "Tile", "ScatterElements", "If")


def _consts(graph: Any) -> Dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _session(model: Any, extra: Sequence[str] = ()) -> Any:
    """``model`` on ONNX Runtime, with the values ``extra`` as outputs too."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    types = _elem_types(probe)
    for name in extra:
        if name not in have and name in types:
            probe.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _elem_types(model: Any) -> Dict[str, int]:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)}
    types.update({i.name: i.data_type for i in g.initializer})
    return {k: v for k, v in types.items() if v}


def _values(model: Any) -> List[str]:
    """Every value a node of ``model`` computes."""
    return [o for n in model.graph.node for o in n.output if o]


def _run(sess: Any, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    wanted = {i.name for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))


class _Writer:
    """New nodes and weights with fresh names."""

    def __init__(self, prefix: str) -> None:
        self.nodes: List[Any] = []
        self.weights: List[Any] = []
        self.prefix = prefix
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"{self.prefix}__static{self.count}"

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name()
        self.weights.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: List[str], output: Optional[str] = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self.name()
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(), **attrs))
        return out


def _scalar(w: _Writer, value: str) -> str:
    return w.node("Reshape", [value, w.const(np.zeros((0,), np.int64))])


def _range(w: _Writer, node: Any, shapes: Dict[str, Tuple[int, ...]], dtypes: Dict[str, Any]) -> bool:
    length = shapes[node.output[0]][0]
    steps = w.const(np.arange(length).astype(dtypes[node.output[0]]))
    w.node("Add", [w.node("Mul", [steps, node.input[2]]), node.input[0]], node.output[0])
    return True


def _slice(w: _Writer, node: Any, shapes: Dict[str, Tuple[int, ...]], consts: Dict[str, np.ndarray]) -> bool:
    ins = list(node.input) + [""] * (5 - len(node.input))
    data, starts, _, axes, steps = ins
    if (axes and axes not in consts) or (steps and steps not in consts):
        return False
    n_axes = int(np.prod(shapes[starts])) if starts in shapes else 0
    axes_v = [int(a) for a in (consts[axes].reshape(-1) if axes else range(n_axes))]
    if steps and any(int(s) != 1 for s in consts[steps].reshape(-1)):
        return False
    out, cur = shapes[node.output[0]], data
    for k, axis in enumerate(axes_v):
        axis = axis % len(out)
        start = w.node("Gather", [starts, w.const(np.array(k, np.int64))], axis=0)
        index = w.node("Add", [w.const(np.arange(out[axis], dtype=np.int64)), w.node("Cast", [start], to=7)])
        cur = w.node("Gather", [cur, index], axis=axis)
    w.node("Identity", [cur], node.output[0])
    return True


def _scatter(w: _Writer, node: Any, shapes: Dict[str, Tuple[int, ...]], dtypes: Dict[str, Any]) -> bool:
    data, idx, upd = node.input
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    dshape, ishape = shapes[data], shapes[idx]
    axis %= len(dshape)
    if len(ishape) != len(dshape) or ishape[axis] != 1:
        return False
    if any(i != d for j, (i, d) in enumerate(zip(ishape, dshape)) if j != axis):
        return False
    iota = np.arange(dshape[axis]).astype(dtypes[idx]).reshape([-1 if j == axis else 1 for j in range(len(dshape))])
    mask = w.node("Equal", [w.const(iota), idx])
    w.node("Where", [mask, upd, data], node.output[0])
    return True


def _if(w: _Writer, node: Any, dtypes: Dict[str, Any]) -> bool:
    from onnx import helper

    branches = {a.name: a.g for a in node.attribute}
    picked = []
    for key in ("then_branch", "else_branch"):
        g = branches[key]
        if any(a.HasField("g") for n in g.node for a in n.attribute):
            return False
        inner = {o for n in g.node for o in n.output}
        renamed = {v: f"{v}__{w.prefix}_{key}" for v in inner}
        for n in g.node:
            w.nodes.append(
                helper.make_node(
                    n.op_type,
                    [renamed.get(i, i) for i in n.input],
                    [renamed[o] for o in n.output],
                    name=f"{n.name or n.op_type}__{w.prefix}_{key}{len(w.nodes)}",
                )
            )
            w.nodes[-1].attribute.extend(n.attribute)
        w.weights.extend(g.initializer)
        picked.append([renamed.get(o.name, o.name) for o in g.output])
    cond = _scalar(w, w.node("Cast", [node.input[0]], to=9))
    for out, then, other in zip(node.output, *picked):
        if dtypes.get(out) == np.bool_:
            yes, no = w.node("And", [cond, then]), w.node("And", [w.node("Not", [cond]), other])
            w.node("Or", [yes, no], out)
        else:
            w.node("Where", [cond, then, other], out)
    return True


def rewrite(model: Any, shapes: Dict[str, Tuple[int, ...]], dtypes: Dict[str, Any]) -> Tuple[Any, List[str]]:
    """``model`` with every rewritable value-dependent node replaced (see the module's docstring), and the nodes
    left as they were (name and type)."""
    import onnx

    graph = model.graph
    consts = _consts(graph)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    del out.graph.value_info[:]
    left: List[str] = []
    for index, node in enumerate(graph.node):
        w = _Writer(node.name or f"{node.op_type}_{index}")
        done = False
        if node.op_type in REWRITTEN and all(o in shapes for o in node.output):
            if node.op_type == "Range":
                done = _range(w, node, shapes, dtypes)
            elif node.op_type == "Slice":
                done = _slice(w, node, shapes, consts)
            elif node.op_type in ("Expand", "Tile"):
                target = w.const(np.array(shapes[node.output[0]], np.int64))
                if node.op_type == "Expand":
                    done = bool(w.node("Expand", [node.input[0], target], node.output[0]))
                elif node.input[0] in shapes:
                    reps = np.array(shapes[node.output[0]]) // np.maximum(np.array(shapes[node.input[0]]), 1)
                    done = bool(w.node("Tile", [node.input[0], w.const(reps.astype(np.int64))], node.output[0]))
            elif node.op_type == "ScatterElements":
                done = _scatter(w, node, shapes, dtypes)
            elif node.op_type == "If":
                done = _if(w, node, dtypes)
        if done:
            out.graph.node.extend(w.nodes)
            out.graph.initializer.extend(w.weights)
        else:
            out.graph.node.append(node)
            if node.op_type in REWRITTEN:
                left.append(f"{node.name} ({node.op_type})")
    return out, left


def prune(model: Any) -> None:
    """Drop the nodes no output depends on (what a rewrite left unused: the ``Min`` that bounded a ``Slice``'s end),
    as GE's dead-code pass does, and the weights nothing reads any more."""
    graph = model.graph
    need = {o.name for o in graph.output}
    keep = []
    for node in reversed(list(graph.node)):
        if any(o in need for o in node.output):
            keep.append(node)
            need.update(i for i in node.input if i)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    used = [w for w in graph.initializer if w.name in need]
    del graph.initializer[:]
    graph.initializer.extend(used)


# int64 operators the 310P AI Core lacks (om/aicpu_ops.py: Minimum, Less, Greater, Tile on int64; Casts between
# int64 and float or bool) computed in int32 between two Casts the AI Core has (int64 <-> int32, P:4174)
NARROWED = ("Min", "Max", "Less", "Greater", "Tile", "Cast")
_I64, _I32 = 7, 6  # TensorProto.INT64, INT32


def narrow(model: Any, dtypes: Dict[str, Any]) -> int:
    """Every int64 ``Min``/``Max``/``Less``/``Greater``/``Tile`` computed in int32, and every ``Cast`` from or to
    int64 through int32, with the int64 values cast at the node's edges: exact while the values fit in int32 (a
    decoder step's int64 values are its counter and indices, bounded by its buffers; :func:`static_step` checks the
    result on every sampled step). Returns how many nodes were narrowed."""
    from onnx import helper

    graph, nodes, count = model.graph, [], 0
    for index, node in enumerate(graph.node):
        w = _Writer(f"{node.name or node.op_type}_{index}__int32")
        ins64 = [i for i in node.input if i and dtypes.get(i) == np.int64]
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        src_type = dtypes.get(node.input[0]) if node.input else None
        from64 = bool(ins64) and to not in (_I32, _I64)
        to64 = to == _I64 and src_type is not None and src_type not in (np.int32, np.int64)
        if node.op_type == "Cast" and (from64 or to64):
            src = w.node("Cast", [node.input[0]], to=_I32) if ins64 else node.input[0]
            if to == _I64:
                w.node("Cast", [w.node("Cast", [src], to=_I32)], node.output[0], to=_I64)
            else:
                w.node("Cast", [src], node.output[0], to=to)
        elif (
            node.op_type in NARROWED[:-1]
            and node.input[0] in ins64
            and (node.op_type == "Tile" or len(ins64) == len([i for i in node.input if i]))
        ):
            if node.op_type == "Tile":
                ins = [w.node("Cast", [node.input[0]], to=_I32), node.input[1]]
            else:
                ins = [w.node("Cast", [i], to=_I32) for i in node.input]
            out = w.name()
            nodes.extend(w.nodes)
            nodes.append(helper.make_node(node.op_type, ins, [out], name=w.name()))
            w.nodes = []
            if node.op_type in ("Less", "Greater"):
                nodes.append(helper.make_node("Identity", [out], [node.output[0]], name=w.name()))
            else:
                nodes.append(helper.make_node("Cast", [out], [node.output[0]], name=w.name(), to=_I64))
            count += 1
            continue
        else:
            nodes.append(node)
            continue
        nodes.extend(w.nodes)
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return count


def static_step(model: Any, samples: List[Dict[str, np.ndarray]]) -> Tuple[Optional[Any], str]:
    """The step ``model`` rewritten static-shaped, checked against it on every sampled step's inputs; None and
    the reason when a value-dependent node is left or the outputs differ."""
    probe = [o for n in model.graph.node if n.op_type in REWRITTEN for o in n.output]
    probe += [i for n in model.graph.node if n.op_type in REWRITTEN for i in n.input if i]
    sess = _session(model, probe)
    seen = _run(sess, samples[0])
    shapes = {k: tuple(v.shape) for k, v in seen.items()}
    dtypes = {k: v.dtype for k, v in seen.items()}
    shapes.update({k: tuple(v.shape) for k, v in samples[0].items()})
    dtypes.update({k: v.dtype for k, v in samples[0].items()})
    static, left = rewrite(model, shapes, dtypes)
    if left:
        return None, f"value-dependent nodes left as they are: {', '.join(left[:6])}"
    prune(static)
    dtypes.update({k: v.dtype for k, v in _run(_session(static, _values(static)), samples[0]).items()})
    narrowed = narrow(static, dtypes)
    original, rewritten = _session(model), _session(static)
    for k, feeds in enumerate(samples):
        want, got = _run(original, feeds), _run(rewritten, feeds)
        for name, value in want.items():
            if got[name].shape != value.shape and got[name].size == value.size:
                got[name] = got[name].reshape(value.shape)
            if got[name].shape != value.shape or not np.array_equal(got[name], value):
                return None, f"the static step differs from the step on sampled step {k} ({name})"
    checked = f"{len(samples)} sampled step" + ("s" if len(samples) > 1 else "")
    return static, f"static-shaped, {narrowed} int64 nodes in int32 (checked on {checked})"
