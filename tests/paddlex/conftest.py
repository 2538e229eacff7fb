"""Fixtures that run PaddleX: the OCR pipeline on the NPU route (CPU reference runtime)."""

from __future__ import annotations

import pytest

import paddlex_npu  # noqa: F401  (installs the NPU route when PaddleX loads, as users do)
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI, page_lines, run_ocr


@pytest.fixture(scope="session")
def npu_pipeline(asset_root):
    from paddlex import create_pipeline

    pipeline = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "om"), device="npu:0", use_hpip=True, hpi_config=NPU_HPI
    )
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def npu_results(npu_pipeline, images):
    return run_ocr(npu_pipeline, images)


@pytest.fixture(scope="session")
def text_pages(tmp_path_factory):
    """Four rendered multi-line pages, each with other text (``page_lines``)."""
    d = tmp_path_factory.mktemp("text_pages")
    return [assets.render_text_image(page_lines(k), d / f"page{k}.png", size=28, width=900) for k in range(4)]
