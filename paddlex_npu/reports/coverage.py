"""Which PaddleX predictors the NPU route covers, read from PaddleX's own registry (``paddlex-npu support``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Set

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


@dataclass(frozen=True)
class Row:
    predictor: str
    models: int
    npu_route: bool
    detail: str  # shape policy and call pattern, or why not


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
        rows.append(Row(name, len(models), True, detail))
    for name, models in sorted(other.items()):
        if name in static:
            continue
        why = "; ".join(sorted({WHY_NOT.get(e, e) for e in engines_of[name]}))
        rows.append(Row(name, len(models), False, why))
    return rows


def format_table(rows: List[Row]) -> str:
    width = max(len(r.predictor) for r in rows)
    lines = [f"{'predictor':<{width}}  models  NPU route  notes", "-" * (width + 40)]
    for r in rows:
        lines.append(f"{r.predictor:<{width}}  {r.models:>6}  {'yes' if r.npu_route else 'no':<9}  {r.detail}")
    covered = sum(r.models for r in rows if r.npu_route)
    lines.append(f"{covered} of {sum(r.models for r in rows)} registered models run on the NPU route")
    return "\n".join(lines)
