"""PaddleX's document pipelines over the sample models: ``layout_parsing`` (the PicoDet layout model, SLANet_plus,
PP-OCR det/rec) and PP-StructureV3 as far as its models have offline weights (layout detection and OCR: its
PP-DocLayout, region, table classification, SLANeXt, cell, formula, chart and seal models have none, so those
parts are switched off; document orientation and unwarping too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from .assets import LAYOUT, ocr_pipeline_config
from .table_model import TABLE, table_pipeline_config


def _layout(root: Path) -> Dict[str, Any]:
    return {"module_name": "layout_detection", "model_name": LAYOUT, "model_dir": str(Path(root) / LAYOUT)}


def layout_parsing_config(root: Path, det: str, rec: str) -> Dict[str, Any]:
    """``layout_parsing`` over the model folders under ``root`` (``om/`` for the route, ``paddle/`` for PaddleX's
    own engines): layout detection, OCR, tables by SLANet_plus; no seal, formula or page preprocessing."""
    table = table_pipeline_config(Path(root) / TABLE, root, det, rec)
    table.update(use_ocr_model=False, SubPipelines={})  # the page's OCR is given to the table step
    return {
        "pipeline_name": "layout_parsing",
        "use_doc_preprocessor": False,
        "use_seal_recognition": False,
        "use_table_recognition": True,
        "use_formula_recognition": False,
        "SubModules": {"LayoutDetection": _layout(root)},
        "SubPipelines": {"GeneralOCR": ocr_pipeline_config(root, rec=rec, det=det), "TableRecognition": table},
    }


def structure_v3_config(root: Path, det: str, rec: str) -> Dict[str, Any]:
    """PP-StructureV3 over the model folders under ``root``: layout detection (the PicoDet layout model: its CDLA
    labels, of which PP-StructureV3 knows ``text``, ``table``, ``figure``...) and OCR; every part whose model has
    no offline weights off."""
    off = ("doc_preprocessor", "doc_orientation_classify", "doc_unwarping", "seal_recognition", "region_detection")
    off += ("table_recognition", "formula_recognition", "chart_recognition")
    return {
        "pipeline_name": "PP-StructureV3",
        **{f"use_{part}": False for part in off},
        "SubModules": {"LayoutDetection": _layout(root)},
        "SubPipelines": {"GeneralOCR": ocr_pipeline_config(root, rec=rec, det=det)},
    }
