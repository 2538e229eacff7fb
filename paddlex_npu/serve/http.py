"""``paddlex-npu serve``: PaddleX's own serving app (routes, request/response schema, validation, error answers)
with its pipeline calls sent to worker processes on the NPU route instead of one in-process thread.

What is ours: the pipeline behind PaddleX's ``ctx.pipeline`` (:class:`WorkerPipeline`), a guard in front of the
app (body size, content type, draining) and the mapping of the route's errors to status codes. Everything a
client sees on success is PaddleX's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from ..errors import (
    PaddlexNpuError,
    PoolClosedError,
    QueueFullError,
    RequestTimeoutError,
    WorkerCrashedError,
    category_of,
)
from ..errors import http_status as category_status
from ..executor.pool import RestartBudget, WorkerPool
from ..log import logger
from . import auth, fetch, metrics, observe
from . import images as pixel_guard
from .images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS, PixelLimits
from .options import check_options
from .replies import error_body
from .workers import check_packages, create_pool

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_QUEUE = 64  # requests waiting for a worker, beyond those running; 503 + Retry-After above
DEFAULT_REQUEST_TIMEOUT = 120.0  # seconds a worker may spend on one request; 504 above, and the worker replaced
RETRY_AFTER_SECONDS = 1


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    devices: tuple = (0,)
    runtime: Optional[str] = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    max_queue: int = DEFAULT_MAX_QUEUE
    request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT
    restart_limit: Optional[int] = None  # worker restarts per restart_window (default 2 per worker)
    restart_window: float = 600.0
    shutdown_grace: float = 0.0  # seconds answering 503 after SIGTERM before the port closes
    drain_timeout: float = 60.0  # longest wait for requests in flight at shutdown
    urls: fetch.UrlPolicy = fetch.UrlPolicy()  # URL inputs: refused unless hosts are allowed
    tokens: auth.AccessTokens = auth.AccessTokens()  # bearer tokens: none needed unless given
    tls_certfile: Optional[str] = None  # HTTPS with uvicorn's ssl options
    tls_keyfile: Optional[str] = None


@dataclass
class _State:
    draining: bool = False
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: Optional[WorkerPool] = None
    capacity: Optional[int] = None  # POSTs admitted at once (workers + --max-queue); 503 + Retry-After beyond
    admitted: int = 0


def _error_body(status: int, message: str) -> bytes:
    return json.dumps(error_body(status, message)).encode()


async def _answer(
    send: Callable, status: int, message: str, close: bool = False, headers: Optional[list] = None
) -> None:
    body = _error_body(status, message)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += headers or []
    if close:
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def error_answer(exc: BaseException) -> Tuple[int, str, list]:
    """``(status, message, extra headers)`` for an error of ours on the request path, by category: a full queue
    or a lost worker 503 (+ ``Retry-After``), a timeout 504, bad input 422, device 503, anything else 500."""
    retry = [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())]
    if isinstance(exc, (QueueFullError, PoolClosedError, WorkerCrashedError)):
        return 503, f"{type(exc).__name__}: {exc}", retry
    if isinstance(exc, RequestTimeoutError):
        return 504, f"{type(exc).__name__}: {exc} (the server's --request-timeout); its worker was replaced", []
    status, message = category_status(exc)
    return status, message, retry if status == 503 else []


class _Call:
    """One request on its way through the server: the pool future it waits for, cancelled if the client goes."""

    def __init__(self) -> None:
        self.future: Any = None
        self.gone = False

    def client_gone(self) -> None:
        self.gone = True
        if self.future is not None:
            self.future.cancel()  # succeeds only while it waits in the queue: it never reaches a worker


_CALL: contextvars.ContextVar = contextvars.ContextVar("paddlex_npu_call", default=None)


class _Guard:
    """ASGI middleware, the one place of the request path: ``/health`` (liveness) and ``/ready`` (readiness)
    answered from the pool's state; 503 while draining; 415 for a POST that is not JSON; 413 for a body over the
    limit (declared or streamed); the client's disconnect watched once its body is read (a request still waiting
    for a worker is dropped); any error the app lets through answered 500 (logged with its traceback) without
    dropping the connection; counts requests in flight."""

    def __init__(self, app: Any, state: _State, max_body_bytes: int) -> None:
        self.app, self.state, self.max_body = app, state, max_body_bytes

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path in ("/health", "/ready") and scope["method"] == "GET":
            return await self._probe(path, send)
        if self.state.draining:
            return await _answer(send, 503, "the server is shutting down; retry on another server", close=True)
        if self.state.pool is None and self.state.capacity is not None:
            retry = [(b"retry-after", str(RETRY_AFTER_SECONDS).encode())]
            return await _answer(send, 503, "the server is starting: its workers load the pipeline", headers=retry)
        headers = dict(scope.get("headers") or [])
        admitted = scope["method"] == "POST"
        if admitted:
            with self.state.lock:  # admission before the body is read or decoded: memory stays bounded
                full = self.state.capacity is not None and self.state.admitted >= self.state.capacity
                self.state.admitted += 0 if full else 1
            if full:
                status, message, extra = error_answer(
                    QueueFullError(
                        f"{self.state.capacity} requests are already running or waiting (the server's workers plus "
                        "its --max-queue): retry later or on another server"
                    )
                )
                return await _answer(send, status, message, headers=extra)
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
                return await _answer(send, 415, f"Content-Type must be application/json, got {shown}")
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body:
                return await self._refuse_body(receive, send, f"request body of {int(length)} bytes")
            if length is None:  # chunked: read it here (up to the limit), as the app would, then hand it over
                body = await self._read_limited(receive)
                if body is None:
                    return await self._refuse_body(receive, send, "request body (chunked)")
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
                await self._refuse_body(receive, send, "request body")
        except Exception as exc:  # our own bug on the request path: logged with its traceback, answered by category
            logger.exception("serve: %s %s failed", scope["method"], path)
            if not started:
                status, message, extra = error_answer(exc)
                await _answer(send, status, message, headers=extra)
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

    async def _refuse_body(self, receive: Callable, send: Callable, what: str) -> None:
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
        await _answer(send, 413, message, close=True)

    async def _probe(self, path: str, send: Callable) -> None:
        pool = self.state.pool
        status = pool.status if pool is not None else None
        if path == "/health":
            if status is None or status.alive:
                return await _ok_probe(send, "healthy")
            return await _answer(send, 503, f"no worker is alive: {status.last_error}")
        if self.state.draining:
            return await _answer(send, 503, "not ready: the server is draining (shutting down)")
        if status is None or not status.all_ready:
            why = "starting" if status is None else f"{status.ready} of {status.size} workers ready"
            if status is not None and status.starting:
                why += f", {status.starting} restarting"
            return await _answer(send, 503, f"not ready: {why}")
        return await _ok_probe(send, "ready")


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


async def _ok_probe(send: Callable, what: str) -> None:
    body = json.dumps(error_body(0, what.capitalize())).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLargeError(Exception):
    pass


# The validated request of the call in progress (set around PaddleX's endpoint): whether to bring images back.
_REQUEST: contextvars.ContextVar = contextvars.ContextVar("paddlex_npu_request", default=None)


def _capture_requests(app: Any) -> None:
    """Wrap each PaddleX endpoint so the request model it receives is visible to :class:`WorkerPipeline`."""
    for route in app.router.routes:
        dependant = getattr(route, "dependant", None)
        call = getattr(dependant, "call", None)
        if call is None or not asyncio.iscoroutinefunction(call):
            continue

        async def endpoint(*args: Any, __call: Callable = call, **values: Any) -> Any:
            _REQUEST.set(values.get("request"))
            return await __call(*args, **values)

        dependant.call = endpoint


class WorkerPipeline:
    """Stands in for PaddleX's ``PipelineWrapper`` (``ctx.pipeline``): ``infer`` checks the options, then runs
    ``pipeline.predict`` in a worker of the pool and awaits it without holding a thread."""

    def __init__(self, pool: WorkerPool, replaced: Any, visualize_default: bool, config: Dict[str, Any]) -> None:
        self._pool = pool
        self._replaced = replaced  # PaddleX's own wrapper (its thread is idle): closed with us
        self._visualize_default = visualize_default
        self._config = config

    @property
    def pipeline(self) -> Any:
        raise AttributeError("the pipeline lives in the worker processes")

    async def infer(self, *args: Any, **kwargs: Any) -> list:
        from fastapi import HTTPException

        if len(args) != 1:
            raise TypeError(f"infer takes the input as its one positional argument, got {len(args)}")
        problem = check_options(self._config, kwargs)
        if problem:
            raise HTTPException(status_code=422, detail=problem)
        call = _CALL.get()
        if call is not None and call.gone:
            raise HTTPException(status_code=499, detail="the client closed the connection")
        visualize = getattr(_REQUEST.get(), "visualize", None)
        images = self._visualize_default if visualize is None else bool(visualize)
        future = self._pool.submit(args[0], kwargs, {"images": True} if images else None)  # may raise: 503
        if call is not None:
            call.future = future
        try:
            done = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if call is not None and call.gone:
                raise HTTPException(status_code=499, detail="the client closed the connection") from None
            raise
        if not done.done.ok:
            kind, message, trace, category = (*done.done.payload, "runtime")[:4]
            if category == "input":
                raise HTTPException(status_code=422, detail=f"{kind}: {message}")
            logger.error("serve: the pipeline raised in worker %d:\n%s", done.pid, trace)
            status = 503 if category == "device" else 500
            raise HTTPException(status_code=status, detail=f"{kind}: {message}")
        for item in done.done.payload:
            if isinstance(item, dict) and item.keys() == {"error"}:  # PaddleX's answer to settings it cannot take
                raise HTTPException(status_code=422, detail=f"PaddleX: {item['error']}")
        return done.done.payload

    async def call(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        from paddlex.inference.serving.infra.utils import call_async

        return await call_async(func, *args, **kwargs)

    async def close(self) -> None:
        await self._replaced.close()


class _NoPipeline:
    """What PaddleX's app factory gets as the pipeline: the real ones live in the workers."""

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the pipeline lives in the worker processes")

    def close(self) -> None:
        pass


