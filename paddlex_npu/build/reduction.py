"""The CTC reduction: a recognition model's per-step class scores reduced on the device, before they cross PCIe.

A PP-OCR recognition model ends in a CTC head, ``softmax [N, T, C]`` (C: 6,625 to 18,710 classes), and PaddleX's
``CTCLabelDecode`` keeps of it only ``argmax`` and ``max`` over the class axis. ``convert`` appends those two to the
ONNX before ATC, so the OM returns ``[N, T]`` class indices and ``[N, T]`` scores, 8 bytes a step instead of
``4 * C``:

- ``ArgMax(axis=2, keepdims=0)``, then ``Cast`` to int32. CANN's ONNX ArgMax (opsets 8-18) outputs int64 only and
  supports ``select_last_index=0`` only (the first of equal maxima, as NumPy's ``argmax``): CANN 8.x "Supported ONNX
  Operators", ArgMax (hiascend.com ``aolapi/atlasoxol_09_0010``); the cast halves the index bytes.
- ``ReduceMax(axes=[2], keepdims=0)`` (opset 18+: the axes as an input), float32 as the softmax.

The manifest records it (``reduction``, :class:`paddlex_npu.om.manifest.OutputReduction`), and the route's decode
takes the two arrays directly (:mod:`paddlex_npu.paddlex.ctc_decode`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ..errors import ConvertError, ModelFileError
from ..om import manifest as mf

INDICES, SCORES = mf.CTC_OUTPUTS


def ctc_decoded(cfg: Dict[str, Any]) -> bool:
    """Whether a model's ``inference.yml`` decodes its output with PaddleX's greedy ``CTCLabelDecode``."""
    post = cfg.get("PostProcess") or {}
    return isinstance(post, dict) and post.get("name") == "CTCLabelDecode"


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def reduce_ctc(onnx_path: Path) -> mf.OutputReduction:
    """Append ArgMax (as int32) and ReduceMax over the class axis of the model's one ``[N, T, C]`` output, in
    place; returns what the manifest records."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    if len(graph.output) != 1:
        raise ConvertError(
            f"{onnx_path}: a CTC recognition model has one output [N, T, classes], this one has "
            f"{len(graph.output)} ({', '.join(o.name for o in graph.output)}): convert it with --no-reduce"
        )
    out = graph.output[0]
    dims = out.type.tensor_type.shape.dim
    classes = dims[2].dim_value if len(dims) == 3 else 0
    if out.type.tensor_type.elem_type != TensorProto.FLOAT or classes <= 0:
        raise ConvertError(
            f"{onnx_path}: the output {out.name} is not float32 [N, T, classes] with a fixed class count, as a CTC "
            "head is: convert it with --no-reduce"
        )
    raw, opset = f"{INDICES}_int64", _opset(model)
    nodes = [
        helper.make_node("ArgMax", [out.name], [raw], name="paddlex_npu_ctc_argmax", axis=2, keepdims=0),
        helper.make_node("Cast", [raw], [INDICES], name="paddlex_npu_ctc_indices", to=TensorProto.INT32),
    ]
    if opset >= 18:
        axes = helper.make_tensor("paddlex_npu_ctc_axes", TensorProto.INT64, [1], [2])
        graph.initializer.append(axes)
        nodes.append(helper.make_node("ReduceMax", [out.name, axes.name], [SCORES], name=SCORES, keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceMax", [out.name], [SCORES], name=SCORES, axes=[2], keepdims=0))
    graph.node.extend(nodes)
    new_outputs = []
    for name, elem in ((INDICES, TensorProto.INT32), (SCORES, TensorProto.FLOAT)):
        info = helper.make_tensor_value_info(name, elem, None)
        for d in dims[:2]:  # [N, T] as the CTC output names them
            info.type.tensor_type.shape.dim.add().CopyFrom(d)
        new_outputs.append(info)
    del graph.output[:]
    graph.output.extend(new_outputs)
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))
    return mf.OutputReduction(kind="ctc_greedy", source=out.name, classes=classes)


def maybe_reduce(onnx_path: Path, task_kind: str, cfg: Dict[str, Any], reduce: bool) -> Optional[mf.OutputReduction]:
    """The reduction for a text recognition model decoded by ``CTCLabelDecode`` (``reduce`` False: none)."""
    if not reduce or task_kind != "text_rec" or not ctc_decoded(cfg):
        return None
    return reduce_ctc(onnx_path)


def unreduced(onnx_path: Path, reduction: mf.OutputReduction, out_path: Path) -> Path:
    """The model a reduced package was built from, written to ``out_path``: ``onnx_path`` without the nodes
    :func:`reduce_ctc` appended, its one output ``reduction.source [N, T, classes]`` again (what PaddleX's own
    engines run: their ``CTCLabelDecode`` takes the full scores)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    added = {INDICES, SCORES, f"{INDICES}_int64"}
    outputs = {o.name: o for o in graph.output}
    if set(outputs) != {INDICES, SCORES} or not any(set(n.output) & added for n in graph.node):
        raise ModelFileError(
            f"{onnx_path}: its manifest records a ctc_greedy reduction but the ONNX does not end in it (outputs "
            f"{', '.join(outputs)}): convert the model again (`paddlex-npu convert`)"
        )
    kept = [n for n in graph.node if not set(n.output) & added]
    del graph.node[:]
    graph.node.extend(kept)
    kept_init = [t for t in graph.initializer if t.name != "paddlex_npu_ctc_axes"]
    del graph.initializer[:]
    graph.initializer.extend(kept_init)
    info = helper.make_tensor_value_info(reduction.source, TensorProto.FLOAT, None)
    for d in outputs[INDICES].type.tensor_type.shape.dim:  # [N, T] as the reduced outputs name them
        info.type.tensor_type.shape.dim.add().CopyFrom(d)
    info.type.tensor_type.shape.dim.add().dim_value = reduction.classes
    del graph.output[:]
    graph.output.append(info)
    onnx.checker.check_model(model)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path
