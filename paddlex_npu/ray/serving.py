"""A Ray Serve deployment answering PaddleX's basic-serving schema (``POST /ocr`` for the OCR pipeline, and
``/health``), the same JSON as ``paddlex-npu serve``: each replica is the app of ``paddlex-npu serve``
(:func:`paddlex_npu.serve.app.create_app`: PaddleX's routes and validation, the body-size and content-type
guard, the route's errors mapped to status codes) over one pipeline in the replica itself, on the NPU Ray
assigned to it (``ray_actor_options={"resources": {"NPU": 1}}``). Replicas scale with Serve's autoscaling
config; a request is answered by one replica, one pipeline call at a time (the device call holds the GIL).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

import ray
from pydantic import BaseModel, ConfigDict
from ray import serve

from ..errors import ConfigError, PoolClosedError
from .devices import assigned_device_id, require_npus
from .metrics import instrument

DEFAULT_NAME = "paddlex-npu"
MIN_RAY = (2, 56)  # Serve's ingress without an app (the app built in each replica): Ray 2.56
PROXY_LOCATIONS = ("EveryNode", "HeadOnly", "Disabled")
HEALTH_CHECK_PERIOD_S = 5.0

if tuple(int(p) for p in ray.__version__.split(".")[:2]) < MIN_RAY:
    raise ImportError(
        f"paddlex_npu.ray.serving needs Ray {'.'.join(map(str, MIN_RAY))} or newer (this is Ray {ray.__version__}): "
        "pip install 'ray[data,serve]>=2.56'"
    )


class ReplicaPool:
    """The :class:`~..executor.pool.Pool` of ``serve``'s app (``submit`` -> a future of an
    :class:`~..executor.pool.Outcome`, ``status``, ``size``) over one pipeline in this replica's process, one call
    at a time. Ray Serve is the supervisor here: it queues per replica (``max_ongoing_requests``) and replaces a
    replica that dies or fails its health check. There is no per-request timeout (a device call cannot be stopped
    from its own process; Serve's ``request_timeout_s`` answers the client) and no retry (a crash ends the replica
    with its requests). After a lost device the pool takes no more requests, says so in ``status`` (not ready,
    ``last_error``) and :meth:`PipelineReplica.check_health` fails, so Serve replaces the replica."""

    size = 1

    def __init__(self, pipeline: Any, device_id: int, read: Optional[Callable[[], Dict[str, float]]] = None) -> None:
        from ..executor.worker import Runner
        from ..serve.workers import serve_result

        self.device_id = device_id
        self.lost = ""  # why the device path is lost, once it is
        self._runner = Runner(pipeline, serve_result, read=read)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="paddlex-npu-replica")
        self._lock = threading.Lock()
        self._pending: Set[Future] = set()
        self._running = 0
        self._closing = False

    def submit(
        self, item: Any, kwargs: Optional[Dict[str, Any]] = None, transform_kwargs: Optional[Dict[str, Any]] = None
    ) -> Future:
        with self._lock:
            if self._closing or self.lost:
                why = f"the replica's device path is lost ({self.lost})" if self.lost else "the replica is stopping"
                raise PoolClosedError(f"{why}; Serve replaces it: retry")
            future = self._thread.submit(self._run, item, kwargs, transform_kwargs)
            self._pending.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)

    def _run(self, item: Any, kwargs: Optional[Dict[str, Any]], transform_kwargs: Optional[Dict[str, Any]]) -> Any:
        from ..executor.pool import Outcome
        from ..executor.worker import Cause

        with self._lock:
            self._running += 1
        try:
            done = self._runner.run(item, kwargs, transform_kwargs)
        finally:
            with self._lock:
                self._running -= 1
        if done.cause is Cause.DEVICE_LOST:
            self.lost = f"{done.failure.type}: {done.failure.message}"
        return Outcome.of(done, os.getpid(), self.device_id, 1)

    @property
    def status(self) -> Any:
        from ..executor.pool import PoolStatus

        with self._lock:
            busy, waiting = self._running, len(self._pending) - self._running
            ready = 0 if self._closing or self.lost else 1
            return PoolStatus(1, ready, 0, busy, max(0, waiting), 0, self._closing, self.lost)

    def close(self, wait: bool = True) -> None:
        with self._lock:
            self._closing = True
        self._thread.shutdown(wait=wait, cancel_futures=not wait)


@serve.ingress()
class PipelineReplica:
    """One Serve replica: the pipeline of ``config`` on the replica's NPU, behind ``paddlex-npu serve``'s app;
    unhealthy (Serve replaces it) once its device path is lost."""

    def __init__(
        self,
        config: Dict[str, Any],
        runtime: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        max_body_bytes: Optional[int] = None,
        max_image_pixels: Optional[int] = None,
        guard: Optional[Dict[str, Any]] = None,
    ) -> None:
        os.environ.update(env or {})
        from ..paddlex.pipelines import pipeline_on_device
        from ..paddlex.stages import device_meter
        from ..serve.settings import AppSettings

        given = {"max_body_bytes": max_body_bytes, "max_image_pixels": max_image_pixels}
        # guard: urls (serve.fetch.UrlPolicy), tokens (serve.auth.AccessTokens)
        self.options = AppSettings(**{k: v for k, v in given.items() if v is not None}, **(guard or {}))
        self.config = config
        self.device_id = assigned_device_id()
        pipeline = instrument(pipeline_on_device(config, self.device_id, runtime), self.device_id)
        self.pool = ReplicaPool(pipeline, self.device_id, device_meter(pipeline))

    def check_health(self) -> None:
        """Serve's health check (every ``health_check_period_s``): fails once the device path is lost."""
        if self.pool.lost:
            raise RuntimeError(f"the replica's device path is lost ({self.pool.lost}): Serve replaces it")

    def __serve_build_asgi_app__(self) -> Any:
        from ..serve.app import create_app

        app, _state = create_app(self.config, self.pool, self.options)
        return app


