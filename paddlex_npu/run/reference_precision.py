"""ATC's precision on the CPU: the reference runtime running a package as ``--precision_mode_v2=fp16`` builds it.

ATC's fp16 (``--precision_mode_v2=fp16``, older ``--precision_mode=force_fp16``): "an operator that supports
float16 and float32 computes in float16" (CANN ATC reference, ``--precision_mode_v2``), its weights stored in
float16; ``--keep_dtype`` names operators kept in their original precision (not with ``origin``);
``--precision_mode_v2=origin`` keeps the whole model as built (``paddlex-npu convert --precision fp32``).

:func:`fp16_storage` rewrites an ONNX model so that ONNX Runtime sees what float16 storage does: every float32
weight rounded to float16, every float32 graph input and every float32 output of every operator rounded through
float16 (a ``Cast`` to float16 and back: values above 65504 become inf, small ones lose their low bits), except the
operators named in ``keep`` (their outputs and the weights only they read stay float32). Each operator still
computes in float32 inside, so this is a lower bound of what the device does (its accumulations in float16 are not
reproduced); operators whose device kernel has no float16 form (kept float32 by ATC, not documented per operator)
are treated as float16; operators inside subgraphs (``If``, ``Loop``) are left as they are.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Set, Tuple

import numpy as np

PRECISIONS = ("fp32", "fp16")
_SUFFIX = "__pxn_fp32"


def _float_tensors(model: Any) -> Set[str]:
    """Names of the float32 tensors of the main graph, as ONNX shape inference types them."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    infos = list(graph.value_info) + list(graph.output) + list(graph.input)
    return {v.name for v in infos if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}


def _round_node(name: str, source: str, target: str) -> List[Any]:
    from onnx import TensorProto, helper

    half = f"{target}__pxn_fp16"
    return [
        helper.make_node("Cast", [source], [half], name=f"{name}__pxn_to16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", [half], [target], name=f"{name}__pxn_to32", to=TensorProto.FLOAT),
    ]


def _round_weights(graph: Any, keep_only: Set[str]) -> int:
    """Round every float32 initializer not read only by kept operators to float16 values (kept float32)."""
    from onnx import TensorProto, numpy_helper

    count = 0
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT or init.name in keep_only:
            continue
        values = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(values.astype(np.float16).astype(np.float32), init.name))
        count += 1
    return count


def _round_constant(node: Any) -> None:
    """A ``Constant`` node's float32 ``value`` rounded to float16 values (kept float32)."""
    from onnx import TensorProto, numpy_helper

    for attr in node.attribute:
        if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
            values = numpy_helper.to_array(attr.t)
            with np.errstate(over="ignore"):  # past 65504: inf, as the Cast to float16 it replaces gives
                attr.t.CopyFrom(numpy_helper.from_array(values.astype(np.float16).astype(np.float32), attr.t.name))


def fp16_storage(model: Any, keep: Iterable[str] = ()) -> Tuple[Any, int]:
    """``model`` (an ``onnx.ModelProto``, changed in place) with float16 storage as described in the module's
    docstring; returns it and the number of operators whose outputs are rounded."""
    graph = model.graph
    keep = set(keep)
    floats = _float_tensors(model)
    readers: dict = {}
    for node in graph.node:
        for i in node.input:
            readers.setdefault(i, set()).add(node.name in keep)
    keep_only = {name for name, kept in readers.items() if kept == {True}}
    _round_weights(graph, keep_only)
    initializers = {i.name for i in graph.initializer}
    renamed = {}
    nodes: List[Any] = []
    for inp in graph.input:  # what the device receives: the model's inputs, in float16 from the first operator on
        if inp.name in floats and inp.name not in initializers and inp.name not in keep_only:
            renamed[inp.name] = inp.name + "__pxn_in16"
            nodes += _round_node(inp.name, inp.name, renamed[inp.name])
    rounded = 0
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed and node.name not in keep:
                node.input[k] = renamed[name]
        nodes.append(node)
        if node.name in keep:
            continue
        if node.op_type == "Constant":  # a weight: stored in float16 in place, as an initializer (an empty
            _round_constant(node)  # `scales` of Resize behind Casts would no longer read as absent)
            continue
        outs = [o for o in node.output if o in floats]
        for o in outs:
            node.output[list(node.output).index(o)] = o + _SUFFIX
            nodes += _round_node(o, o + _SUFFIX, o)  # named by the output: a Split has several
        rounded += bool(outs)
    del graph.node[:]
    graph.node.extend(nodes)
    return model, rounded


def fp16_model_bytes(onnx_path: str, keep: Iterable[str] = ()) -> bytes:
    """The serialized :func:`fp16_storage` model of ``onnx_path`` (for ``onnxruntime.InferenceSession``)."""
    import onnx

    model, _ = fp16_storage(onnx.load(onnx_path), keep)
    return model.SerializeToString()
