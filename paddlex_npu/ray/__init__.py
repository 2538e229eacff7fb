"""paddlex-npu on a Ray cluster (the ``ray`` extra): batch OCR over a corpus
on Ray Data (:func:`ocr`, :class:`PipelineBatch`, :func:`decode_batch`, in :mod:`.batch`) and a Ray Serve
deployment answering PaddleX's serving schema (:func:`deployment`, :func:`run_deployment`, in :mod:`.serving`). Each
pipeline runs in an actor holding one NPU (``resources={"NPU": 1}``), on the chip Ray assigned to it
(:mod:`.devices`). Ray is imported when one of these names is first used, so the CLI loads without it."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ACTOR_FAULT_TOLERANCE": "batch",
    "PipelineBatch": "batch",
    "decode_batch": "batch",
    "OcrOptions": "batch",
    "ocr": "batch",
    "ocr_job": "batch",
    "write_rows": "batch",
    "check_plan": "plan",
    "read_inputs": "batch",
    "assigned_device_id": "devices",
    "logical_id": "devices",
    "deployment": "serving",
    "run_deployment": "serving",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..deps import require

    require("ray", "paddlex_npu.ray (batch OCR on Ray Data, Ray Serve)")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
