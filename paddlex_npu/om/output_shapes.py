"""Output shapes as functions of the input dims, solved once from the ONNX graph.

Every dynamic input dim is named ``d{k}_{j}`` (dim ``j`` of input ``k``, in the model's input order) and the
graph's symbolic shapes are propagated (onnxruntime's ``SymbolicShapeInference``, sympy expressions, with the
transposed convolution it lacks added here). Each output dim becomes one of:

- an ``int`` (a fixed dim);
- a ``str``: a sympy expression of the ``d{k}_{j}`` names, e.g. ``floor((d0_3 + 3)/8)`` for PP-OCRv6's CTC
  length (the manifest carries these, so the device path without the ONNX gets the same sizes; they are
  evaluated exactly with Fractions, without sympy, after a check that they are only arithmetic);
- ``None``: a dim that follows the input *values* (boxes kept by NMS), which the runner bounds by
  ``backend_config['data_dependent_max']``.

When the propagation cannot tell a dim (an operator it does not handle), :func:`derive` returns None for that
output and the runner asks ONNX shape inference for each new input shape instead (:mod:`.graph`, cached).
"""

from __future__ import annotations

import ast
import logging
import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from ..deps import require

Dim = Union[int, str, None]
SYMBOL = re.compile(r"^d(\d+)_(\d+)$")


def symbol(k: int, j: int) -> str:
    """The name of dim ``j`` of input ``k`` in output expressions."""
    return f"d{k}_{j}"


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
    """Per graph output, its dims (see the module docstring), or None where the graph does not tell."""
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
    quiet = logging.getLogger("onnxruntime.tools.symbolic_shape_infer")
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        engine = _inference_class()()
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
        vi = inferred.get(name)
        t = vi.type.tensor_type if vi is not None else None
        if t is None or not t.HasField("shape"):
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
    try:
        return sympy.sympify(text, locals={s: sympy.Symbol(s) for s in re.findall(r"d\d+_\d+", text)})
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None


_FUNCTIONS = {
    "floor": math.floor,
    "ceiling": math.ceil,
    "Max": max,
    "Min": min,
    "Mod": lambda a, b: a % b,
}
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)


def _checked(text: str) -> ast.Expression:
    """The expression's syntax tree, refused unless it is arithmetic on integers, input dims and the
    functions sympy writes (it may come from a manifest on disk, so nothing else is evaluated)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"output dim {text!r} is not an expression") from None
    for node in ast.walk(tree):
        ok = (
            isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Load) + _OPS)
            or (isinstance(node, ast.Constant) and type(node.value) is int)
            or (isinstance(node, ast.Name) and (SYMBOL.match(node.id) or node.id in _FUNCTIONS))
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords)
        )
        if not ok or (isinstance(node, ast.Call) and node.func.id not in _FUNCTIONS):
            raise ValueError(
                f"output dim {text!r}: an output dim is an int, null, or an expression of input dims "
                f"d<input>_<dim> with integers, + - * / // % ** and {', '.join(_FUNCTIONS)}"
            )
    return tree


class _Exact(ast.NodeTransformer):
    """Integer constants become Fractions, so that ``/`` and ``floor`` are exact (sympy's rationals)."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802
        call = ast.Call(func=ast.Name(id="F", ctx=ast.Load()), args=[node], keywords=[])
        return ast.copy_location(call, node)


def check(dims: Sequence[Dim], where: str) -> None:
    """Refuse an output dim that is neither an int, null nor an expression of input dims."""
    for d in dims:
        if isinstance(d, str):
            try:
                _checked(d)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        elif d is not None and (type(d) is not int or d < 0):
            raise ValueError(f"{where}: output dim {d!r} is not a non-negative int, null or an expression")


@lru_cache(maxsize=1024)
def compile_dim(text: str) -> Callable[[Dict[str, Any]], int]:
    """A function of the input dims (name -> value) for one expression, evaluated exactly (no sympy needed)."""
    tree = ast.fix_missing_locations(_Exact().visit(_checked(text)))
    code = compile(tree, f"<output dim {text}>", "eval")
    names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and SYMBOL.match(n.id)})
    env: Dict[str, Any] = {"__builtins__": {}, "F": Fraction, **_FUNCTIONS}

    def dim(values: Dict[str, Any]) -> int:
        try:
            return int(eval(code, env, {n: values[n] for n in names}))  # noqa: S307 - checked tree, no builtins
        except KeyError as exc:
            raise ValueError(f"output dim {text!r} names {exc.args[0]}, which is no input dim of the model") from None

    return dim


class OutputShapes:
    """Evaluates per-output dims (:func:`derive`'s form) for concrete input shapes."""

    def __init__(self, dims: Sequence[Optional[Sequence[Dim]]], data_dependent_max: int) -> None:
        self.dims = [list(d) if d is not None else None for d in dims]
        self.bound = data_dependent_max
        self._fns = [
            [compile_dim(x) if isinstance(x, str) else x for x in d] if d is not None else None for d in self.dims
        ]

    def known(self, index: int) -> bool:
        return self._fns[index] is not None

    def shape(self, index: int, input_shapes: Sequence[Sequence[int]]) -> List[int]:
        """Dims of output ``index`` (data-dependent dims at their bound) for these input shapes."""
        values = {symbol(k, j): Fraction(int(v)) for k, s in enumerate(input_shapes) for j, v in enumerate(s)}
        out = []
        for f in self._fns[index] or []:
            out.append(self.bound if f is None else f if isinstance(f, int) else max(0, f(values)))
        return out


def nbytes(dims: Sequence[int], itemsize: int) -> int:
    return math.prod(dims) * itemsize
