"""Which nodes of an ONNX graph ATC places on the AI CPU for a chip: GE's operator has no AI Core kernel in the
chip's operator information library (op-info), or none for the node's dtypes. ``convert`` warns with the nodes,
per part of a split model, and says when most of a loop body runs there (item 4 of issue 52).

Source: the open operator library of mid-2022 (CANN's ``canndev``, ``ops/built-in/tbe/op_info_cfg/ai_core/``), read
in its GitHub copy ``dengguojie/vue-element-admin``: ``ascend310p/aic-ascend310p-ops-info.ini`` at 7290acc7
(2022-06-29) and ``ascend910b/aic-ascend910b-ops-info.ini`` at 81cc8745 (2022-06-29); ``P:line`` / ``B:line`` below
are the lines of their ``[Op]`` entries. An operator GE finds no AI Core kernel for goes to the AI CPU engine
(correction 35 of ``../shared/reference/ais-bench-api.md``). Only entries with explicit dtype lists are used
(``dynamicFormat`` entries, e.g. ``Add``/``Mul``/``Slice``/``ConcatD``, choose dtypes in code and are not judged).
ONNX -> GE operator: the ATC ONNX plugins of the same copy (``ops/built-in/framework/onnx_plugin/``) where they are
there (``scatter_elements_plugin.cc:43-52``, ``min_plugin.cc:28`` -> ``Minimum``, ``max_plugin.cc`` -> ``Maximum``,
``cast_plugin.cc:100-109``, ``reduce_max_plugin.cc:75``, ``reduce_min_plugin.cc:75``); the others (Range, Less,
Greater, Equal, Tile, Expand) are taken as GE's operator of the same name (their plugins are not in the copy).

CANN 8's operator library is closed: its lists may differ (more int64 kernels, e.g. on 910B). These are the 2022
lists, a warning and never a refusal; a built OM's operator engines (the ATC log, or ``atc --mode=1`` on the OM)
are the truth. Other chips (310, 310B, 910, 910_93, 950): not known here, so nothing is said for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

from .atc_ops import OpIssue

FAMILIES = ("310P", "910B")
MOSTLY = 0.5  # a loop body with more than this share of its kernels on the AI CPU "runs mostly on the AI CPU"

_F16, _F32, _I8, _U8, _I32, _I64, _B = "float16", "float32", "int8", "uint8", "int32", "int64", "bool"
_MINMAX = frozenset({_F16, _F32, _I32, _I8})  # Minimum P:4049 B:3755, Maximum P:4032 B:3738
_COMPARE = frozenset({_F16, _F32, _I32, _I8, _U8})  # Less P:3538 B:3099, Greater P:6301 B:5970
_TILE = frozenset({_I32, _F32, _F16, _B})  # Tile P:2982 B:2558 (input x)
_EXPAND = frozenset({_F16, _F32, _I32, _U8, _I8, _B})  # Expand P:342 B:19837 (input x)
_REDUCE_MAX = frozenset({_F16, _F32, _U8, _I32, _I8, _B})  # ReduceMax P:2828 B:2376 + ReduceMaxD P:2850 B:2398
_REDUCE_MIN = frozenset({_F16, _F32, _U8, _I32, _I8})  # ReduceMin P:2784 B:2332 + ReduceMinD P:2806 B:2354

# ONNX operator -> (GE operator, {family: input-0 dtypes with an AI Core kernel}); a family absent: no kernel at all
DTYPE_RULES: Dict[str, Tuple[str, Dict[str, FrozenSet[str]]]] = {
    "ScatterElements": ("ScatterElements", {}),  # no [ScatterElements] entry in either list
    "Min": ("Minimum", {"310P": _MINMAX, "910B": _MINMAX}),
    "Max": ("Maximum", {"310P": _MINMAX, "910B": _MINMAX}),
    "Less": ("Less", {"310P": _COMPARE, "910B": _COMPARE}),
    "Greater": ("Greater", {"310P": _COMPARE, "910B": _COMPARE}),
    # Equal P:6282 lists int64, B:5951 does not
    "Equal": ("Equal", {"310P": _COMPARE | {_I64, "uint64", _B}, "910B": _COMPARE | {_B}}),
    "Tile": ("Tile", {"310P": _TILE, "910B": _TILE}),
    "Expand": ("Expand", {"310P": _EXPAND, "910B": _EXPAND}),
    "ReduceMax": ("ReduceMax", {"310P": _REDUCE_MAX, "910B": _REDUCE_MAX}),
    "ReduceMin": ("ReduceMin", {"310P": _REDUCE_MIN, "910B": _REDUCE_MIN}),
}
_CAST_COMMON = {
    (_B, _F16), (_B, _F32), (_B, _I32), (_B, _U8), (_F16, _B), (_F16, _F32), (_F16, _I32), (_F16, _I8),
    (_F16, _U8), (_F32, _F16), (_F32, _I32), (_I32, _B), (_I32, _F16), (_I32, _F32), (_I32, _I64), (_I32, _I8),
    (_I32, _U8), (_I64, _I32), (_I8, _F16), (_I8, _F32), (_I8, _I32), (_U8, _F16), (_U8, _F32), (_U8, _I32),
}  # fmt: skip
# Cast (input, output) dtypes with an AI Core kernel: P:4174 (int64 only to and from int32), B:3879 (also
# int64 <-> float32, and bfloat16)
CAST_PAIRS: Dict[str, FrozenSet[Tuple[str, str]]] = {
    "310P": frozenset(_CAST_COMMON),
    "910B": frozenset(
        _CAST_COMMON
        | {(_F32, _I64), (_I64, _F32)}
        | {("bfloat16", t) for t in (_F16, _F32, _I32)}
        | {(f, "bfloat16") for f in (_F16, _F32)}
    ),
}
# Range: no [Range] entry; [RangeD] (P:13531, B:13672) takes constant start/limit/delta only, so a Range with a
# tensor input runs on the AI CPU (a constant one is folded by ATC).
NO_TASK = frozenset({"Constant", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Shape", "Size", "Dropout"})
CONTROL = frozenset({"If", "Loop", "Scan"})
_RANDOM = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"})


def soc_family(soc: str) -> Optional[str]:
    """The op-info family of ATC's ``--soc_version`` (Ascend310P3 -> "310P", Ascend910B4 -> "910B"), None for a
    chip whose list is not known here."""
    if soc.startswith("Ascend310P"):
        return "310P"
    if soc.startswith("Ascend910B"):
        return "910B"
    return None


@dataclass
class Body:
    """A Loop body's count: its nodes on the AI CPU out of those that run a kernel."""

    node: str
    aicpu: int = 0
    kernels: int = 0


