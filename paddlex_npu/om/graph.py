"""What an ONNX graph says about its OM's outputs (``onnx`` only, no runtime): which outputs have a shape that
depends on the input values, so that only a dymshape OM can return them (see :mod:`.manifest`), and the output
shapes for given input shapes (strict shape inference, the model not run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Union

from ..deps import require
from ..errors import ShapeInferenceError

# ONNX operators whose output shape follows the input values, not only the input shapes.
DATA_DEPENDENT_OPS = frozenset({"NonMaxSuppression", "NonZero", "Unique", "Compress", "MultiClassNMS"})


def _fixed(value_info) -> bool:
    """Whether a graph output declares a shape with every dim a known number."""
    t = value_info.type.tensor_type
    return t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in t.shape.dim)


def data_dependent_outputs(onnx_path: Union[str, Path]) -> List[str]:
    """Outputs computed from a data-dependent-shape operator (NMS, NonZero, ...) whose declared shape is not
    fully fixed: ``boxes [M, 6]`` after NMS is one, ``box_num [1]`` is not."""
    onnx = require("onnx", "reading the model graph (convert, inspect, the reference runtime)")

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    producers: Dict[str, object] = {out: node for node in graph.node for out in node.output}
    tainted: Set[str] = set()
    for node in graph.node:  # ONNX nodes are topologically sorted
        if node.op_type in DATA_DEPENDENT_OPS or any(i in tainted for i in node.input):
            tainted.update(node.output)
    return [o.name for o in graph.output if o.name in tainted and o.name in producers and not _fixed(o)]


def _first_error(text: str) -> str:
    """The first node error of an ``onnx`` InferenceError text, on one line."""
    lines = [ln.strip() for ln in text.splitlines() if "op_type" in ln or "Error" in ln]
    first = next((ln for ln in lines if "op_type" in ln), lines[0] if lines else text.strip())
    return first.replace("[ShapeInferenceError] Inference error(s): ", "")[:300]


def load_graph(onnx_path: Union[str, Path]) -> Any:
    """The ONNX model proto (weights left on disk), for :func:`output_dims`."""
    onnx = require("onnx", "reading the model graph (convert, inspect, the reference runtime)")
    return onnx.load(str(onnx_path), load_external_data=False)


def output_dims(proto: Any, shapes: Sequence[Sequence[int]], output_names: Sequence[str]) -> Optional[List[List[int]]]:
    """Dims of ``output_names`` (0 where unknown) when the graph's inputs take ``shapes``, by strict ONNX shape
    inference; None when it cannot tell (an op onnx does not know, a graph it gives up on). A shape the model
    cannot take raises :class:`ShapeInferenceError` naming the node."""
    onnx = require("onnx", "ONNX shape inference")
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for node, shape in zip(model.graph.input, shapes):
        for d, v in zip(node.type.tensor_type.shape.dim, shape):
            d.Clear()
            d.dim_value = int(v)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True).graph.output
    except onnx.shape_inference.InferenceError as exc:
        if "registered" in str(exc):  # an op without a schema, if onnx says so (1.23.2 leaves its outputs unshaped)
            return None
        raise ShapeInferenceError(_first_error(str(exc))) from None
    except Exception:  # noqa: BLE001 - shape inference gives up on some graphs (e.g. > 2 GB): sizes unknown
        return None
    # an output inference leaves without a shape (an op onnx does not know) is of unknown rank: [0], not a scalar
    by_name = {o.name: o.type.tensor_type for o in inferred if o.type.tensor_type.HasField("shape")}
    return [
        [d.dim_value if d.HasField("dim_value") else 0 for d in by_name[n].shape.dim] if n in by_name else [0]
        for n in output_names
    ]


def ge_output_names(proto: Any) -> List[str]:
    """The output names a built OM reports (``aclmdlGetOutputNameByIndex``): GE names each output
    ``"<producer node>:<output index>:<tensor name>"`` (hicann/ge ``compiler/graph/passes/feature/net_output_pass.cc``
    ``TryToSetOutputNodeName``, correction 32). An unnamed ONNX node is named here by its type and position (GE's
    parser names it otherwise: only the position and the tensor name are to be relied on)."""
    producers: Dict[str, str] = {}
    for i, node in enumerate(proto.graph.node):
        for k, out in enumerate(node.output):
            producers[out] = f"{node.name or f'{node.op_type}_{i}'}:{k}"
    return [f"{producers.get(o.name, o.name + ':0')}:{o.name}" for o in proto.graph.output]


def rank_merged_outputs(proto: Any) -> Set[str]:
    """Graph outputs of a rank GE cannot know: computed from an ``If`` whose branches return different ranks (GE
    merges them to UNKNOWN_RANK, hicann/ge ``docs/en/design/features/infer_shape.md:300``, correction 33), unless a
    ``Reshape`` to a constant shape types the value again on the way. ONNX's inference (onnx 1.x) does the same
    merge for the ``If`` itself."""
    onnx = require("onnx", "ONNX shape inference")
    model = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    graph = model.graph
    consts = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    tainted: Set[str] = set()
    for node in graph.node:  # topologically sorted
        if node.op_type == "If":
            ranks = []
            for a in node.attribute:
                if a.HasField("g"):
                    out = a.g.output
                    ranks.append(
                        tuple(
                            len(o.type.tensor_type.shape.dim) if o.type.tensor_type.HasField("shape") else -1
                            for o in out
                        )
                    )
            if len(ranks) == 2 and all(r >= 0 for rs in ranks for r in rs) and ranks[0] != ranks[1]:
                tainted.update(node.output)
                continue
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in consts:
            continue
        if any(i in tainted for i in node.input):
            tainted.update(node.output)
    return {o.name for o in graph.output if o.name in tainted}


UNKNOWN_RANK = [-2]  # GE's UNKNOWN_RANK shape, as ACL reports it for an output whose rank is not known


def ge_output_dims(proto: Any, shapes: Sequence[Sequence[int]]) -> Optional[List[Optional[List[int]]]]:
    """Output dims as GE infers them for inputs of ``shapes``, from the graph alone: the declared shapes of the
    graph's outputs and intermediate values are dropped first, since GE infers every shape itself and ignores
    ONNX's annotations (correction 33). An output computed from an ``If`` whose branches return different ranks is
    :data:`UNKNOWN_RANK` (:func:`rank_merged_outputs`); -1 marks a dim ONNX's inference does not tell and None an
    output whose rank it does not tell: GE folds shape arithmetic at a static shape, which ONNX's inference often
    cannot (paddle2onnx's ``Reshape`` to a computed shape), so the caller decides those. None when the inference
    gives up on the graph."""
    onnx = require("onnx", "ONNX shape inference")
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.type.tensor_type.ClearField("shape")
    for node, shape in zip(model.graph.input, shapes):
        for j, (d, v) in enumerate(zip(node.type.tensor_type.shape.dim, shape)):
            d.Clear()
            if int(v) > 0:
                d.dim_value = int(v)
            else:
                d.dim_param = f"{node.name}_{j}"
    inputs = {v.name: v for v in model.graph.input}
    for o in model.graph.output:  # an input passed straight through: GE's Data node has its shape
        if o.name in inputs:
            o.type.tensor_type.shape.CopyFrom(inputs[o.name].type.tensor_type.shape)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True).graph.output
    except Exception:  # noqa: BLE001 - shape inference gives up on some graphs: nothing known
        return None
    merged = rank_merged_outputs(model)
    out: List[Optional[List[int]]] = []
    for o in inferred:
        t = o.type.tensor_type
        if o.name in merged:
            out.append(list(UNKNOWN_RANK))
        elif not t.HasField("shape"):
            out.append(None)  # rank not told by ONNX's inference (GE folds the shape arithmetic: see the caller)
        else:
            out.append([d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim])
    return out
