"""The coverage table is read from PaddleX's own registry, and models that cannot take the route say so."""

from __future__ import annotations

import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.tools.coverage import coverage
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, only_runner_layout


def _registry():
    """model -> (predictor class name, runs a static model) from the installed PaddleX."""
    if LEGACY:
        from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

        from paddlex_npu.tools.coverage import calls_static_infer

        return {m: (c.__name__, calls_static_infer(c)) for m, c in BasePredictor.all().items()}
    from paddlex.inference.models.bindings import default_registry
    from paddlex.inference.models.predictors import RunnerPredictor

    out = {}
    for model, engines in default_registry._registry.items():
        b = engines.get("paddle_static")
        static = b is not None and issubclass(b.predictor, RunnerPredictor)
        out[model] = ((b or next(iter(engines.values()))).predictor.__name__, static)
        if static:
            assert engines["om"].predictor is b.predictor  # the route's binding reuses PaddleX's predictor
    return out


def test_coverage_matches_the_registry():
    rows = {r.predictor: r for r in coverage()}
    registry = _registry()
    static_classes = {cls for cls, static in registry.values() if static}
    for cls in static_classes:
        assert rows[cls].npu_route, cls
        assert rows[cls].models == sum(1 for c, s in registry.values() if c == cls and s)
    assert sum(r.models for r in rows.values() if r.npu_route) == sum(1 for _, s in registry.values() if s)
    assert any(not r.npu_route for r in rows.values())
    if not LEGACY:
        assert rows["TextDetRunnerPredictor"].detail == "gears/static: text detection"
        assert "flip" in rows["FaceFeaturePredictor"].detail and "prompt" in rows["OVDetRunnerPredictor"].detail
        assert not rows["WhisperRunnerPredictor"].npu_route and "dynamic-graph" in rows["WhisperRunnerPredictor"].detail


@only_runner_layout
def test_a_model_without_a_static_graph_refuses_the_route(tmp_path):
    from paddlex import create_predictor

    name = next(m for m, (cls, static) in _registry().items() if not static and cls.startswith("Whisper"))
    with pytest.raises(ConfigError, match=rf"{name} has no static model to convert to an OM"):
        create_predictor(name, model_dir=str(tmp_path), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
