"""Output shapes as functions of the input dims (the manifest's ``output_dims``), and their evaluation.

Every dynamic input dim is named ``d{k}_{j}`` (dim ``j`` of input ``k``, in the model's input order);
:func:`paddlex_npu.run.shape_solver.derive` solves them once from the ONNX graph. Each output dim is one of:

- an ``int`` (a fixed dim);
- a ``str``: a sympy expression of the ``d{k}_{j}`` names, e.g. ``floor((d0_3 + 3)/8)`` for PP-OCRv6's CTC
  length (the manifest carries these, so the device path without the ONNX gets the same sizes; they are
  evaluated exactly with Fractions, without sympy, after a check that they are only arithmetic);
- ``None``: a dim that follows the input *values* (boxes kept by NMS), which the runner bounds by
  ``backend_config['data_dependent_max']``.

When the solver cannot tell a dim (an operator it does not handle), the output has no dims (None) and the runner
asks ONNX shape inference for each new input shape instead (:mod:`.graph`, cached).
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

Dim = Union[int, str, None]
SYMBOL = re.compile(r"^d(\d+)_(\d+)$")


def symbol(k: int, j: int) -> str:
    """The name of dim ``j`` of input ``k`` in output expressions."""
    return f"d{k}_{j}"


_FUNCTIONS = {
    "floor": math.floor,
    "ceiling": math.ceil,
    "Max": max,
    "Min": min,
    "Mod": lambda a, b: a % b,
}
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)


def is_expression(text: str) -> bool:
    """Whether ``text`` is an output dim expression :func:`_checked` accepts (a solver's answer is read only then:
    text from a model file is never evaluated otherwise)."""
    try:
        _checked(text)
    except ValueError:
        return False
    return True


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
