"""Which PaddleX predictors the NPU route covers, read from PaddleX's own registry (``paddlex-npu support``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Set, Tuple

from ..run.gears import policy_for

# How predictors call their static model, where it is not one plain call per batch.
CALL_PATTERNS = {
    "FaceFeature": "two calls per batch (flip)",
    "Kpt": "two calls per batch (flip)",
    "Formula": "one call per image for batch-1 models",
    "InstanceSeg": "one call per image for batch-1 models",
    "VideoDet": "one call per clip segment",
    "OVDet": "prompt-dependent inputs",
    "OVSeg": "prompt-dependent inputs",
    "BEVDet3D": "three inputs (image, lidar2img, points)",
    "Fastspeech2": "raw phone-id batch",
    "TS": "one input per series key",
}
WHY_NOT = {
    "paddle_dynamic": "dynamic-graph model (generation loop in Python): not convertible to an OM",
    "transformers": "Hugging Face Transformers model: not convertible to an OM",
    "genai_client": "served by a remote generation server",
    "flexible": "no neural model",
}


VERIFIED = "verified on real weights"
TEST_MODELS = "runs on test models only"
DECLARED = "declared, never run"
# The evidence for a predictor's status: the real models a test runs through it on the route, their outputs
# checked (against PaddleX's own CPU engine, or known answers), and that test (tests/paddlex/test_coverage.py
# checks that each test exists). A predictor not here is "declared, never run": PaddleX's registry gives it a
# static model, nothing more.
EVIDENCE: Dict[str, Tuple[str, Tuple[str, ...], str]] = {
    "TextDetRunnerPredictor": (
        VERIFIED,
        ("PP-OCRv6_small_det",),
        "tests/paddlex/test_ppocrv6.py::test_pages_on_the_route_read_exactly_as_paddlex_on_the_cpu",
    ),
    "TextRecRunnerPredictor": (
        VERIFIED,
        ("PP-OCRv6_small_rec",),
        "tests/paddlex/test_ppocrv6.py::test_pages_on_the_route_read_exactly_as_paddlex_on_the_cpu",
    ),
    "ClasRunnerPredictor": (
        VERIFIED,
        ("PP-LCNet_x0_25_textline_ori", "PP-LCNet_x1_0_doc_ori"),
        "tests/paddlex/test_gears.py::test_page_and_textline_orientation_through_the_npu_route",
    ),
    "DetRunnerPredictor": (
        VERIFIED,
        ("PicoDet_layout_1x",),
        "tests/paddlex/test_gears.py::test_layout_detection_boxes_equal_paddlex_onnxruntime_engine",
    ),
    "TableRunnerPredictor": (
        VERIFIED,
        ("SLANet_plus",),
        "tests/paddlex/test_table_recognition.py::test_tables_read_on_the_route_as_on_paddlex_cpu_engine",
    ),
}


@dataclass(frozen=True)
class Row:
    predictor: str
    models: int
    npu_route: bool
    detail: str  # shape policy and call pattern, or why not
    status: str = DECLARED  # on the route: VERIFIED, TEST_MODELS or DECLARED; "" when it does not take it
    evidence: str = ""  # the models and the test, for VERIFIED and TEST_MODELS


def _status(name: str) -> Tuple[str, str]:
    status, models, test = EVIDENCE.get(name, (DECLARED, (), ""))
    return status, (f"{', '.join(models)}: {test}" if test else "")


def _pattern(name: str) -> str:
    return next((v for k, v in CALL_PATTERNS.items() if name.startswith(k)), "")


def coverage() -> List[Row]:
    """One row per predictor class of the installed PaddleX, from its registry (through the adapter)."""
    from ..paddlex.patcher import adapter

    eligible: Dict[str, Set[str]] = defaultdict(set)
    other: Dict[str, Set[str]] = defaultdict(set)
    engines_of: Dict[str, Set[str]] = defaultdict(set)
    for entry in adapter().models():
        name = entry.predictor.__name__
        if entry.eligible:
            eligible[name].add(entry.model)
        else:
            other[name].add(entry.model)
            engines_of[name].update(entry.engines)
    return _rows(eligible, other, engines_of)


def _rows(static, other, engines_of) -> List[Row]:
    rows = []
    for name, models in sorted(static.items()):
        detail = f"gears/static: {policy_for(name).name}"
        if _pattern(name):
            detail += f"; {_pattern(name)}"
        rows.append(Row(name, len(models), True, detail, *_status(name)))
    for name, models in sorted(other.items()):
        if name in static:
            continue
        why = "; ".join(sorted({WHY_NOT.get(e, e) for e in engines_of[name]}))
        rows.append(Row(name, len(models), False, why, ""))
    return rows


def format_table(rows: List[Row]) -> str:
    """The table ``paddlex-npu support`` prints: per predictor, whether the route takes it and what says so."""
    width = max(len(r.predictor) for r in rows)
    state = max(len(s) for s in (VERIFIED, TEST_MODELS, DECLARED, "no"))
    lines = [f"{'predictor':<{width}}  models  {'NPU route':<{state}}  notes", "-" * (width + state + 40)]
    for r in rows:
        label = r.status if r.npu_route else "no"
        note = f"{r.detail}; {r.evidence}" if r.evidence else r.detail
        lines.append(f"{r.predictor:<{width}}  {r.models:>6}  {label:<{state}}  {note}")
    taken = [r for r in rows if r.npu_route]
    verified = [r for r in taken if r.status == VERIFIED]
    lines.append(
        f"{sum(r.models for r in taken)} of {sum(r.models for r in rows)} registered models are declared for the NPU "
        f"route; {len(verified)} of its {len(taken)} predictors are verified on real weights "
        f"({', '.join(r.predictor for r in verified)}), the others never ran on a real model here"
    )
    return "\n".join(lines)