@dataclass
class Placement:
    """The AI CPU nodes of a graph for one chip family, out of the nodes that run a kernel (not folded by ATC,
    not a reshape-like or control node); ``bodies``: the same per Loop body."""

    family: str
    aicpu: List[OpIssue] = field(default_factory=list)
    kernels: int = 0
    bodies: List[Body] = field(default_factory=list)


class _Scope:
    """Dtypes, static shapes and constant values of a graph and the graphs around it."""

    def __init__(self, graph: Any, outer: Optional[_Scope] = None) -> None:
        self.outer = outer
        self.dtype: Dict[str, int] = {}
        self.static: Set[str] = set()  # values with a fully known shape
        self.const: Set[str] = {t.name for t in graph.initializer}
        for v in list(graph.input) + list(graph.value_info) + list(graph.output):
            self.dtype[v.name] = v.type.tensor_type.elem_type
            shape = v.type.tensor_type.shape
            if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim):
                self.static.add(v.name)
        for t in graph.initializer:
            self.dtype[t.name] = t.data_type
        self.local = {v.name for v in graph.input}  # a body's inputs: never constant

    def type_of(self, name: str) -> Optional[str]:
        from onnx.helper import tensor_dtype_to_np_dtype

        scope: Optional[_Scope] = self
        while scope is not None:
            if scope.dtype.get(name):
                return str(tensor_dtype_to_np_dtype(scope.dtype[name]))
            scope = scope.outer
        return None

    def is_const(self, name: str) -> bool:
        scope: Optional[_Scope] = self
        while scope is not None:
            if name in scope.const:
                return True
            if name in scope.local or name in scope.dtype:
                return False
            scope = scope.outer
        return False

    def is_static(self, name: str) -> bool:
        return name in self.static or (self.outer is not None and self.outer.is_static(name))


def _folded(node: Any, scope: _Scope) -> bool:
    """Whether ATC folds ``node`` to a constant (all inputs constant, or the shape of a static value)."""
    if node.op_type in _RANDOM or node.op_type in CONTROL:
        return False
    if node.op_type in ("Shape", "Size"):
        return scope.is_static(node.input[0])
    return all(scope.is_const(i) for i in node.input if i)


