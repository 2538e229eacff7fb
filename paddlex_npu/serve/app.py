"""``serve``'s app: PaddleX's own serving app (routes, request/response schema, validation, error answers) with
its pipeline calls sent to a :class:`~..executor.pool.Pool` (worker processes, or Ray Serve's replica) instead of
one in-process thread, behind the guard (:mod:`.guard`). Everything a client sees on success is PaddleX's; every
error is answered from the one reply table (:func:`.replies.error_reply`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple

from ..errors import PaddlexNpuError, WorkerFailureError, category_of
from ..executor.pool import Pool
from ..log import logger
from ..paddlex import serving as paddlex_serving
from . import auth, fetch, observe
from . import images as pixel_guard
from .guard import _CALL, Guard, State, error_answer
from .images import PixelLimits
from .options import check_options
from .replies import error_body

if TYPE_CHECKING:
    from .http import ServeOptions


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

    def __init__(self, pool: Pool, replaced: Any, visualize_default: bool, config: Dict[str, Any]) -> None:
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
            outcome = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if call is not None and call.gone:
                raise HTTPException(status_code=499, detail="the client closed the connection") from None
            raise
        failure = outcome.failure
        if failure is not None:
            if failure.category != "input":
                logger.error("serve: the pipeline failed in worker %d:\n%s", outcome.pid, failure.traceback or failure)
            raise WorkerFailureError(failure)
        for item in outcome.results:
            if isinstance(item, dict) and item.keys() == {"error"}:  # PaddleX's answer to settings it cannot take
                raise HTTPException(status_code=422, detail=f"PaddleX: {item['error']}")
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


def create_app(pipeline_config: Dict[str, Any], pool: Pool, options: ServeOptions) -> Tuple[Any, State]:
    """PaddleX's app for ``pipeline_config["pipeline_name"]`` over ``pool``, behind the guard."""
    limits = PixelLimits(options.max_image_pixels, options.max_request_pixels)
    pixel_guard.install(limits)
    config = dict(pipeline_config)
    config["Serving"] = dict(config.get("Serving") or {})
    app = paddlex_serving.create_pipeline_app(_NoPipeline(), config)
    ctx = app.state.context
    paddlex_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        async with paddlex_lifespan(app):
            ctx.pipeline = WorkerPipeline(pool, ctx.pipeline, ctx.config.visualize, pipeline_config)
            yield
        pixel_guard.uninstall()
        fetch.uninstall()

    app.router.lifespan_context = lifespan
    _capture_requests(app)
    fetch.install(app, options.urls, limits)
    _answer_errors(app)
    state = State(pool=pool, capacity=pool.size + options.max_queue)
    app.state.npu_serving = state
    paths = [r.path for r in app.router.routes if hasattr(r, "path")]
    return auth.wrap(observe.ObservedApp(Guard(app, state, options.max_body_bytes), paths), options.tokens), state


def _answer_errors(app: Any) -> None:
    """The app's error handlers: ours from the reply table, PaddleX's validation errors and ``HTTPException`` in
    PaddleX's form (with the request's ``logId``), anything else 500 (logged with its traceback)."""
    from fastapi.exceptions import HTTPException, RequestValidationError
    from fastapi.responses import JSONResponse

    def by_table(request: Any, exc: BaseException) -> Any:
        status, message, headers = error_answer(exc)
        observe.set_category(request, category_of(exc))
        if status >= 500 and not isinstance(exc, WorkerFailureError):  # a worker's failure is logged with its trace
            logger.error("serve: %s %s: %s", request.method, request.url.path, message, exc_info=exc)
        extra = {k.decode(): v.decode() for k, v in headers}
        return JSONResponse(error_body(status, message), status_code=status, headers=extra)

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
