"""PaddleX's document pipelines on the NPU route (CPU reference runtime) read a rendered page as PaddleX's own CPU
engine does, from the same weights: ``layout_parsing`` (the PicoDet layout model, SLANet_plus with its host loop,
PP-OCRv6 det/rec) on a PNG and a two-page PDF, and PP-StructureV3's markdown with layout detection and OCR (what
of it has offline weights: ``paddlex_npu/samples/documents.py``); the route's files read by its PNG read."""

from __future__ import annotations

import pytest

from paddlex_npu.kernels.png_read import FastRead
from paddlex_npu.samples import assets
from paddlex_npu.samples.documents import layout_parsing_config, structure_v3_config
from paddlex_npu.samples.tables import AFTER, BEFORE, TITLE, render_page
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, cpu_pipeline

DET, REC = assets.DET_V6_SMALL, assets.REC_V6_SMALL
pytestmark = pytest.mark.skipif(
    LEGACY,
    reason="PaddleX 3.4's CPU engine is Paddle Inference, and the PicoDet layout model and PP-OCRv6 have no Paddle "
    "weights to compare with (3.7's onnxruntime engine reads their ONNX)",
)


def _read(config: dict, om: bool, inputs: list) -> list:
    from paddlex import create_pipeline

    if om:
        pipeline = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    else:
        pipeline = cpu_pipeline(config, "onnxruntime")
    try:
        results = [res for path in inputs for res in pipeline.predict(str(path))]
        # the route reads the files through the PNG read (png_read.FastRead); PaddleX's own engine as it ships
        assert isinstance(vars(pipeline.img_reader._img_reader._backend).get("read_file"), FastRead) is om
        return results
    finally:
        pipeline.close()


def _blocks(res) -> list:
    return [(b["block_label"], b["block_content"]) for b in res["parsing_res_list"]]


def test_layout_parsing_reads_a_page_and_a_pdf_as_paddlexs_cpu_engine(table_models, asset_root, tmp_path):
    png, pdf = render_page(tmp_path)
    got = _read(layout_parsing_config(asset_root / "om", DET, REC), True, [png, pdf])
    want = _read(layout_parsing_config(asset_root / "paddle", DET, REC), False, [png, pdf])
    assert len(got) == len(want) == 3  # the PNG, the PDF's two pages
    for mine, theirs in zip(got, want):
        assert _blocks(mine) == _blocks(theirs)
        assert [t["pred_html"] for t in mine["table_res_list"]] == [t["pred_html"] for t in theirs["table_res_list"]]
    # the page as drawn: title, paragraph, table, paragraph; the same blocks from the PDF's first page
    blocks = _blocks(got[0])
    assert blocks[0] == ("title", TITLE) and blocks[1] == ("text", "\n".join(BEFORE))
    assert blocks[2][0] == "table" and "<td>Apples</td><td>12</td><td>3.40</td>" in blocks[2][1]
    assert blocks[3] == ("text", "\n".join(AFTER))
    assert [label for label, _ in _blocks(got[1])] == [label for label, _ in blocks]
    assert [label for label, _ in _blocks(got[2])] == ["table"]


def test_pp_structure_v3_writes_the_markdown_of_paddlexs_cpu_engine(asset_root, tmp_path):
    png, _ = render_page(tmp_path)
    (got,) = _read(structure_v3_config(asset_root / "om", DET, REC), True, [png])
    (want,) = _read(structure_v3_config(asset_root / "paddle", DET, REC), False, [png])
    assert got.markdown["markdown_texts"] == want.markdown["markdown_texts"]
    for line in BEFORE:
        assert line in got.markdown["markdown_texts"]
