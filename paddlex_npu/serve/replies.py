"""The servers' answers, built in one place: PaddleX's serving JSON (``logId``, ``errorCode``, ``errorMsg``,
``result``) for ``paddlex-npu serve``, Ray Serve and the Triton models, and the answer to an error from the one
reply table (:data:`paddlex_npu.errors.REPLIES`: status, message form, ``Retry-After``)."""

from __future__ import annotations

import uuid
from typing import Any, Dict, Optional, Tuple, Union

from ..errors import Failure, WorkerFailureError, reply_to

RETRY_AFTER_SECONDS = 1


def error_body(status: int, message: str, log_id: Optional[str] = None) -> Dict[str, Any]:
    """PaddleX's error answer (its ``AIStudioNoResultResponse``)."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": status, "errorMsg": message}


def ok_body(result: Dict[str, Any], log_id: Optional[str] = None) -> Dict[str, Any]:
    """PaddleX's answer of a request that succeeded (its ``AIStudioResultResponse``)."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": 0, "errorMsg": "Success", "result": result}


def failure_of(error: Union[BaseException, Failure]) -> Failure:
    """The :class:`~..errors.Failure` of an error raised here or carried from a worker."""
    if isinstance(error, Failure):
        return error
    if isinstance(error, WorkerFailureError):
        return error.failure
    return Failure.of(error, with_traceback=False)


def error_reply(
    error: Union[BaseException, Failure], log_id: Optional[str] = None
) -> Tuple[int, Dict[str, Any], Dict[str, str]]:
    """(HTTP status, body, headers) every server answers for ``error``, from the reply table."""
    status, message, retry = reply_to(failure_of(error))
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if retry else {}
    return status, error_body(status, message, log_id), headers


def route_error(exc: BaseException, log_id: Optional[str] = None) -> Tuple[int, Dict[str, Any]]:
    """(HTTP status, body) of :func:`error_reply`."""
    status, body, _ = error_reply(exc, log_id)
    return status, body