def deployment(
    pipeline: Union[str, Path, Dict[str, Any]],
    *,
    name: str = DEFAULT_NAME,
    runtime: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    num_replicas: Optional[Union[int, str]] = None,
    autoscaling_config: Optional[Dict[str, Any]] = None,
    max_ongoing_requests: int = 4,
    ray_actor_options: Optional[Dict[str, Any]] = None,
    max_body_bytes: Optional[int] = None,
    max_image_pixels: Optional[int] = None,
    urls: Any = None,
    tokens: Any = None,
    health_check_period_s: float = HEALTH_CHECK_PERIOD_S,
) -> Any:
    """The Serve application (``Deployment.bind()``) of a PaddleX pipeline YAML or config dict, one NPU per
    replica. ``num_replicas`` (default 1) or ``autoscaling_config`` (Serve's, passed through as given, e.g.
    ``{"min_replicas": 1, "max_replicas": 8, "target_ongoing_requests": 2}``); ``ray_actor_options`` are added
    to ``{"resources": {"NPU": 1}, "num_cpus": 1}``. ``runtime``/``env``: as for :func:`paddlex_npu.ray.ocr`.
    ``urls`` (:class:`~..serve.fetch.UrlPolicy`; default: URL inputs refused) and ``tokens``
    (:class:`~..serve.auth.AccessTokens`; default: none needed): as ``paddlex-npu serve``'s.
    ``health_check_period_s``: how often Serve asks a replica whether its device path still works."""
    from ..paddlex.pipelines import load_config

    config = load_config(pipeline)
    if num_replicas is not None and autoscaling_config is not None:
        raise ConfigError("give num_replicas or autoscaling_config, not both (Serve takes one or the other)")
    actor_options = dict(ray_actor_options or {})
    actor_options["resources"] = {**actor_options.get("resources", {}), "NPU": 1}
    actor_options.setdefault("num_cpus", 1)
    options: Dict[str, Any] = {
        "name": name,
        "ray_actor_options": actor_options,
        "max_ongoing_requests": max_ongoing_requests,
        "health_check_period_s": health_check_period_s,
    }
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = 1 if num_replicas is None else num_replicas
    guard = {k: v for k, v in (("urls", urls), ("tokens", tokens)) if v is not None}
    return serve.deployment(PipelineReplica, **options).bind(
        config, runtime, env, max_body_bytes, max_image_pixels, guard
    )