def _reason(node: Any, scope: _Scope, family: str) -> Optional[str]:
    """Why ``node`` runs on the AI CPU on ``family``, None when it has an AI Core kernel or is not judged."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    if op == "Range":
        return "tensor inputs (an AI Core RangeD takes constants only)"
    if op == "Cast":
        src = scope.type_of(node.input[0])
        dst = scope.type_of(node.output[0])
        if src and dst and src != dst and (src, dst) not in CAST_PAIRS[family]:
            return f"{src} -> {dst}"
        return None
    if op not in DTYPE_RULES:
        return None
    ge_op, kernels = DTYPE_RULES[op]
    if family not in kernels:
        return f"no {ge_op} kernel at all"
    dtype = scope.type_of(node.input[0])
    if dtype and dtype not in kernels[family]:
        return f"{ge_op} for {dtype}"
    return None


def _visit(graph: Any, scope: _Scope, family: str, where: str, out: Placement, body: Optional[Body]) -> None:
    for node in graph.node:
        name = f"{where}{node.name or '(unnamed)'}"
        if node.op_type not in CONTROL and node.domain in ("", "ai.onnx") and _folded(node, scope):
            scope.const.update(o for o in node.output if o)
            continue
        for attr in node.attribute:
            if attr.HasField("g"):
                inner = Body(name) if node.op_type == "Loop" else body
                _visit(attr.g, _Scope(attr.g, scope), family, f"{name}/", out, inner)
                if node.op_type == "Loop" and inner is not None:
                    out.bodies.append(inner)
        if node.op_type in NO_TASK or node.op_type in CONTROL:
            continue
        out.kernels += 1
        if body is not None:
            body.kernels += 1
        reason = _reason(node, scope, family)
        if reason:
            out.aicpu.append(OpIssue(name, node.op_type, reason))
            if body is not None:
                body.aicpu += 1


def _ops(graph: Any) -> Iterator[str]:
    for node in graph.node:
        yield node.op_type
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _ops(attr.g)


def aicpu_nodes(model: Any, soc: str) -> Optional[Placement]:
    """The nodes of ``model`` (an ONNX ModelProto; Loop and If bodies included, named ``loop/node``) that ATC
    places on the AI CPU for the chip ``soc``, with the reason; None for a chip whose op-info is not known here.
    Dtypes come from ONNX shape inference."""
    family = soc_family(soc)
    if family is None:
        return None
    judged = set(DTYPE_RULES) | {"Range", "Cast"}
    if not judged & set(_ops(model.graph)):  # nothing to judge: no shape inference
        return Placement(family)
    from onnx import shape_inference

    typed = shape_inference.infer_shapes(model)
    out = Placement(family)
    _visit(typed.graph, _Scope(typed.graph), family, "", out, None)
    return out


def describe_placement(placement: Placement, part: str, soc: str, loop_body: bool = False, limit: int = 8) -> str:
    """The warning for ``part`` (e.g. "step/"): the AI CPU nodes named, grouped by reason, and whether most of a
    loop body runs there (``loop_body``: the part itself is one, as a split model's step is). Empty when no node
    goes there."""
    if not placement.aicpu:
        return ""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for issue in placement.aicpu:
        groups.setdefault((issue.op, issue.reason), []).append(issue.node)
    named = []
    for (op, reason), nodes in groups.items():
        more = f" and {len(nodes) - limit} more" if len(nodes) > limit else ""
        named.append(f"{op} ({reason}): {', '.join(nodes[:limit])}{more}")
    text = (
        f"{part}: {len(placement.aicpu)} of its {placement.kernels} operators go to the AI CPU on {soc} (no AI Core "
        f"kernel in the {placement.family} op-info list of 2022; CANN 8's may differ, the built OM's engines "
        f"decide): {'; '.join(named)}"
    )
    if loop_body and len(placement.aicpu) / placement.kernels > MOSTLY:
        text += (
            f". This loop body runs mostly on the AI CPU ({len(placement.aicpu)} of its {placement.kernels} operators)"
        )
    for b in [] if loop_body else placement.bodies:
        if b.kernels and b.aicpu / b.kernels > MOSTLY:
            text += f". The loop body {b.node} runs mostly on the AI CPU ({b.aicpu} of its {b.kernels} operators)"
    return text
