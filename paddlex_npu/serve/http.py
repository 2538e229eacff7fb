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
from typing import Any, Callable, Dict, Optional

from ..errors import PaddlexNpuError, category_of
from . import metrics, observe
from .limits import name_the_pixel_option
from .route import http_status
from .workers import PipelineWorkers

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000  # decoded pixels per image or page (PaddleX's own check, limit set here)


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    devices: tuple = (0,)
    runtime: Optional[str] = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    shutdown_grace: float = 0.0  # seconds answering 503 after SIGTERM before the port closes
    drain_timeout: float = 60.0  # longest wait for requests in flight at shutdown


@dataclass
class _State:
    draining: bool = False
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _error_body(status: int, message: str) -> bytes:
    body = {"logId": str(uuid.uuid4()), "errorCode": status, "errorMsg": message}
    return json.dumps(body).encode()


async def _answer(send: Callable, status: int, message: str, close: bool = False) -> None:
    body = _error_body(status, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Guard:
    """ASGI middleware: 503 while draining, 415 for a POST that is not JSON, 413 for a body over the limit; counts
    requests in flight."""

    def __init__(self, app: Any, state: _State, max_body_bytes: int) -> None:
        self.app, self.state, self.max_body = app, state, max_body_bytes

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.state.draining:
            return await _answer(send, 503, "the server is shutting down; retry on another server", close=True)
        headers = dict(scope.get("headers") or [])
        if scope["method"] == "POST":
            ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if ctype != b"application/json":
                shown = ctype.decode(errors="replace") or "none"
                return await _answer(send, 415, f"Content-Type must be application/json, got {shown}")
            length = headers.get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body:
                while (await receive()).get("more_body"):  # read it off (unkept), so plain clients see the answer
                    pass
                return await _answer(send, 413, self._too_large(f"request body of {int(length)} bytes"), True)
        received = 0
        started = False

        async def counted_receive() -> Dict[str, Any]:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                raise _BodyTooLargeError()
            return message

        async def tracked_send(message: Dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        with self.state.lock:
            self.state.in_flight += 1
        try:
            await self.app(scope, counted_receive, tracked_send)
        except _BodyTooLargeError:
            if not started:
                await _answer(send, 413, self._too_large("request body"), close=True)
        finally:
            with self.state.lock:
                self.state.in_flight -= 1

    def _too_large(self, what: str) -> str:
        """The 413 message: the limit and the server option that sets it."""
        mb = self.max_body / (1024 * 1024)
        return (
            f"{what} is over the server's limit of {self.max_body} bytes ({mb:g} MB): send a smaller request, "
            "or start paddlex-npu serve with a larger --max-body-mb"
        )


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
    """Stands in for PaddleX's ``PipelineWrapper`` (``ctx.pipeline``): ``infer`` runs ``pipeline.predict`` in a
    worker process and awaits it without holding a thread, so as many calls are in flight as there are workers."""

    def __init__(self, workers: PipelineWorkers, replaced: Any, visualize_default: bool) -> None:
        self._workers = workers
        self._replaced = replaced  # PaddleX's own wrapper (its thread is idle): closed with us
        self._visualize_default = visualize_default

    @property
    def pipeline(self) -> Any:
        raise AttributeError("the pipeline lives in the worker processes")

    async def infer(self, *args: Any, **kwargs: Any) -> list:
        from fastapi import HTTPException

        visualize = getattr(_REQUEST.get(), "visualize", None)
        images = self._visualize_default if visualize is None else bool(visualize)
        results = await asyncio.wrap_future(self._workers.submit(*args, images=images, **kwargs))
        for item in results:
            if isinstance(item, dict) and item.keys() == {"error"}:
                raise HTTPException(status_code=500, detail=item["error"])
        return results

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


def create_app(pipeline_config: Dict[str, Any], workers: PipelineWorkers, options: ServeOptions) -> Any:
    """PaddleX's app for ``pipeline_config["pipeline_name"]`` over ``workers``, behind the guard."""
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import JSONResponse
    from paddlex.inference.serving.basic_serving import create_pipeline_app
    from paddlex.inference.serving.infra import utils as serving_utils

    serving_utils.MAX_IMAGE_PIXELS = options.max_image_pixels  # read by PaddleX's decoder at each call
    name_the_pixel_option(serving_utils)
    config = dict(pipeline_config)
    config["Serving"] = dict(config.get("Serving") or {})
    app = create_pipeline_app(_NoPipeline(), config)
    ctx = app.state.context
    paddlex_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        async with paddlex_lifespan(app):
            ctx.pipeline = WorkerPipeline(workers, ctx.pipeline, ctx.config.visualize)
            yield

    app.router.lifespan_context = lifespan
    _capture_requests(app)

    @app.exception_handler(PaddlexNpuError)
    async def _route_error(request: Any, exc: PaddlexNpuError) -> Any:
        from paddlex.inference.serving.infra.models import AIStudioNoResultResponse

        status = http_status(exc)
        observe.set_category(request, category_of(exc))
        body = AIStudioNoResultResponse(
            logId=str(uuid.uuid4()), errorCode=status, errorMsg=f"{type(exc).__name__}: {exc}"
        )
        return JSONResponse(content=jsonable_encoder(body), status_code=status)

    state = _State()
    app.state.npu_serving = state
    paths = [r.path for r in app.router.routes if hasattr(r, "path")]
    return observe.ObservedApp(_Guard(app, state, options.max_body_bytes), paths), state


def serve(
    pipeline_config: Dict[str, Any], options: ServeOptions, on_ready: Optional[Callable[[str], None]] = None
) -> None:
    """Start the workers (each builds the pipeline once), then serve until SIGINT/SIGTERM; at shutdown, answer
    503 for ``shutdown_grace`` seconds and until the requests in flight are answered, then stop the workers."""
    import uvicorn

    store = metrics.start(options.devices, options.workers)  # before the workers: they inherit its folder
    workers = PipelineWorkers(pipeline_config, options.devices, options.workers, options.runtime)
    try:
        workers.warm_up()
        app, state = create_app(pipeline_config, workers, options)

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
                workers.close(wait=False)  # nothing in flight: stop the workers before uvicorn ends the process
                super().handle_exit(sig, frame)

        config = uvicorn.Config(  # uvicorn's records go to the handlers the program set (log.configure_logging)
            app,
            host=options.host,
            port=options.port,
            log_level="info",
            log_config=None,
            access_log=False,  # observe.ObservedApp logs each request
            timeout_graceful_shutdown=5,
        )
        server = DrainingServer(config)
        if on_ready:
            on_ready(f"http://{options.host}:{options.port}")
        server.run()
    finally:
        workers.close()
        metrics.stop(store)