class AppArgs(BaseModel):
    """The arguments of :func:`app_builder` (``serve run ... pipeline=...``, or ``args:`` of a Serve config)."""

    model_config = ConfigDict(extra="forbid")

    pipeline: str
    runtime: Optional[str] = None
    env: Optional[Dict[str, str]] = None
    num_replicas: Optional[int] = None
    autoscaling_config: Optional[Dict[str, Any]] = None
    max_ongoing_requests: int = 4
    max_body_bytes: Optional[int] = None
    max_image_pixels: Optional[int] = None
    health_check_period_s: float = HEALTH_CHECK_PERIOD_S
    # the guard, as ray-serve's options: URL inputs (none unless hosts are allowed) and bearer-token files (read
    # where the app is built; $PADDLEX_NPU_API_TOKENS / $PADDLEX_NPU_METRICS_TOKENS there are read too)
    allow_url_hosts: List[str] = []
    url_max_mb: Optional[float] = None  # default: max_body_bytes, else serve's 64 MB
    url_timeout: Optional[float] = None
    url_max_redirects: Optional[int] = None
    token_file: Optional[str] = None
    metrics_token_file: Optional[str] = None


GUARD_FIELDS = ("allow_url_hosts", "url_max_mb", "url_timeout", "url_max_redirects", "token_file")
GUARD_FIELDS += ("metrics_token_file",)


def guard_of(args: AppArgs) -> Dict[str, Any]:
    """``urls`` (:class:`~..serve.fetch.UrlPolicy`) and ``tokens`` (:class:`~..serve.auth.AccessTokens`) of
    :func:`deployment` from the builder's arguments; ConfigError naming the argument when one is wrong."""
    from ..serve import fetch
    from ..serve.auth import AccessTokens

    mib = 1024 * 1024
    max_bytes = int(args.url_max_mb * mib) if args.url_max_mb else args.max_body_bytes or fetch.DEFAULT_MAX_BYTES
    try:
        urls = fetch.UrlPolicy(
            tuple(args.allow_url_hosts),
            max_bytes=max_bytes,
            timeout=fetch.DEFAULT_TIMEOUT if args.url_timeout is None else args.url_timeout,
            max_redirects=fetch.DEFAULT_MAX_REDIRECTS if args.url_max_redirects is None else args.url_max_redirects,
            option="app_builder args allow_url_hosts",
        )
        tokens = AccessTokens.load(args.token_file, args.metrics_token_file)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"paddlex_npu.ray.serving:app_builder args: {exc}") from None
    return {"urls": urls, "tokens": tokens}


def app_builder(args: Dict[str, Any]) -> Any:
    """Serve's one-argument application builder: ``serve run paddlex_npu.ray.serving:app_builder
    pipeline=/models/ocr.yaml``, or ``import_path: paddlex_npu.ray.serving:app_builder`` with ``args:`` (the
    fields of :class:`AppArgs`) in a Serve config file (``serve deploy``, KubeRay's ``serveConfigV2``). The pipeline
    YAML is read where Serve builds the app (on the cluster)."""
    from pydantic import ValidationError

    try:
        parsed = AppArgs.model_validate(dict(args))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
        fields = ", ".join(AppArgs.model_fields)
        raise ConfigError(f"paddlex_npu.ray.serving:app_builder args: {problems} (its fields: {fields})") from None
    options = parsed.model_dump(exclude={"pipeline", *GUARD_FIELDS})
    return deployment(parsed.pipeline, **options, **guard_of(parsed))


def run_deployment(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = DEFAULT_NAME,
    proxy_location: str = "EveryNode",
    tls: Optional[Tuple[str, str]] = None,
) -> str:
    """Start Serve's HTTP proxies on ``host:port`` (one on every node by default, so no request's bytes go through
    one head; ``HeadOnly``, or ``Disabled``) and run ``app`` at ``/``; returns the URL once every replica has built
    its pipeline. ``tls``: (certificate, key) PEM files: the proxies serve HTTPS (Serve's
    ``ssl_certfile``/``ssl_keyfile``)."""
    if proxy_location not in PROXY_LOCATIONS:
        raise ConfigError(f"proxy_location={proxy_location!r}: give one of {', '.join(PROXY_LOCATIONS)}")
    require_npus(1, "the Serve application (one NPU per replica)")
    http_options: Dict[str, Any] = {"host": host, "port": port}
    if tls:
        http_options.update(ssl_certfile=str(tls[0]), ssl_keyfile=str(tls[1]))
    serve.start(proxy_location=proxy_location, http_options=http_options)
    serve.run(app, name=name, route_prefix="/")
    return f"{'https' if tls else 'http'}://{host}:{port}"