def create_app(pipeline_config: Dict[str, Any], pool: WorkerPool, options: ServeOptions) -> Tuple[Any, _State]:
    """PaddleX's app for ``pipeline_config["pipeline_name"]`` over ``pool``, behind the guard."""
    from fastapi.exceptions import HTTPException, RequestValidationError
    from fastapi.responses import JSONResponse
    from paddlex.inference.serving.basic_serving import create_pipeline_app

    limits = PixelLimits(options.max_image_pixels, options.max_request_pixels)
    pixel_guard.install(limits)
    config = dict(pipeline_config)
    config["Serving"] = dict(config.get("Serving") or {})
    app = create_pipeline_app(_NoPipeline(), config)
    ctx = app.state.context
    paddlex_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        async with paddlex_lifespan(app):
            ctx.pipeline = WorkerPipeline(pool, ctx.pipeline, ctx.config.visualize, pipeline_config)
            try:
                yield
            finally:
                fetch.uninstall()

    app.router.lifespan_context = lifespan
    _capture_requests(app)
    fetch.install(app, options.urls, limits)

    @app.exception_handler(PaddlexNpuError)
    async def _route_error(request: Any, exc: PaddlexNpuError) -> Any:
        status, message, headers = error_answer(exc)
        observe.set_category(request, category_of(exc))
        if status >= 500:
            logger.error("serve: %s", message, exc_info=exc)
        return JSONResponse(
            error_body(status, message), status_code=status, headers={k.decode(): v.decode() for k, v in headers}
        )

    async def _log_id(request: Any) -> str:
        """The request's own ``logId`` when it is a string (PaddleX echoes any value, and a number then fails)."""
        try:
            value = (await request.json()).get("logId")
        except Exception:
            value = None
        return value if isinstance(value, str) else str(uuid.uuid4())

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Any, exc: RequestValidationError) -> Any:
        errors = [{"type": e["type"], "loc": _dotted(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        body = error_body(422, json.dumps(errors))
        body["logId"] = await _log_id(request)
        return JSONResponse(body, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Any, exc: HTTPException) -> Any:
        body = error_body(exc.status_code, str(exc.detail))
        body["logId"] = await _log_id(request)
        return JSONResponse(body, exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _own_error(request: Any, exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return await _http_error(request, exc)
        logger.error("serve: %s %s failed", request.method, request.url.path, exc_info=exc)
        status, message, headers = error_answer(exc)
        observe.set_category(request, category_of(exc))
        return JSONResponse(
            error_body(status, message), status_code=status, headers={k.decode(): v.decode() for k, v in headers}
        )

    state = _State(pool=pool, capacity=pool.size + options.max_queue)
    app.state.npu_serving = state
    paths = [r.path for r in app.router.routes if hasattr(r, "path")]
    return auth.wrap(observe.ObservedApp(_Guard(app, state, options.max_body_bytes), paths), options.tokens), state


def _dotted(loc: Any) -> str:
    """A validation error's location as PaddleX writes it: ``body.items[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def make_pool(pipeline_config: Dict[str, Any], options: ServeOptions) -> WorkerPool:
    """The server's worker pool, not started; the YAML's model packages are checked first
    (:class:`~..errors.ModelFileError` naming the SubModule, model and folder)."""
    check_packages(pipeline_config)
    budget = RestartBudget(
        options.restart_limit if options.restart_limit is not None else 2 * options.workers * len(options.devices),
        options.restart_window,
    )
    return create_pool(
        pipeline_config,
        options.devices,
        options.workers,
        options.runtime,
        max_queue=options.max_queue,
        timeout=options.request_timeout,
        restarts=budget,
    )


def serve(
    pipeline_config: Dict[str, Any], options: ServeOptions, on_ready: Optional[Callable[[str], None]] = None
) -> None:
    """Serve until SIGINT/SIGTERM. The port opens at once (``/health`` 200, ``/ready`` and requests 503 while the
    workers load their pipeline); ``on_ready(url)`` once every worker is loaded. A worker that cannot load stops
    the server: its :class:`~..executor.pool.WorkerStartError` (ending with the worker's own error) is raised.
    At shutdown, answer 503 for ``shutdown_grace`` seconds and until the requests in flight are answered, then
    stop the workers and return (the CLI exits 0)."""
    import uvicorn

    store = metrics.start(options.devices, options.workers)  # before the workers: they inherit its folder
    pool = make_pool(pipeline_config, options)
    failed: list = []
    try:
        app, state = create_app(pipeline_config, pool, options)
        state.pool = None  # starting: /ready 503 until the workers are loaded

        class DrainingServer(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                if state.draining:  # a second signal: stop now
                    return super().handle_exit(sig, frame)
                state.draining = True
                threading.Thread(target=self._drain, args=(sig, frame), daemon=True).start()

            def _drain(self, sig: int, frame: Any) -> None:
                start = time.monotonic()
                while time.monotonic() - start < options.drain_timeout:
                    if state.in_flight == 0 and time.monotonic() - start >= options.shutdown_grace:
                        break
                    time.sleep(0.05)
                clean = state.in_flight == 0
                super().handle_exit(sig, frame)
                if clean:  # every request answered: exit 0 rather than re-raise the signal (143)
                    self._captured_signals.clear()

        config = uvicorn.Config(  # uvicorn's records go to the handlers the program set (log.configure_logging)
            app,
            host=options.host,
            port=options.port,
            log_level="info",
            log_config=None,
            access_log=False,  # observe.ObservedApp logs each request
            timeout_graceful_shutdown=5,
            ssl_certfile=options.tls_certfile,
            ssl_keyfile=options.tls_keyfile,
        )
        server = DrainingServer(config)

        def start_workers() -> None:
            try:
                pool.start()
            except BaseException as exc:  # the worker's error: the server stops and raises it
                failed.append(exc)
                server.should_exit = True
                return
            state.pool = pool
            if on_ready:
                on_ready(f"{'https' if options.tls_certfile else 'http'}://{options.host}:{options.port}")

        threading.Thread(target=start_workers, name="paddlex-npu-start", daemon=True).start()
        server.run()
    finally:
        pool.close()
        metrics.stop(store)
    if failed and not state.draining:
        raise failed[0]
