"""Solving a model's output dims as expressions of its input dims, once, from its ONNX graph.

onnxruntime's ``SymbolicShapeInference`` propagates sympy expressions through the graph; added here: the
transposed convolution of DB detectors, values passed on by paddle2onnx's ``Identity`` nodes and the ``axis=-1``
concats of 1-D shape pieces it writes, and constant concats folded first. The dynamic input dims are named
``d{k}_{j}`` (:func:`paddlex_npu.om.output_shapes.symbol`); the result is the manifest's ``output_dims``. It
takes 0.1 s (recognisers, classifiers) to ~10 s (a DB detector) on an idle core, so ``convert`` and the asset
builder run it, not the runner.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from ..deps import require
from ..om.output_shapes import Dim, is_expression, symbol


def _inference_class() -> Any:
    """onnxruntime's SymbolicShapeInference with ConvTranspose (DB detectors' upsampling) added."""
    require("onnxruntime", "solving output shapes from the ONNX graph")
    from onnx import helper
    from onnxruntime.tools.symbolic_shape_infer import (
        SymbolicShapeInference,
        get_attribute,
        get_shape_from_sympy_shape,
    )

    class _Inference(SymbolicShapeInference):
        def __init__(self) -> None:
            super().__init__(2**31 - 1, True, False, 0)
            self.dispatcher_["ConvTranspose"] = self._infer_conv_transpose
            self.dispatcher_["Identity"] = self._infer_identity
            self.dispatcher_["Concat"] = self._infer_concat

        def _infer_concat(self, node: Any) -> None:
            """As onnxruntime's, which propagates the values of a Concat of 1-D shape pieces only when its
            axis is written 0: axis -1 of 1-D inputs is the same axis (paddle2onnx writes it)."""
            if all(len(self._get_shape(node, i)) == 1 for i in range(len(node.input))):
                for a in node.attribute:
                    if a.name == "axis" and a.i == -1:
                        a.i = 0
            super()._infer_Concat(node)

        def _infer_identity(self, node: Any) -> None:
            """Shape and type, and also the values (paddle2onnx puts an Identity after most Shape ops)."""
            self._pass_on_shape_and_type(node)
            self._pass_on_sympy_data(node)

        def _infer_conv_transpose(self, node: Any) -> None:
            x, w = self._get_sympy_shape(node, 0), self._get_sympy_shape(node, 1)
            rank = len(w) - 2
            if get_attribute(node, "output_shape") is not None or get_attribute(node, "auto_pad", b"NOTSET") not in (
                b"NOTSET",
                b"VALID",
            ):
                raise _UnsupportedError(f"ConvTranspose {node.name} with output_shape / auto_pad SAME")
            kernel = get_attribute(node, "kernel_shape") or w[2:]
            strides = get_attribute(node, "strides", [1] * rank)
            dilations = get_attribute(node, "dilations", [1] * rank)
            pads = get_attribute(node, "pads", [0] * 2 * rank)
            extra = get_attribute(node, "output_padding", [0] * rank)
            shape = [x[0], w[1] * get_attribute(node, "group", 1)] + [
                (x[2 + i] - 1) * strides[i] + extra[i] + (kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + rank]
                for i in range(rank)
            ]
            self._update_computed_dims(shape)
            elem = self.known_vi_[node.input[0]].type.tensor_type.elem_type
            self.known_vi_[node.output[0]].CopyFrom(
                helper.make_tensor_value_info(node.output[0], elem, get_shape_from_sympy_shape(shape))
            )

    return _Inference


class _UnsupportedError(Exception):
    pass


def derive(proto: Any, data_dependent: Sequence[str] = ()) -> List[Optional[List[Dim]]]:
    """Per graph output, its dims (ints, expressions, None where the input values decide, see
    :mod:`paddlex_npu.om.output_shapes`), or None for an output whose dims the graph does not tell."""
    onnx = require("onnx", "reading the model graph")
    sympy = require("sympy", "solving output shapes from the ONNX graph")
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    inits = {i.name for i in model.graph.initializer}
    names = set()
    for k, node in enumerate(i for i in model.graph.input if i.name not in inits):
        for j, d in enumerate(node.type.tensor_type.shape.dim):
            if not (d.HasField("dim_value") and d.dim_value > 0):
                d.Clear()
                d.dim_param = symbol(k, j)
                names.add(symbol(k, j))
    _fold_constant_concats(model)
    outputs = [o.name for o in model.graph.output]
    unknown: List[Optional[List[Dim]]] = [None] * len(outputs)
    inference = _inference_class()  # outside the try: onnxruntime missing is an error that says what to install
    quiet = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        engine = inference()
        engine._preprocess(model)
        while engine.run_:
            engine._infer_impl()
        engine._update_output_from_vi()
        inferred = {o.name: o for o in engine.out_mp_.graph.output}
    except Exception:  # noqa: BLE001 - an operator or pattern the propagation does not handle: ask per shape
        return unknown
    finally:
        quiet.level = level
    result: List[Optional[List[Dim]]] = []
    for name in outputs:
        t = inferred[name].type.tensor_type  # the solver's output graph is a copy of the model's: every output
        if not t.HasField("shape"):
            result.append(None)
            continue
        dims: List[Dim] = []
        for d in t.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
                continue
            expr = _parse(sympy, d.dim_param) if d.dim_param else None
            if expr is not None and {str(s) for s in expr.free_symbols} <= names:
                dims.append(str(expr))
            elif name in data_dependent:
                dims.append(None)
            else:
                dims = None  # type: ignore[assignment]
                break
        result.append(dims)
    return result


def _fold_constant_concats(model: Any) -> None:
    """Replace each Concat of initializers by its value (the propagation handles only axis-0 ones)."""
    import numpy as np
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "Concat" and node.input and all(i in inits for i in node.input):
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            value = np.concatenate([numpy_helper.to_array(inits[i]) for i in node.input], axis=axis)
            folded = numpy_helper.from_array(value, node.output[0])
            model.graph.initializer.append(folded)
            inits[folded.name] = folded
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def _parse(sympy: Any, text: str) -> Any:
    """The solver's dim ``text`` as a sympy expression; None unless it is arithmetic on input dims and the functions
    sympy writes (the text may come from the model file, and sympify evaluates what it is given)."""
    if not is_expression(text):
        return None
    try:
        return sympy.sympify(text)  # the d{k}_{j} names are read as symbols (no sympy name has that form)
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None


_SOLVED: Dict[str, List[Optional[List[Dim]]]] = {}


def derive_file(onnx_path: Union[str, Path], data_dependent: Sequence[str] = ()) -> List[Optional[List[Dim]]]:
    """:func:`derive` for an ONNX file, remembered per file content for this process (``convert`` builds
    several packages of one model: gears, dymshape)."""
    from ..om.graph import load_graph
    from ..om.manifest import sha256

    key = f"{sha256(onnx_path)}:{','.join(sorted(data_dependent))}"
    if key not in _SOLVED:
        _SOLVED[key] = derive(load_graph(onnx_path), data_dependent)
    return [list(d) if d is not None else None for d in _SOLVED[key]]
