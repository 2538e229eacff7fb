"""The coverage table is read from PaddleX's own registry, and models that cannot take the route say so."""

from __future__ import annotations

from collections import Counter

import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.reports.coverage import coverage
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, only_runner_layout

# Facts about PaddleX's models, independent of the rule the code applies: static-graph OCR/classification/
# detection models take the route; generation-loop (dynamic-graph) models do not.
ELIGIBLE = ["PP-OCRv4_mobile_det", "PP-OCRv4_mobile_rec", "PP-LCNet_x1_0_doc_ori", "PicoDet_layout_1x"]


def _registered_models():
    """model -> predictor class name, straight from PaddleX (not through paddlex-npu)."""
    if LEGACY:
        from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

        return {m: c.__name__ for m, c in BasePredictor.all().items()}
    from paddlex.inference.models.bindings import default_registry

    out = {}
    for model, engines in default_registry._registry.items():
        b = engines.get("paddle_static") or next(iter(engines.values()))
        out[model] = b.predictor.__name__
    return out


def test_coverage_counts_every_registered_model_once():
    rows = coverage()
    registered = _registered_models()
    assert sum(r.models for r in rows) == len(registered)
    per_class = Counter(registered.values())
    for r in rows:
        assert r.models == per_class[r.predictor], r.predictor


def test_coverage_agrees_with_what_the_route_accepts():
    rows = {r.predictor: r for r in coverage()}
    registered = _registered_models()
    for model in ELIGIBLE:
        assert rows[registered[model]].npu_route, model
    if not LEGACY:  # the route's own registry: an ``om`` binding exactly for the models the table calls eligible
        from paddlex.inference.models.bindings import default_registry

        with_om = {m for m, engines in default_registry._registry.items() if "om" in engines}
        eligible = {m for m, cls in registered.items() if rows[cls].npu_route}
        assert with_om == eligible
        assert rows["TextDetRunnerPredictor"].detail == "gears/static: text detection"
        assert "flip" in rows["FaceFeaturePredictor"].detail and "prompt" in rows["OVDetRunnerPredictor"].detail
        assert not rows["WhisperRunnerPredictor"].npu_route
        assert "dynamic-graph" in rows["WhisperRunnerPredictor"].detail
    assert any(not r.npu_route for r in rows.values())


@only_runner_layout
def test_a_model_without_a_static_graph_refuses_the_route(tmp_path):
    from paddlex import create_predictor

    name = next(m for m, cls in _registered_models().items() if cls.startswith("Whisper"))
    with pytest.raises(ConfigError, match=rf"{name} has no static model to convert to an OM"):
        create_predictor(name, model_dir=str(tmp_path), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)


def test_support_says_what_ran_on_real_weights_and_what_never_ran():
    """Each "verified" status names a test that exists in the suite; a predictor without one (FormulaRec) is shown as
    declared, never run, not as supported."""
    import re

    from paddlex_npu.reports.coverage import DECLARED, EVIDENCE, VERIFIED, format_table
    from tests.helpers import REPO

    rows = {r.predictor: r for r in coverage()}
    for name, (status, models, test) in EVIDENCE.items():
        path, func = test.split("::")
        assert re.search(rf"^def {func}\(", (REPO / path).read_text(encoding="utf-8"), re.M), test
        if name in rows:
            assert rows[name].status == status and all(m in rows[name].evidence for m in models), name
    if not LEGACY:
        assert rows["FormulaRecRunnerPredictor"].status == DECLARED
        assert (
            rows["TableRunnerPredictor"].status == VERIFIED and "SLANet_plus" in rows["TableRunnerPredictor"].evidence
        )
    table = format_table(list(rows.values()))
    assert "declared, never run" in table and "verified on real weights" in table
    assert not any(r.npu_route and r.status not in (VERIFIED, DECLARED) for r in rows.values())
