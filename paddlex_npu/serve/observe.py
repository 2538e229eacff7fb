"""What each request to ``paddlex-npu serve`` did: one ASGI middleware, outermost, that answers ``/metrics``,
times every other request, counts it (:mod:`.metrics`) and logs one access record on ``paddlex_npu.serve.access``
with the request's ``logId``, status, latency and error category (one JSON object per line with
``--log-format json``). At the end of the app's lifespan it removes the server's metrics folder."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, Callable, Dict, Iterable, Optional

from ..errors import REPLIES, metric_of
from . import metrics
from .replies import CATEGORY_STATE_KEY

access_logger = logging.getLogger("paddlex_npu.serve.access")

PROBES = ("/health", "/ready")  # logged at DEBUG when they pass: a cluster probes them every few seconds
UVICORN_NO_ANSWER = REPLIES["runtime"].status  # no answer started: the server's fault (uvicorn answers so)
_LOG_ID = re.compile(rb'"logId"\s*:\s*"([^"\\]{1,200})"')


def category(status: int, scope: Dict[str, Any]) -> str:
    """The ``category`` label of an answer: the metrics label of the reply row whoever answered recorded
    (:func:`.replies.record`), else by status (:func:`paddlex_npu.errors.metric_of`)."""
    return metric_of((scope.get("state") or {}).get(CATEGORY_STATE_KEY), status)


class ObservedApp:
    """Answers ``GET /metrics``; around everything else: metrics and one access record per request.

    ``paths``: the app's route paths, used as the ``path`` label (any other path counts as ``other``, so that
    probes of unknown URLs cannot grow the series without bound)."""

    def __init__(self, app: Any, paths: Iterable[str]) -> None:
        self.app = app
        self.paths = set(paths) | {"/metrics"}

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, self._lifespan_send(send))
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/metrics" and scope["method"] in ("GET", "HEAD"):
            return await self._metrics(scope, send)
        start = time.perf_counter()
        answer: Dict[str, Any] = {"status": None, "head": b""}

        async def watched_send(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body" and len(answer["head"]) < 512:
                answer["head"] += message.get("body", b"")[:512]
            await send(message)

        metrics.request_started()
        try:
            await self.app(scope, receive, watched_send)
        finally:
            status = answer["status"] or UVICORN_NO_ANSWER
            self._record(scope, status, answer["head"], time.perf_counter() - start)

    def _record(self, scope: Dict[str, Any], status: int, head: bytes, seconds: float) -> None:
        path = scope["path"] if scope["path"] in self.paths else "other"
        cat = category(status, scope)
        metrics.request_finished(path, status, cat, seconds)
        found = _LOG_ID.search(head)
        log_id: Optional[str] = found.group(1).decode(errors="replace") if found else None
        level = logging.DEBUG if scope["path"] in PROBES and cat == REPLIES["ok"].metric else logging.INFO
        access_logger.log(
            level,
            "%s %s %d %.1f ms (%s) logId=%s",
            scope["method"],
            scope["path"],
            status,
            seconds * 1000.0,
            cat,
            log_id,
            extra={
                "logId": log_id,
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "latency_ms": round(seconds * 1000.0, 3),
                "category": cat,
            },
        )

    async def _metrics(self, scope: Dict[str, Any], send: Callable) -> None:
        accept = b",".join(v for k, v in scope.get("headers") or [] if k.lower() == b"accept").decode("latin-1")
        status, body, content_type = await asyncio.to_thread(metrics.exposition, accept)
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    @staticmethod
    def _lifespan_send(send: Callable) -> Callable:
        async def lifespan_send(message: Dict[str, Any]) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                metrics.stop()
            await send(message)

        return lifespan_send
