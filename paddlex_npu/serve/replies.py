"""The servers' answers, chosen in one place: :func:`answer` maps an error raised here, a :class:`Failure` from a
worker, or PaddleX's own ``HTTPException`` to (status, body, headers) from the one reply table
(:data:`paddlex_npu.errors.REPLIES`); :func:`ok` is the answer that succeeded. The body is PaddleX's serving JSON
(``logId``, ``errorCode``, ``errorMsg``, ``result``) for ``paddlex-npu serve``, Ray Serve and the Triton models;
:func:`send` writes an answer to an ASGI connection and records its category for the access log and the
metrics (:mod:`.observe`)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

from ..errors import REPLIES, Failure, WorkerFailureError, category_of, metric_of, reply_to, server_fault

RETRY_AFTER_SECONDS = 1
CATEGORY_STATE_KEY = "paddlex_npu_error_category"  # the answer's row, in scope["state"], for the access record


def error_body(status: int, message: str, log_id: Optional[str] = None) -> Dict[str, Any]:
    """PaddleX's error answer (its ``AIStudioNoResultResponse``)."""
    return {"logId": log_id or str(uuid.uuid4()), "errorCode": status, "errorMsg": message}


@dataclass(frozen=True)
class Answer:
    """One answer of a server: HTTP status (Triton: ``errorCode``), JSON body, headers, and its reply row (None
    for a status PaddleX's app chose itself)."""

    status: int
    body: Dict[str, Any]
    headers: Dict[str, str] = field(default_factory=dict)
    category: Optional[str] = None

    @property
    def metric(self) -> str:
        """The ``category`` label of the metrics and the access record."""
        return metric_of(self.category, self.status)

    @property
    def server_fault(self) -> bool:
        return server_fault(self.status)


def ok(result: Optional[Dict[str, Any]] = None, log_id: Optional[str] = None, message: str = "Success") -> Answer:
    """PaddleX's answer of a request that succeeded (its ``AIStudioResultResponse``; a probe's has no result)."""
    body: Dict[str, Any] = {"logId": log_id or str(uuid.uuid4()), "errorCode": 0, "errorMsg": message}
    if result is not None:
        body["result"] = result
    return Answer(REPLIES["ok"].status, body, {}, "ok")


def ok_body(result: Dict[str, Any], log_id: Optional[str] = None) -> Dict[str, Any]:
    """The body of :func:`ok`."""
    return ok(result, log_id).body


def failure_of(error: Union[BaseException, Failure]) -> Failure:
    """The :class:`~..errors.Failure` of an error raised here or carried from a worker."""
    if isinstance(error, Failure):
        return error
    if isinstance(error, WorkerFailureError):
        return error.failure
    return Failure.of(error, with_traceback=False)


def _http_exception(error: Any) -> Optional[Tuple[int, str, Dict[str, str]]]:
    """(status, message, headers) of a Starlette/FastAPI ``HTTPException`` (PaddleX's apps raise them)."""
    status = getattr(error, "status_code", None)
    if not isinstance(error, Exception) or not isinstance(status, int) or not hasattr(error, "detail"):
        return None
    return status, str(error.detail), dict(getattr(error, "headers", None) or {})


def answer(error: Union[BaseException, Failure], log_id: Optional[str] = None) -> Answer:
    """The answer every server gives to ``error``: status, body and headers of its category's row of the reply
    table (``Retry-After`` where the row says so); a :class:`~..errors.RequestRefusedError`'s message as is, an
    error of paddlex-npu as ``"<Type>: <text>"``, another library's as 500 with only its type named; PaddleX's
    ``HTTPException`` with the status PaddleX chose."""
    http = _http_exception(error)
    if http is not None:
        status, message, headers = http
        return Answer(status, error_body(status, message, log_id), headers, None)
    if isinstance(error, BaseException) and getattr(error, "named", True) is False:
        category = category_of(error)
        status, message, retry = REPLIES[category].status, str(error), REPLIES[category].retry_after
    else:
        failure = failure_of(error)
        status, message, retry = reply_to(failure)
        category = "runtime" if failure.internal else failure.category
    headers = dict(REPLIES[category].headers)
    if retry:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return Answer(status, error_body(status, message, log_id), headers, category)


def record(scope: Dict[str, Any], category: Optional[str]) -> None:
    """Name the reply row a request is answered with, for its access record and metrics (:mod:`.observe`)."""
    if category is not None:
        scope.setdefault("state", {})[CATEGORY_STATE_KEY] = category


async def send(send_: Callable, scope: Dict[str, Any], reply: Answer, close: bool = False) -> None:
    """Write ``reply`` to an ASGI connection as JSON (``Connection: close`` too when ``close``), its row recorded."""
    record(scope, reply.category)
    body = json.dumps(reply.body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
    if close and "Connection" not in reply.headers:
        head.append((b"connection", b"close"))
    await send_({"type": "http.response.start", "status": reply.status, "headers": head})
    await send_({"type": "http.response.body", "body": body})
