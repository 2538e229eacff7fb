"""Which PaddleX predictors the NPU route covers, read from PaddleX's own registry (``paddlex-npu support``)."""

from __future__ import annotations

import functools
import inspect
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Set

from .shapes import policy_for

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
    """One row per predictor class of the installed PaddleX."""
    from .patcher import active_adapter

    if active_adapter() == "paddlex_34":
        return _coverage_legacy()
    from paddlex.inference.models.bindings import default_registry
    from paddlex.inference.models.predictors import RunnerPredictor

    static: Dict[str, Set[str]] = defaultdict(set)
    other: Dict[str, Set[str]] = defaultdict(set)
    engines_of: Dict[str, Set[str]] = defaultdict(set)
    for model, engine_map in default_registry._registry.items():
        b = engine_map.get("paddle_static")
        if b is not None and issubclass(b.predictor, RunnerPredictor):
            static[b.predictor.__name__].add(model)
            continue
        for engine, binding in engine_map.items():
            other[binding.predictor.__name__].add(model)
            engines_of[binding.predictor.__name__].add(engine)
    return _rows(static, other, engines_of)


def _coverage_legacy() -> List[Row]:
    from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

    static: Dict[str, Set[str]] = defaultdict(set)
    other: Dict[str, Set[str]] = defaultdict(set)
    engines_of: Dict[str, Set[str]] = defaultdict(set)
    for model, cls in BasePredictor.all().items():
        if calls_static_infer(cls):
            static[cls.__name__].add(model)
        else:
            other[cls.__name__].add(model)
            engines_of[cls.__name__].add("paddle_dynamic")
    return _rows(static, other, engines_of)


@functools.lru_cache(maxsize=None)
def calls_static_infer(cls: type) -> bool:
    """Whether a legacy (3.0-3.4) predictor class builds its model with ``create_static_infer``."""
    for klass in cls.__mro__:
        try:
            if "create_static_infer()" in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False


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
