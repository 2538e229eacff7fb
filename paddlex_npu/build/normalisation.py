"""Detection's input normalisation on the device: the OM takes 8-bit pixels and normalises them itself.

PaddleX's text detection normalises each page on the host (``NormalizeImage``: per channel, ``float32(x) *
alpha[c] + beta[c]`` with ``alpha = scale / std``, ``beta = -mean / std``), then hands the device float32, four
bytes a pixel. ``convert`` puts that arithmetic at the head of the graph instead: the model's image input becomes
uint8 (same name, same NCHW shape, ranges and gears), followed by ``Cast`` to float32, ``Mul`` by alpha and
``Add`` of beta, each as a ``[1, C, 1, 1]`` float32 constant, the same float32 operations in the same order as
PaddleX's. ATC builds these as ordinary operators in every shape mode (ATC's AIPP could do it too, but not with a
shape range on a one-input model; docs/benchmark.md). The host then skips the normalisation and moves a quarter of
the bytes (:mod:`paddlex_npu.paddlex.host_steps` fits PaddleX's predictor to it).

Text recognition likewise (:func:`normalise_lines_on_device`): PaddleX's ``OCRReisizeNormImg`` computes
``((float32(x) / 255) - 0.5) / 0.5`` and pads each line with 0.0 to the batch's width, a value no 8-bit pixel
becomes. The lines' input becomes uint8 ``[N, C, H + 1, W]``: rows ``0..H-1`` the resized pixels, row ``H`` of channel
0 a mask (1 where a line has a pixel, 0 where PaddleX pads). The head slices the pixels, casts them to float32,
divides by 255, subtracts 0.5 and divides by 0.5 (PaddleX's operations in its order), and ``Where`` the mask is 0
(cast to float32 and compared, all on the AI Core: a cast of uint8 to bool would go to the AI CPU of a 310P)
puts 0.0: bit-equal to PaddleX's batch, at a quarter of the bytes plus one row in 3H.

The manifest records it (``normalisation``, :class:`paddlex_npu.om.manifest.InputNormalisation`);
:func:`unnormalised` gives back the model the package was built from (what PaddleX's own engines run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ConvertError, ModelFileError
from ..om import manifest as mf
from ..run.tasks import TEXT_DET, TEXT_REC

_PREFIX = "paddlex_npu_norm"
_NODES = (f"{_PREFIX}_cast", f"{_PREFIX}_mul", f"{_PREFIX}_add")
_REC_NODES = tuple(
    f"{_PREFIX}_{n}" for n in ("rows", "cast", "div", "sub", "half", "maskrow", "maskf", "mask", "where")
)
REC_KIND = "rec_uint8_masked"


def _has_head(graph: Any) -> bool:
    """Whether the graph starts with a normalising head :func:`normalise_on_device` or
    :func:`normalise_lines_on_device` adds."""
    names = {n.name for n in graph.node}
    return names >= set(_NODES) or names >= set(_REC_NODES)


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


def rec_shape_of(cfg: Dict[str, Any]) -> Optional[List[int]]:
    """``[C, H, W]`` of the ``RecResizeImg`` step of a recognition model's ``inference.yml`` (PaddleX's
    ``OCRReisizeNormImg``, which normalises as :func:`normalise_lines_on_device` does); None without one."""
    ops = ((cfg.get("PreProcess") or {}).get("transform_ops")) or []
    step = next((op["RecResizeImg"] for op in ops if isinstance(op, dict) and "RecResizeImg" in op), None)
    shape = (step or {}).get("image_shape")
    return [int(d) for d in shape] if isinstance(shape, list) and len(shape) == 3 else None


def _lines_input(onnx_path: Path, graph: Any, channels: int, height: int) -> Any:
    """The one float32 NCHW lines input of a recognition graph, checked against ``[C, H]``."""
    from onnx import TensorProto

    inputs = [i for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    dims = inputs[0].type.tensor_type.shape.dim if len(inputs) == 1 else []
    if (
        len(inputs) != 1
        or inputs[0].type.tensor_type.elem_type != TensorProto.FLOAT
        or len(dims) != 4
        or dims[1].dim_value not in (0, channels)
        or dims[2].dim_value not in (0, height)
    ):
        raise ConvertError(
            f"{onnx_path}: device normalisation of text lines needs one float32 NCHW input of {channels} channels "
            f"and height {height} (inference.yml's RecResizeImg); this model has "
            f"{', '.join(i.name for i in inputs)}: convert it with --no-device-normalise"
        )
    return inputs[0]


def normalise_lines_on_device(onnx_path: Path, channels: int, height: int) -> mf.InputNormalisation:
    """Make a recognition model's lines input uint8 ``[N, C, H + 1, W]`` with the mask row, normalised and
    masked at the head of the graph (module docstring); in place."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    if _has_head(graph):  # a package's ONNX converted again: it normalises already
        name = next(n for n in graph.node if n.name == _REC_NODES[0]).input[0]  # the rows' Slice reads the lines
        return mf.InputNormalisation(kind=REC_KIND, input=name, alpha=[], beta=[], mask_row=height)
    lines = _lines_input(onnx_path, graph, channels, height)
    name, p = lines.name, _PREFIX
    for node in graph.node:  # the model now reads the normalised, masked tensor
        node.input[:] = [f"{p}_out" if i == name else i for i in node.input]
    consts = {
        "r0": np.int64([0]),
        "rh": np.int64([height]),
        "ax_h": np.int64([2]),  # fmt: skip
        "m0": np.int64([0, height]),
        "m1": np.int64([1, height + 1]),
        "ax_ch": np.int64([1, 2]),  # fmt: skip
        "d255": np.full((1, 1, 1, 1), 255, np.float32),
        "half": np.full((1, 1, 1, 1), 0.5, np.float32),  # fmt: skip
        "zero": np.zeros((1, 1, 1, 1), np.float32),
    }
    graph.initializer.extend(numpy_helper.from_array(v, f"{p}_{k}") for k, v in consts.items())
    r, n = _REC_NODES, helper.make_node
    head = [
        n("Slice", [name, f"{p}_r0", f"{p}_rh", f"{p}_ax_h"], [f"{p}_rows"], name=r[0]),
        n("Cast", [f"{p}_rows"], [f"{p}_pixels"], name=r[1], to=TensorProto.FLOAT),
        n("Div", [f"{p}_pixels", f"{p}_d255"], [f"{p}_scaled"], name=r[2]),  # PaddleX: / 255
        n("Sub", [f"{p}_scaled", f"{p}_half"], [f"{p}_shifted"], name=r[3]),  # -= 0.5
        n("Div", [f"{p}_shifted", f"{p}_half"], [f"{p}_norm"], name=r[4]),  # /= 0.5
        n("Slice", [name, f"{p}_m0", f"{p}_m1", f"{p}_ax_ch"], [f"{p}_maskrow"], name=r[5]),
        n("Cast", [f"{p}_maskrow"], [f"{p}_maskf"], name=r[6], to=TensorProto.FLOAT),  # uint8 -> bool: AI CPU
        n("Greater", [f"{p}_maskf", f"{p}_half"], [f"{p}_mask"], name=r[7]),
        n("Where", [f"{p}_mask", f"{p}_norm", f"{p}_zero"], [f"{p}_out"], name=r[8]),  # PaddleX's 0.0 padding
    ]
    nodes = head + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    lines.type.tensor_type.elem_type = TensorProto.UINT8
    dims = lines.type.tensor_type.shape.dim
    if dims[2].dim_value:
        dims[2].dim_value = height + 1
    onnx.checker.check_model(model)
    onnx.save(model, str(onnx_path))
    return mf.InputNormalisation(kind=REC_KIND, input=name, alpha=[], beta=[], mask_row=height)


