"""PaddleX's serving app behind the adapter (``paddlex_npu/paddlex/serving.py``): every assumption is a named
operation, checked when the server starts. The real apps of the installed PaddleX (OCR's and the document
pipelines') are taken; one that lacks an assumed attribute is refused at start, naming the operation."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serving extra (requirements/serving.txt): the 3.7 environment only")

from paddlex_npu.errors import UnsupportedPaddlexError  # noqa: E402
from paddlex_npu.paddlex import serving  # noqa: E402
from paddlex_npu.samples import assets  # noqa: E402
from paddlex_npu.serve.app import _NoPipeline, create_app  # noqa: E402
from paddlex_npu.serve.http import make_pool  # noqa: E402
from paddlex_npu.serve.settings import AppSettings, ServeOptions  # noqa: E402

# OCR's app and the document pipelines' (PaddleX's _pipeline_apps: ocr, table_recognition(_v2), layout_parsing,
# pp_structurev3)
PIPELINES = ("OCR", "table_recognition", "table_recognition_v2", "layout_parsing", "PP-StructureV3")


def _app(name: str):
    return serving.create_pipeline_app(_NoPipeline(), {"pipeline_name": name, "Serving": {}})


def _calls(app) -> list:
    return [r.dependant.call for r in app.router.routes if hasattr(r, "dependant")]


@pytest.mark.parametrize("name", PIPELINES)
def test_the_adapter_takes_ocrs_and_the_document_pipelines_apps(name):
    app = _app(name)
    serving.check_app(app)
    lifespan, calls = app.router.lifespan_context, _calls(app)
    applied = serving.adapt_app(app, lambda replaced, visualize: replaced, (), lambda: None)
    try:
        wrapped = [c for c in _calls(app) if c not in calls]
        assert wrapped and all(c.__wrapped__ in calls for c in wrapped)  # each endpoint wrapped, once
        applied.apply()  # again: idempotent, still wrapped once over PaddleX's own endpoints
        assert all(c.__wrapped__ in calls for c in _calls(app) if c not in calls)
        assert app.router.lifespan_context is not lifespan
    finally:
        assert applied.revert() == []
    assert app.router.lifespan_context is lifespan and _calls(app) == calls  # the very same objects


@pytest.fixture
def ocr_config(asset_root):
    return assets.ocr_pipeline_config(asset_root / "om")


@pytest.mark.parametrize(
    "owner, attribute, operation",
    [
        ("context", "pipeline", "replace the pipeline"),
        ("utils", "get_raw_bytes_async", "fetch a file"),
        ("utils", "file_to_images", "decode an image"),
        ("text_rec", "_to_json", "prune a result"),
    ],
)
def test_serve_refuses_to_start_on_an_app_that_lacks_an_assumption(
    monkeypatch, ocr_config, owner, attribute, operation
):
    from paddlex.inference.models.text_recognition.result import TextRecResult
    from paddlex.inference.serving.basic_serving._app import AppContext

    owners = {"context": AppContext, "utils": serving.serving_utils(), "text_rec": TextRecResult}
    monkeypatch.delattr(owners[owner], attribute)
    before = serving.patched_attributes()
    pool = make_pool(ocr_config, ServeOptions())  # not started: the refusal comes before any worker
    with pytest.raises(UnsupportedPaddlexError, match=f"{operation}: .*{attribute}") as info:
        create_app(ocr_config, pool, AppSettings())
    assert "unknown layout, not served" in str(info.value)
    assert serving.patched_attributes() == before  # nothing was patched
