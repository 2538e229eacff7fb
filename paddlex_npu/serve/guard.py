"""The ASGI guard in front of ``serve``'s app (and Ray Serve's): the probes (``/health``, ``/ready``) from the
pool's state, admission (503 + ``Retry-After`` when full, starting or draining), 415 for a POST that is not JSON,
413 for a body over the limit, the client's disconnect watched (a request still waiting is dropped), and the
requests in flight counted for the drain."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from ..errors import QueueFullError, RequestRefusedError
from ..executor.pool import Pool
from ..log import logger
from . import replies


@dataclass
class State:
    draining: bool = False
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: Optional[Pool] = None
    capacity: Optional[int] = None  # POSTs admitted at once (workers + --max-queue); 503 + Retry-After beyond
    admitted: int = 0


async def _refuse(send: Callable, scope: Dict[str, Any], message: str, category: str, close: bool = False) -> None:
    """Answer the request with the reply table's row ``category`` and ``message`` (:func:`.replies.answer`)."""
    await replies.send(send, scope, replies.answer(RequestRefusedError(message, category)), close=close)


class _Call:
    """One request on its way through the server: the pool future it waits for, cancelled if the client goes."""

    def __init__(self) -> None:
        self.future: Any = None
        self.gone = False
        self.watchers: List[Callable[[], Any]] = []  # called when the client goes (a PDF's rendering: cancelled)

    def client_gone(self) -> None:
        self.gone = True
        if self.future is not None:
            self.future.cancel()  # succeeds only while it waits in the queue: it never reaches a worker
        for watcher in list(self.watchers):
            watcher()


_CALL: contextvars.ContextVar = contextvars.ContextVar("paddlex_npu_call", default=None)


