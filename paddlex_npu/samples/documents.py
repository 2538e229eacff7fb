"""PaddleX's document pipelines over the sample models: ``layout_parsing`` (the PicoDet layout model, SLANet_plus,
PP-OCR det/rec) and PP-StructureV3 as far as its models have offline weights (layout detection and OCR: its
PP-DocLayout, region, table classification, SLANeXt, cell, formula, chart and seal models have none, so those
parts are switched off; document orientation and unwarping too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .assets import LAYOUT, ocr_pipeline_config
from .table_model import TABLE, table_pipeline_config


def _layout(root: Path) -> Dict[str, Any]:
    return {"module_name": "layout_detection", "model_name": LAYOUT, "model_dir": str(Path(root) / LAYOUT)}


def layout_parsing_config(root: Path, det: str, rec: str, ocr_root: Optional[Path] = None) -> Dict[str, Any]:
    """``layout_parsing`` over the model folders under ``root`` (``om/`` for the route, ``paddle/`` for PaddleX's
    own engines; the OCR models under ``ocr_root`` when given): layout detection, OCR, tables by SLANet_plus; no
    seal, formula or page preprocessing."""
    ocr_root = Path(ocr_root or root)
    table = table_pipeline_config(Path(root) / TABLE, ocr_root, det, rec)
    table.update(use_ocr_model=False, SubPipelines={})  # the page's OCR is given to the table step
    return {
        "pipeline_name": "layout_parsing",
        "use_doc_preprocessor": False,
        "use_seal_recognition": False,
        "use_table_recognition": True,
        "use_formula_recognition": False,
        "SubModules": {"LayoutDetection": _layout(root)},
        "SubPipelines": {"GeneralOCR": ocr_pipeline_config(ocr_root, rec=rec, det=det), "TableRecognition": table},
    }


def structure_v3_config(root: Path, det: str, rec: str, ocr_root: Optional[Path] = None) -> Dict[str, Any]:
    """PP-StructureV3 over the model folders under ``root`` (the OCR models under ``ocr_root`` when given): layout
    detection (the PicoDet layout model: its CDLA labels, of which PP-StructureV3 knows ``text``, ``table``,
    ``figure``...) and OCR; every part whose model has no offline weights off."""
    off = ("doc_preprocessor", "doc_orientation_classify", "doc_unwarping", "seal_recognition", "region_detection")
    off += ("table_recognition", "formula_recognition", "chart_recognition")
    return {
        "pipeline_name": "PP-StructureV3",
        **{f"use_{part}": False for part in off},
        "SubModules": {"LayoutDetection": _layout(root)},
        "SubPipelines": {"GeneralOCR": ocr_pipeline_config(Path(ocr_root or root), rec=rec, det=det)},
    }


# ``benchmark --document``: the bundled document pipelines, and what they read
DOCUMENTS = {
    "table": "PaddleX's table_recognition (SLANet_plus + OCR) on the four sample tables",
    "layout": "layout_parsing (the layout model, OCR, SLANet_plus tables) on a document page and text pages",
    "structure": "PP-StructureV3 (layout detection + OCR; its other models have no offline weights) on a document "
    "page and text pages",
}


def document_configs(kind: str, root: Path, packages: Path, det: str, rec: str) -> Tuple[dict, dict]:
    """(the route's config, PaddleX's own engines' config) of a :data:`DOCUMENTS` pipeline: the route's OCR models
    from ``packages`` (as ``convert`` builds them), its layout and table packages from ``root/om``; PaddleX's
    engines on the source models under ``root/paddle``."""
    from .table_model import build_table_folders

    root = Path(root)
    if kind in ("table", "layout"):
        build_table_folders(root)
    if kind == "table":
        return (
            table_pipeline_config(root / "om" / TABLE, packages, det, rec),
            table_pipeline_config(root / "paddle" / TABLE, root / "paddle", det, rec),
        )
    make = {"layout": layout_parsing_config, "structure": structure_v3_config}[kind]
    return make(root / "om", det, rec, ocr_root=packages), make(root / "paddle", det, rec)


def document_inputs(kind: str, folder: Path, pages: int) -> List[str]:
    """The inputs of a :data:`DOCUMENTS` pipeline: the sample tables, or the document page (title, paragraphs, a
    table) and ``pages - 1`` rendered text pages."""
    from .assets import render_pages
    from .tables import render_page, sample_tables

    if kind == "table":
        return [str(p) for p in sample_tables(Path(folder) / "tables").values()]
    page, _ = render_page(Path(folder) / "document")
    return [str(page)] + [str(p) for p in render_pages(Path(folder), max(0, pages - 1))]
