"""``serve``'s app: PaddleX's own serving app (routes, request/response schema, validation, error answers) with
its pipeline calls sent to a :class:`~..executor.pool.Pool` (worker processes, or Ray Serve's replica) instead of
one in-process thread, behind the guard (:mod:`.guard`). Everything a client sees on success is PaddleX's; every
answer is chosen by the one reply function (:func:`.replies.answer`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional, Tuple

from ..errors import PaddlexNpuError, RequestRefusedError, WorkerFailureError
from ..executor.pool import Pool
from ..log import logger
from ..paddlex import serving as paddlex_serving
from . import auth, fetch, observe, replies
from . import images as pixel_guard
from .guard import _CALL, Guard, State
from .images import PixelLimits
from .options import check_options
from .render import PdfRenderer
from .settings import DEFAULT_REQUEST_TIMEOUT, AppSettings

_GONE = "the client closed the connection"

# The validated request of the call in progress (set around PaddleX's endpoint): whether to bring images back.
_REQUEST: contextvars.ContextVar = contextvars.ContextVar("paddlex_npu_request", default=None)


@contextlib.asynccontextmanager
async def _capture_request(request: Any) -> AsyncIterator[None]:
    """Around each PaddleX endpoint: its validated request, visible to :class:`WorkerPipeline`."""
    token = _REQUEST.set(request)
    try:
        yield
    finally:
        _REQUEST.reset(token)


class WorkerPipeline:
    """Stands in for PaddleX's ``PipelineWrapper`` (``ctx.pipeline``): ``infer`` checks the options, then runs
    ``pipeline.predict`` in a worker of the pool and awaits it without holding a thread."""

    def __init__(self, pool: Pool, replaced: Any, visualize_default: bool, config: Dict[str, Any]) -> None:
        self._pool = pool
        self._replaced = replaced  # PaddleX's own wrapper (its thread is idle): closed with us
        self._visualize_default = visualize_default
        self._config = config

    @property
    def pipeline(self) -> Any:
        raise AttributeError("the pipeline lives in the worker processes")

    async def infer(self, *args: Any, **kwargs: Any) -> list:
        if len(args) != 1:
            raise TypeError(f"infer takes the input as its one positional argument, got {len(args)}")
        problem = check_options(self._config, kwargs)
        if problem:
            raise RequestRefusedError(problem)
        call = _CALL.get()
        if call is not None and call.gone:
            raise RequestRefusedError(_GONE, "client_gone")
        visualize = getattr(_REQUEST.get(), "visualize", None)
        images = self._visualize_default if visualize is None else bool(visualize)
        future = self._pool.submit(args[0], kwargs, {"images": True} if images else None)  # may raise: 503
        if call is not None:
            call.future = future
        try:
            outcome = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if call is not None and call.gone:
                raise RequestRefusedError(_GONE, "client_gone") from None
            raise
        failure = outcome.failure
        if failure is not None:
            if failure.category != "input":
                logger.error("serve: the pipeline failed in worker %d:\n%s", outcome.pid, failure.traceback or failure)
            raise WorkerFailureError(failure)
        for item in outcome.results:
            if isinstance(item, dict) and item.keys() == {"error"}:  # PaddleX's answer to settings it cannot take
                raise RequestRefusedError(f"PaddleX: {item['error']}")
        return outcome.results

    async def call(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        return await paddlex_serving.call_async(func, *args, **kwargs)

    async def close(self) -> None:
        await self._replaced.close()


class _NoPipeline:
    """What PaddleX's app factory gets as the pipeline: the real ones live in the workers."""

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the pipeline lives in the worker processes")

    def close(self) -> None:
        pass


async def _until_gone(work: Awaitable[Any]) -> Any:
    """``work`` (a PDF's rendering) as a task of its own, cancelled if the request's client goes (then refused
    as ``client_gone``, 499; PaddleX's app wraps the error in its 422, :func:`_answer_errors` unwraps it)."""
    task = asyncio.ensure_future(work)
    call = _CALL.get()
    if call is None:
        return await task
    call.watchers.append(task.cancel)
    if call.gone:
        task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        if call.gone and task.cancelled():
            raise RequestRefusedError(_GONE, "client_gone") from None
        raise
    finally:
        call.watchers.remove(task.cancel)


