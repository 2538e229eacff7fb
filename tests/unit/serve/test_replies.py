"""Every answer of the servers comes from the one reply function: the guard's and the bearer check's protocol
answers carry the headers of their row of the reply table (in process, through the real ASGI middlewares)."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Tuple

import pytest

from paddlex_npu.errors import REPLIES, QueueFullError
from paddlex_npu.serve import auth, replies
from paddlex_npu.serve.guard import Guard, State


async def _unreached(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    raise AssertionError("the guard answers this request itself")


def _call(app: Any, method: str, path: str, headers: List[Tuple[bytes, bytes]], query: bytes = b"") -> Tuple:
    sent: List[Dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": path, "headers": headers, "query_string": query}

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), scope.get("state", {}).get(replies.CATEGORY_STATE_KEY)


JSON = [(b"content-type", b"application/json")]


def test_the_drains_503_says_retry_after_and_closes():
    status, headers, category = _call(Guard(_unreached, State(draining=True), 10), "POST", "/ocr", JSON)
    assert (status, category) == (REPLIES["overload"].status, "overload")
    assert headers[b"retry-after"] == str(replies.RETRY_AFTER_SECONDS).encode() and headers[b"connection"] == b"close"


def test_protocol_answers_are_rows_of_the_table():
    guard = Guard(_unreached, State(capacity=0), 10)
    guard.state.pool = object()  # started, and full: capacity 0
    assert _call(guard, "POST", "/ocr", JSON)[2] == "overload"
    open_guard = Guard(_unreached, State(), 10)
    assert _call(open_guard, "POST", "/ocr", [(b"content-type", b"text/plain")])[:3:2] == (415, "media_type")
    too_long = JSON + [(b"content-length", b"11")]
    status, headers, category = _call(open_guard, "POST", "/ocr", too_long)
    assert (status, category, headers[b"connection"]) == (413, "too_large", b"close")
    assert _call(open_guard, "GET", "/ready", [], b"min-workers=x")[:3:2] == (400, "bad_request")
    assert _call(open_guard, "GET", "/ready", [])[:3:2] == (503, "not_ready")
    locked = auth.BearerAuth(_unreached, auth.AccessTokens(api=("t" * 16,)))
    status, headers, category = _call(locked, "POST", "/ocr", JSON)
    assert (status, category, headers[b"www-authenticate"]) == (401, "unauthorized", b"Bearer")


def test_one_function_answers_errors_failures_and_paddlex_http_exceptions():
    full = replies.answer(QueueFullError("busy"), "L1")
    assert (full.status, full.body["logId"], full.headers["Retry-After"], full.metric) == (503, "L1", "1", "overload")
    assert full.body["errorMsg"] == "QueueFullError: busy"
    starlette = pytest.importorskip("starlette.exceptions", reason="the serving extra: PaddleX's apps raise it")
    paddlex = replies.answer(starlette.HTTPException(422, "bad file type"))
    assert (paddlex.status, paddlex.body["errorMsg"], paddlex.category, paddlex.metric) == (
        422,
        "bad file type",
        None,
        "input",
    )
    assert replies.ok({"x": 1}).body["result"] == {"x": 1} and replies.ok().status == REPLIES["ok"].status
