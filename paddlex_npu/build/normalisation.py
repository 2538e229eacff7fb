"""Detection's input normalisation on the device: the OM takes 8-bit pixels and normalises them itself.

PaddleX's text detection normalises each page on the host (``NormalizeImage``: per channel, ``float32(x) *
alpha[c] + beta[c]`` with ``alpha = scale / std``, ``beta = -mean / std``), then hands the device float32, four
bytes a pixel. ``convert`` puts that arithmetic at the head of the graph instead: the model's image input becomes
uint8 (same name, same NCHW shape, ranges and gears), followed by ``Cast`` to float32, ``Mul`` by alpha and
``Add`` of beta, each as a ``[1, C, 1, 1]`` float32 constant, the same float32 operations in the same order as
PaddleX's. ATC builds these as ordinary operators in every shape mode (ATC's AIPP could do it too, but not with a
shape range on a one-input model; docs/benchmark.md). The host then skips the normalisation and moves a quarter of
the bytes (:mod:`paddlex_npu.paddlex.host_steps` fits PaddleX's predictor to it).

The manifest records it (``normalisation``, :class:`paddlex_npu.om.manifest.InputNormalisation`);
:func:`unnormalised` gives back the model the package was built from (what PaddleX's own engines run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ConvertError, ModelFileError
from ..om import manifest as mf
from ..run.tasks import TEXT_DET

_PREFIX = "paddlex_npu_norm"
_NODES = (f"{_PREFIX}_cast", f"{_PREFIX}_mul", f"{_PREFIX}_add")


def _has_head(graph: Any) -> bool:
    """Whether the graph starts with the normalising head :func:`normalise_on_device` adds."""
    return {n.name for n in graph.node} >= set(_NODES)


def affine_of(cfg: Dict[str, Any]) -> Optional[Tuple[List[float], List[float]]]:
    """``(alpha, beta)`` of the ``NormalizeImage`` step of a model's ``inference.yml``, computed as PaddleX's
    ``NormalizeImage.__init__`` does (defaults and a ``scale`` such as ``1./255.`` included); None without one."""
    ops = ((cfg.get("PreProcess") or {}).get("transform_ops")) or []
    step = next((op["NormalizeImage"] for op in ops if isinstance(op, dict) and "NormalizeImage" in op), None)
    if step is None:
        return None
    step = step or {}
    scale = step.get("scale")
    if isinstance(scale, str):  # PaddleX eval()s it ("1./255."); only a plain a/b of numbers is taken here
        num, _, den = scale.partition("/")
        scale = float(num) / float(den) if den else float(num)
    scale = scale if scale is not None else 1.0 / 255.0
    mean = step.get("mean") or [0.485, 0.456, 0.406]
    std = step.get("std") or [0.229, 0.224, 0.225]
    return [scale / s for s in std], [-m / s for m, s in zip(mean, std)]


def normalise_on_device(onnx_path: Path, alpha: List[float], beta: List[float]) -> mf.InputNormalisation:
    """Make the model's one NCHW float32 image input uint8, normalised at the head of the graph; in place."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    inputs = [i for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    if _has_head(graph):  # a package's ONNX converted again: it normalises already
        consts = {t.name: numpy_helper.to_array(t).ravel().tolist() for t in graph.initializer}
        kept = (consts[f"{_PREFIX}_alpha"], consts[f"{_PREFIX}_beta"])
        if not np.array_equal(np.float32(kept), np.float32((alpha, beta))):
            raise ConvertError(
                f"{onnx_path}: it already normalises on the device with other values than its inference.yml's "
                f"NormalizeImage: convert the model it was built from (`--no-device-normalise` keeps it as it is)"
            )
        return mf.InputNormalisation(kind="affine_uint8", input=inputs[0].name, alpha=list(alpha), beta=list(beta))
    dims = inputs[0].type.tensor_type.shape.dim if len(inputs) == 1 else []
    if (
        len(inputs) != 1
        or inputs[0].type.tensor_type.elem_type != TensorProto.FLOAT
        or len(dims) != 4
        or dims[1].dim_value not in (0, len(alpha))  # 0: a channel dim the export left open (dim_param)
    ):
        raise ConvertError(
            f"{onnx_path}: device normalisation needs one float32 NCHW image input with {len(alpha)} channels; "
            f"this model has {', '.join(i.name for i in inputs)}: convert it with --no-device-normalise"
        )
    name = inputs[0].name
    pixels = f"{_PREFIX}_pixels"
    for node in graph.node:  # the model now reads the normalised tensor
        node.input[:] = [f"{_PREFIX}_out" if i == name else i for i in node.input]
    alpha_t = numpy_helper.from_array(np.asarray(alpha, np.float32).reshape(1, -1, 1, 1), f"{_PREFIX}_alpha")
    beta_t = numpy_helper.from_array(np.asarray(beta, np.float32).reshape(1, -1, 1, 1), f"{_PREFIX}_beta")
    graph.initializer.extend([alpha_t, beta_t])
    head = [
        helper.make_node("Cast", [name], [pixels], name=_NODES[0], to=TensorProto.FLOAT),
        helper.make_node("Mul", [pixels, alpha_t.name], [f"{_PREFIX}_scaled"], name=_NODES[1]),
        helper.make_node("Add", [f"{_PREFIX}_scaled", beta_t.name], [f"{_PREFIX}_out"], name=_NODES[2]),
    ]
    nodes = head + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    inputs[0].type.tensor_type.elem_type = TensorProto.UINT8
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))
    return mf.InputNormalisation(kind="affine_uint8", input=name, alpha=list(alpha), beta=list(beta))


def maybe_normalise(
    onnx_path: Path, task_kind: str, cfg: Dict[str, Any], enabled: bool
) -> Optional[mf.InputNormalisation]:
    """The device normalisation of a text detection model whose ``inference.yml`` normalises with
    ``NormalizeImage`` (``enabled`` False: none)."""
    if task_kind != TEXT_DET:
        return None
    if not enabled:
        import onnx

        if _has_head(onnx.load(str(onnx_path), load_external_data=False).graph):
            raise ConvertError(
                f"{onnx_path}: this model already normalises on the device (a package's ONNX converted again); "
                "--no-device-normalise needs the model it was built from"
            )
        return None
    affine = affine_of(cfg)
    return None if affine is None else normalise_on_device(onnx_path, *affine)


def unnormalised(onnx_path: Path, normalisation: mf.InputNormalisation, out_path: Path) -> Path:
    """``onnx_path`` without the head :func:`normalise_on_device` added, its input float32 again, written to
    ``out_path`` (may be ``onnx_path``)."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(onnx_path))
    graph = model.graph
    if not _has_head(graph):
        raise ModelFileError(
            f"{onnx_path}: its manifest records a device normalisation but the ONNX does not start with it: "
            "convert the model again (`paddlex-npu convert`)"
        )
    kept = [n for n in graph.node if n.name not in _NODES]
    for node in kept:
        node.input[:] = [normalisation.input if i == f"{_PREFIX}_out" else i for i in node.input]
    del graph.node[:]
    graph.node.extend(kept)
    init = [t for t in graph.initializer if not t.name.startswith(_PREFIX)]
    del graph.initializer[:]
    graph.initializer.extend(init)
    next(i for i in graph.input if i.name == normalisation.input).type.tensor_type.elem_type = TensorProto.FLOAT
    onnx.checker.check_model(model)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path
