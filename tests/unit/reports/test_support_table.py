"""The supported versions are one table (paddlex_npu/reports/support_table.py): every PaddleX adapter has its row,
docs/compatibility.md renders it, and doctor's PaddleOCR check reads it."""

from __future__ import annotations

from pathlib import Path

from paddlex_npu.paddlex.versions import SUPPORTED, TESTED
from paddlex_npu.reports import support_table

PAGE = Path(__file__).resolve().parents[3] / "docs" / "compatibility.md"


def test_every_adapter_has_its_row_with_its_range_and_tested_version():
    assert {r.adapter: (r.paddlex, r.paddlex_tested) for r in support_table.ROWS} == {
        a: (SUPPORTED[a], TESTED[a]) for a in SUPPORTED
    }
    assert support_table.row_for("3.7.2").adapter == "paddlex_35" and support_table.row_for("3.4.3").paddleocr_tested
    assert support_table.row_for("3.8.0") is None and support_table.row_for("not a version") is None


def test_the_docs_page_holds_the_table():
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("(paddlex-npu doctor reads it) -->\n", 1)[1].split("<!-- end of table", 1)[0]
    assert table == support_table.markdown_table(), "docs/compatibility.md is stale: paste markdown_table() into it"


def test_paddleocr_goes_with_the_paddlex_of_its_minor_version():
    assert support_table.paddleocr_check("3.7.2", "3.7.0") == (True, "3.7.0 with PaddleX 3.7.2 (tested: 3.7.0)")
    ok, why = support_table.paddleocr_check("3.7.2", "3.4.1")
    assert not ok and why.endswith("pip install 'paddleocr==3.7.*'") and "goes with PaddleX 3.4" in why