def maybe_normalise(
    onnx_path: Path, task_kind: str, cfg: Dict[str, Any], enabled: bool
) -> Optional[mf.InputNormalisation]:
    """The device normalisation of a text detection model whose ``inference.yml`` normalises with
    ``NormalizeImage``, or of a recognition model resized by ``RecResizeImg`` (``enabled`` False: none)."""
    if task_kind not in (TEXT_DET, TEXT_REC):
        return None
    if not enabled:
        import onnx

        if _has_head(onnx.load(str(onnx_path), load_external_data=False).graph):
            raise ConvertError(
                f"{onnx_path}: this model already normalises on the device (a package's ONNX converted again); "
                "--no-device-normalise needs the model it was built from"
            )
        return None
    if task_kind == TEXT_REC:
        shape = rec_shape_of(cfg)
        return None if shape is None else normalise_lines_on_device(onnx_path, shape[0], shape[1])
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
    head = _REC_NODES if normalisation.kind == REC_KIND else _NODES
    kept = [n for n in graph.node if n.name not in head]
    for node in kept:
        node.input[:] = [normalisation.input if i == f"{_PREFIX}_out" else i for i in node.input]
    del graph.node[:]
    graph.node.extend(kept)
    init = [t for t in graph.initializer if not t.name.startswith(_PREFIX)]
    del graph.initializer[:]
    graph.initializer.extend(init)
    source = next(i for i in graph.input if i.name == normalisation.input).type.tensor_type
    source.elem_type = TensorProto.FLOAT
    if normalisation.mask_row is not None and source.shape.dim[2].dim_value:
        source.shape.dim[2].dim_value = normalisation.mask_row
    onnx.checker.check_model(model)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path