def create_app(
    pipeline_config: Dict[str, Any],
    pool: Pool,
    options: AppSettings,
    request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
) -> Tuple[Any, State]:
    """PaddleX's app for ``pipeline_config["pipeline_name"]`` over ``pool``, behind the guard; a PDF is rendered
    in a process of its own within ``request_timeout`` (:mod:`.render`)."""
    limits = PixelLimits(options.max_image_pixels, options.max_request_pixels)
    config = dict(pipeline_config)
    config["Serving"] = dict(config.get("Serving") or {})
    app = paddlex_serving.create_pipeline_app(_NoPipeline(), config)
    paddlex_serving.check_app(app)  # at start: a PaddleX whose app the adapter cannot take is refused here
    renderer = PdfRenderer(pixel_guard.DEFAULT_MAX_DECODES, request_timeout)
    threading.Thread(target=renderer.warm_up, name="paddlex-npu-pdf-warm-up", daemon=True).start()
    pixel_guard.install(limits, renderer=renderer, watch=_until_gone)

    def worker_pipeline(replaced: Any, visualize_default: bool) -> WorkerPipeline:
        return WorkerPipeline(pool, replaced, visualize_default, pipeline_config)

    def on_end() -> None:
        pixel_guard.uninstall()
        fetch.uninstall()

    hooks = (_capture_request, fetch.install(options.urls, limits))
    adapted = paddlex_serving.adapt_app(app, worker_pipeline, hooks, on_end)
    _answer_errors(app)
    state = State(pool=pool, capacity=pool.size + options.max_queue)
    app.state.npu_serving, app.state.npu_adapter = state, adapted
    paths = [r.path for r in app.router.routes if hasattr(r, "path")]
    return auth.wrap(observe.ObservedApp(Guard(app, state, options.max_body_bytes), paths), options.tokens), state


def _answer_errors(app: Any) -> None:
    """The app's error handlers, each answering with :func:`.replies.answer`: ours by the reply table, PaddleX's
    validation errors and ``HTTPException`` in PaddleX's form (with the request's ``logId``), anything else 500
    (logged with its traceback)."""
    from fastapi.exceptions import HTTPException, RequestValidationError
    from fastapi.responses import JSONResponse

    def by_table(request: Any, exc: BaseException, log_id: Optional[str] = None) -> Any:
        reply = replies.answer(exc, log_id)
        replies.record(request.scope, reply.category)
        if reply.server_fault and not isinstance(exc, WorkerFailureError):  # a worker's is logged with its trace
            logger.error("serve: %s %s: %s", request.method, request.url.path, reply.body["errorMsg"], exc_info=exc)
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Any, exc: RequestValidationError) -> Any:
        errors = [{"type": e["type"], "loc": _dotted(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        return by_table(request, RequestRefusedError(json.dumps(errors)), await _log_id(request))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Any, exc: HTTPException) -> Any:
        if isinstance(exc.__cause__, PaddlexNpuError):  # ours, wrapped by PaddleX's "Invalid input file" (a PDF's
            return by_table(request, exc.__cause__)  # rendering timed out, or its client went)
        return by_table(request, exc, await _log_id(request))

    @app.exception_handler(PaddlexNpuError)
    async def _route_error(request: Any, exc: PaddlexNpuError) -> Any:
        return by_table(request, exc)

    @app.exception_handler(Exception)
    async def _own_error(request: Any, exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return await _http_error(request, exc)
        return by_table(request, exc)


async def _log_id(request: Any) -> str:
    """The request's own ``logId`` when it is a string (PaddleX echoes any value, and a number then fails)."""
    try:
        value = (await request.json()).get("logId")
    except Exception:
        value = None
    return value if isinstance(value, str) else str(uuid.uuid4())


def _dotted(loc: Any) -> str:
    """A validation error's location as PaddleX writes it: ``body.items[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
