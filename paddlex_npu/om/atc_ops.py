"""Which ONNX operators ATC builds into an OM, per CANN generation: checked by ``convert`` before ATC runs, so that
the CPU reference runtime never runs a graph the device could not (item 3 of issue 39).

Sources (no machine here has CANN; these were read, not run):

- the operator list: CANN's "ONNX算子规格清单" (ONNX operator specifications, e.g.
  https://hiascend.com/document/detail/zh/canncommercial/80RC22/apiref/operatorlist/operatorlist_0004.html: ONNX
  1.12, "currently for Atlas inference products only"), as the ONNX plugins of CANN's operator libraries register
  them (``REGISTER_CUSTOM_OP(...).FrameworkType(ONNX).OriginOpType({"ai.onnx::<opset>::<op>", ...})``);
- control flow: ATC's ONNX parser (github.com/Ascend/parser, ``parser/onnx/subgraph_adapter/``) adapts the
  subgraphs of ``If`` only (``if_subgraph_adapter.cc``, ``REGISTER_SUBGRAPH_ADAPTER_CREATOR(kIf, ...)``): a
  ``Loop`` or ``Scan`` body is never parsed, so a graph with one is refused here; ``convert`` splits a model
  around its ``Loop`` instead (:mod:`paddlex_npu.build.split_loop`);
- ``ArgMax``/``ArgMin`` ``select_last_index=1``: CANN 7's plugin logs "Only support select_last_index=0" and
  builds the first-index op anyway (other results, silently); CANN 8's (hicann/ops-math ``arg_max_v2``) fails
  the build. Refused for both.

The list was transcribed from those documents, not generated from an installed CANN: an operator missing from it
that a given CANN does build is a false refusal (`--input-shape` cannot help; please report it with the CANN
version), never a silent run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

CANN_GENERATIONS = ("7", "8")
DEFAULT_CANN = "8"

# ONNX operators (default domain) ATC's ONNX plugins convert, CANN 7 and 8 alike.
SUPPORTED = frozenset(
    """
    Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization BitShift Cast Ceil
    Celu Clip Compress Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace
    DequantizeLinear Det Div Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor GRU Gather
    GatherElements GatherND Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual HardSigmoid
    HardSwish Hardmax Identity If InstanceNormalization IsInf IsNaN LRN LSTM LeakyRelu Less LessOrEqual Log
    LogSoftmax LpNormalization LpPool MatMul MatMulInteger Max MaxPool MaxRoiPool MaxUnpool Mean
    MeanVarianceNormalization Min Mod Mul Multinomial Neg NonMaxSuppression NonZero Not OneHot Or PRelu Pad Pow
    QLinearConv QLinearMatMul QuantizeLinear RNN RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range
    Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
    ReduceSumSquare Relu Reshape Resize ReverseSequence RoiAlign Round Scatter ScatterElements ScatterND Selu Shape
    Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan
    Tanh ThresholdedRelu Tile TopK Transpose Unique Unsqueeze Upsample Where Xor
    """.split()
)
# Added by CANN 8's plugins (opsets 14-18).
SUPPORTED_8 = frozenset({"LayerNormalization", "Trilu", "GridSample", "Mish"})
# The highest opset the plugins register per generation (ai.onnx::<opset>::<op>).
MAX_OPSET = {"7": 16, "8": 18}
# Operators whose CANN kernels run on the AI CPU (no AI Core kernel for Atlas inference products): ATC builds them,
# but each call leaves the AI Core for the AI CPU (slower, and a host-device round trip in dynamic-shape OMs).
AI_CPU = frozenset(
    {"NonZero", "Unique", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}
)
# Operators refused with a reason and what to do (the others outside SUPPORTED get the generic reason).
WHY = {
    "Loop": "ATC's ONNX parser does not parse a Loop's body (it adapts If subgraphs only)",
    "Scan": "ATC's ONNX parser does not parse a Scan's body (it adapts If subgraphs only)",
}


@dataclass(frozen=True)
class OpIssue:
    node: str
    op: str
    reason: str


def _walk(graph: Any, where: str = "") -> Iterator[Tuple[Any, str]]:
    for node in graph.node:
        yield node, where
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _walk(attr.g, f"{where}{node.name or node.op_type}/")


def _attr(node: Any, name: str) -> Optional[int]:
    return next((a.i for a in node.attribute if a.name == name), None)


def check_ops(model: Any, cann: str = DEFAULT_CANN) -> Tuple[List[OpIssue], List[OpIssue]]:
    """(refused, on the AI CPU) nodes of the ONNX ``model`` (a ModelProto) for ATC of CANN ``cann``; each node named
    with the path of the subgraphs holding it."""
    if cann not in CANN_GENERATIONS:
        raise ValueError(f"CANN {cann!r}: choose one of {', '.join(CANN_GENERATIONS)}")
    known = SUPPORTED | (SUPPORTED_8 if cann == "8" else frozenset())
    refused: List[OpIssue] = []
    aicpu: List[OpIssue] = []
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset > MAX_OPSET[cann]:
        refused.append(
            OpIssue("(model)", f"opset {opset}", f"CANN {cann}'s ONNX plugins register opsets up to {MAX_OPSET[cann]}")
        )
    for node, where in _walk(model.graph):
        name = f"{where}{node.name or '(unnamed)'}"
        if node.domain not in ("", "ai.onnx"):
            refused.append(
                OpIssue(name, f"{node.domain}::{node.op_type}", "a custom-domain operator ATC has no plugin for")
            )
        elif node.op_type not in known:
            refused.append(
                OpIssue(name, node.op_type, WHY.get(node.op_type, f"not in CANN {cann}'s ONNX operator list"))
            )
        elif node.op_type in ("ArgMax", "ArgMin") and _attr(node, "select_last_index") == 1:
            refused.append(OpIssue(name, node.op_type, "select_last_index=1: CANN's plugin takes 0 only"))
        elif node.op_type in AI_CPU:
            aicpu.append(OpIssue(name, node.op_type, "runs on the AI CPU"))
    return refused, aicpu


def unbuildable_control_flow(model: Any) -> List[OpIssue]:
    """The Loop and Scan nodes of ``model``: no ATC parses their bodies and no plugin changes that (the check the
    runtime makes at load; ``convert`` makes the whole one, :func:`check_ops`)."""
    return [
        OpIssue(f"{where}{node.name or '(unnamed)'}", node.op_type, WHY[node.op_type])
        for node, where in _walk(model.graph)
        if node.op_type in WHY and node.domain in ("", "ai.onnx")
    ]


def describe(issues: List[OpIssue], limit: int = 8) -> str:
    """``node (op): reason`` for the first ``limit`` issues, and how many more."""
    text = "; ".join(f"{i.node} ({i.op}): {i.reason}" for i in issues[:limit])
    return text + (f"; and {len(issues) - limit} more" if len(issues) > limit else "")
