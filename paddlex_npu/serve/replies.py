"""The servers' answers, built in one place: PaddleX's serving JSON (``logId``, ``errorCode``, ``errorMsg``,
``result``) for ``paddlex-npu serve`` and the Triton models, and the status of an error raised on the route
(:func:`paddlex_npu.errors.http_status`, the one mapping: input 422, device 503, config and the rest 500)."""

from __future__ import annotations

import uuid
from typing import Any, Dict, Optional, Tuple

from ..errors import PaddlexNpuError, http_status

INTERNAL = "Internal server error"


def error_body(status: int, message: str, log_id: Optional[str] = None) -> Dict[str, Any]:
    """PaddleX's error answer (its ``AIStudioNoResultResponse``)."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": status, "errorMsg": message}


def ok_body(result: Dict[str, Any], log_id: Optional[str] = None) -> Dict[str, Any]:
    """PaddleX's answer of a request that succeeded (its ``AIStudioResultResponse``)."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": 0, "errorMsg": "Success", "result": result}


def route_error(exc: BaseException, log_id: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
    """(HTTP status, body) for a request that raised ``exc``: a route error's status by its category and its
    type and message; anything else 500 without its text (it may hold internals; the server log has it)."""
    if isinstance(exc, PaddlexNpuError):
        status = http_status(exc)[0]
        return status, error_body(status, f"{type(exc).__name__}: {exc}", log_id)
    return 500, error_body(500, INTERNAL, log_id)
