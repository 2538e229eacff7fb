"""Checks of a request's pipeline options in the server, before a worker sees them: values PaddleX would raise on
deep inside the pipeline (an answer 500) or silently misuse (``NaN`` drops every line), and modules the pipeline
was not built with. Each problem is a sentence naming the request field and what it takes (the server answers 422).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from ..paddlex.pipelines import sub_modules

# pipeline keyword -> the request field of PaddleX's serving schema (camelCase)
FIELDS = {
    "use_doc_orientation_classify": "useDocOrientationClassify",
    "use_doc_unwarping": "useDocUnwarping",
    "use_textline_orientation": "useTextlineOrientation",
    "text_det_limit_side_len": "textDetLimitSideLen",
    "text_det_limit_type": "textDetLimitType",
    "text_det_thresh": "textDetThresh",
    "text_det_box_thresh": "textDetBoxThresh",
    "text_det_unclip_ratio": "textDetUnclipRatio",
    "text_rec_score_thresh": "textRecScoreThresh",
}
LIMIT_TYPES = ("min", "max")  # PaddleX's text detection resize: "not support limit type" for anything else
UNIT_RANGE = ("text_det_thresh", "text_det_box_thresh", "text_rec_score_thresh")
POSITIVE = ("text_det_limit_side_len", "text_det_unclip_ratio")


def _field(key: str) -> str:
    return FIELDS.get(key, key)


def _has_module(config: Dict[str, Any], key: str) -> bool:
    """Whether the pipeline YAML builds the models ``use_<key>`` needs."""
    built = {where for where, _ in sub_modules(config)}
    if key == "use_textline_orientation":
        return bool(config.get("use_textline_orientation", True)) and "SubModules.TextLineOrientation" in built
    pre = (config.get("SubPipelines") or {}).get("DocPreprocessor") or {}
    if not pre or not config.get("use_doc_preprocessor", True):
        return False
    want = "DocOrientationClassify" if key == "use_doc_orientation_classify" else "DocUnwarping"
    return f"SubPipelines.DocPreprocessor.SubModules.{want}" in built and bool(pre.get(key, True))


def check_options(config: Dict[str, Any], kwargs: Dict[str, Any]) -> Optional[str]:
    """The first problem of the pipeline keywords ``kwargs`` (as PaddleX's app passes them), or None."""
    for key, value in kwargs.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"{_field(key)} is {value}: give a finite number"
        if value is None:
            continue
        if key == "text_det_limit_type" and value not in LIMIT_TYPES:
            return (
                f"textDetLimitType {value!r} is not supported (PaddleX: not support limit type): "
                f"give one of {', '.join(LIMIT_TYPES)}"
            )
        if key in UNIT_RANGE and isinstance(value, (int, float)) and not 0 <= value <= 1:
            return f"{_field(key)} is {value}: give a number from 0 to 1"
        if key in POSITIVE and isinstance(value, (int, float)) and value <= 0:
            return f"{_field(key)} is {value}: give a number above 0"
        if key in ("use_doc_orientation_classify", "use_doc_unwarping", "use_textline_orientation"):
            if value and config.get("pipeline_name") in ("OCR", "PP-OCRv5", "ocr") and not _has_module(config, key):
                return (
                    f"{_field(key)} is true, but this server's pipeline has no model for it (PaddleX: the models "
                    "are not initialized): send false, or serve a pipeline YAML that has the module"
                )
    return None