class Guard:
    """ASGI middleware, the one place of the request path: ``/health`` (liveness) and ``/ready`` (readiness)
    answered from the pool's state; 503 while draining; 415 for a POST that is not JSON; 413 for a body over the
    limit (declared or streamed); the client's disconnect watched once its body is read (a request still waiting
    for a worker is dropped); any error the app lets through answered 500 (logged with its traceback) without
    dropping the connection; counts requests in flight."""

    def __init__(self, app: Any, state: State, max_body_bytes: int) -> None:
        self.app, self.state, self.max_body = app, state, max_body_bytes

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path in ("/health", "/ready") and scope["method"] == "GET":
            return await self._probe(scope, send)
        if self.state.draining:
            draining = "the server is shutting down; retry on another server"
            return await _refuse(send, scope, draining, "overload", close=True)
        if self.state.pool is None and self.state.capacity is not None:
            return await _refuse(send, scope, "the server is starting: its workers load the pipeline", "overload")
        headers = dict(scope.get("headers") or [])
        admitted = scope["method"] == "POST"
        if admitted:
            with self.state.lock:  # admission before the body is read or decoded: memory stays bounded
                full = self.state.capacity is not None and self.state.admitted >= self.state.capacity
                self.state.admitted += 0 if full else 1
            if full:
                full_error = QueueFullError(
                    f"{self.state.capacity} requests are already running or waiting (the server's workers plus "
                    "its --max-queue): retry later or on another server"
                )
                return await replies.send(send, scope, replies.answer(full_error))
        try:
            await self._admitted(scope, receive, send, headers)
        finally:
            if admitted:
                with self.state.lock:
                    self.state.admitted -= 1

    async def _admitted(self, scope: Dict[str, Any], receive: Callable, send: Callable, headers: Dict) -> None:
        path = scope.get("path", "")
        if scope["method"] == "POST":
            ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if ctype != b"application/json":
                shown = ctype.decode(errors="replace") or "none"
                return await _refuse(send, scope, f"Content-Type must be application/json, got {shown}", "media_type")
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body:
                return await self._refuse_body(scope, receive, send, f"request body of {int(length)} bytes")
            if length is None:  # chunked: read it here (up to the limit), as the app would, then hand it over
                body = await self._read_limited(receive)
                if body is None:
                    return await self._refuse_body(scope, receive, send, "request body (chunked)")
                receive = _replay(body, receive)
        received = 0
        started = False
        call = _Call()
        watcher: Optional[asyncio.Future] = None

        async def counted_receive() -> Dict[str, Any]:
            nonlocal received, watcher
            if watcher is not None:  # the body is read: what comes next is the disconnect
                return await asyncio.shield(watcher)
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                raise _BodyTooLargeError()
            if message["type"] == "http.disconnect":
                call.client_gone()
            elif not message.get("more_body"):
                watcher = asyncio.ensure_future(receive())
                watcher.add_done_callback(lambda f: f.cancelled() or call.client_gone())
            return message

        async def tracked_send(message: Dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        token = _CALL.set(call)
        with self.state.lock:
            self.state.in_flight += 1
        try:
            await self.app(scope, counted_receive, tracked_send)
        except _BodyTooLargeError:
            if not started:
                await self._refuse_body(scope, receive, send, "request body")
        except Exception as exc:  # our own bug on the request path: logged with its traceback, answered by category
            logger.exception("serve: %s %s failed", scope["method"], path)
            if not started:
                await replies.send(send, scope, replies.answer(exc))
        finally:
            _CALL.reset(token)
            if watcher is not None and not watcher.done():
                watcher.cancel()
            with self.state.lock:
                self.state.in_flight -= 1

    async def _read_limited(self, receive: Callable) -> Optional[bytes]:
        """The whole body, or None as soon as it is over the limit."""
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(parts)
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > self.max_body:
                return None
            if not message.get("more_body"):
                return b"".join(parts)

    async def _refuse_body(self, scope: Dict[str, Any], receive: Callable, send: Callable, what: str) -> None:
        """413, after reading the rest of the body off (unkept, up to 4 x the limit) so plain clients see it."""
        mb = self.max_body / (1024 * 1024)
        message = (
            f"{what} is over the server's limit of {self.max_body} bytes ({mb:g} MB): send a smaller request, "
            "or start paddlex-npu serve with a larger --max-body-mb"
        )
        drained = 0
        while drained < 4 * self.max_body:
            chunk = await receive()
            drained += len(chunk.get("body", b""))
            if chunk["type"] != "http.request" or not chunk.get("more_body"):
                break
        await _refuse(send, scope, message, "too_large", close=True)

    async def _probe(self, scope: Dict[str, Any], send: Callable) -> None:
        path, pool = scope.get("path", ""), self.state.pool
        status = pool.status if pool is not None else None
        if path == "/health":
            if status is None or status.alive:
                return await replies.send(send, scope, replies.ok(message="Healthy"))
            return await _refuse(send, scope, f"no worker is alive: {status.last_error}", "not_ready")
        if self.state.draining:
            return await _refuse(send, scope, "not ready: the server is draining (shutting down)", "not_ready")
        need = _min_workers(scope.get("query_string", b""))  # /ready?min-workers=N: ready while N workers are
        if isinstance(need, str):
            return await _refuse(send, scope, need, "bad_request")
        if status is None or not (status.all_ready if need is None else not status.closing and status.ready >= need):
            why = "starting" if status is None else f"{status.ready} of {status.size} workers ready"
            if status is not None and status.starting:
                why += f", {status.starting} restarting"
            return await _refuse(send, scope, f"not ready: {why}", "not_ready")
        return await replies.send(send, scope, replies.ok(message="Ready"))


def _min_workers(query: bytes) -> Union[int, str, None]:
    """``min-workers`` of /ready's query: the number, None when absent (every worker), or what is wrong with it."""
    values = urllib.parse.parse_qs(query.decode("latin-1")).get("min-workers")
    if not values:
        return None
    if not values[-1].isdigit() or int(values[-1]) < 1:
        return f"min-workers={values[-1]!r}: give a whole number of workers, 1 or more (/ready?min-workers=1)"
    return int(values[-1])


def _replay(body: bytes, receive: Callable) -> Callable:
    """A ``receive`` that gives ``body`` first, then what the connection sends (the disconnect)."""
    given = False

    async def replay() -> Dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _BodyTooLargeError(Exception):
    pass
