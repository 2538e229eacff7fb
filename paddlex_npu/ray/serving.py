"""A Ray Serve deployment answering PaddleX's basic-serving schema (``POST /ocr`` for the OCR pipeline, and
``/health``), the same JSON as ``paddlex-npu serve``: each replica is the app of ``paddlex-npu serve``
(:func:`paddlex_npu.serve.app.create_app`: PaddleX's routes and validation, the body-size and content-type
guard, the route's errors mapped to status codes) over one pipeline in the replica itself, on the NPU Ray
assigned to it (``ray_actor_options={"resources": {"NPU": 1}}``). Replicas scale with Serve's autoscaling
config; a request is answered by one replica, one pipeline call at a time (the device call holds the GIL).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Optional, Union

from ray import serve

from ..errors import ConfigError
from .devices import assigned_device_id, require_npus

DEFAULT_NAME = "paddlex-npu"


class ReplicaPool:
    """The :class:`~..executor.pool.Pool` of ``serve``'s app (``submit`` -> a future of a
    :class:`~..executor.pool.PoolResult`, ``status``, ``size``) over one pipeline in this replica's process, one
    call at a time. Ray Serve is the supervisor here: it restarts a dead replica and queues per replica
    (``max_ongoing_requests``)."""

    size = 1

    def __init__(self, pipeline: Any, device_id: int) -> None:
        self.pipeline = pipeline
        self.device_id = device_id
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="paddlex-npu-replica")

    def submit(
        self,
        item: Any,
        kwargs: Optional[Dict[str, Any]] = None,
        transform_kwargs: Optional[Dict[str, Any]] = None,
        retry_safe: bool = True,
        timeout: Optional[float] = None,
    ) -> Future:
        return self._thread.submit(self._predict, item, kwargs or {}, transform_kwargs or {})

    def _predict(self, item: Any, kwargs: Dict[str, Any], transform_kwargs: Dict[str, Any]) -> Any:
        from ..executor.pool import PoolResult
        from ..executor.worker import WorkerSpec, run_one
        from ..serve.workers import serve_result

        spec = WorkerSpec(None, self.device_id, transform=serve_result)
        return PoolResult(run_one(self.pipeline, spec, item, kwargs, transform_kwargs), os.getpid(), self.device_id, 1)

    @property
    def status(self) -> Any:
        from ..executor.pool import PoolStatus

        return PoolStatus(size=1, ready=1, starting=0, busy=0, queued=0, restarts=0, closing=False)

    def close(self, wait: bool = True) -> None:
        self._thread.shutdown(wait=wait, cancel_futures=not wait)


@serve.ingress()
class PipelineReplica:
    """One Serve replica: the pipeline of ``config`` on the replica's NPU, behind ``paddlex-npu serve``'s app."""

    def __init__(
        self,
        config: Dict[str, Any],
        runtime: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        max_body_bytes: Optional[int] = None,
        max_image_pixels: Optional[int] = None,
    ) -> None:
        os.environ.update(env or {})
        from ..paddlex.pipelines import pipeline_on_device
        from ..serve.http import ServeOptions

        options = ServeOptions()
        if max_body_bytes is not None:
            options.max_body_bytes = max_body_bytes
        if max_image_pixels is not None:
            options.max_image_pixels = max_image_pixels
        self.options = options
        self.config = config
        self.device_id = assigned_device_id()
        self.pool = ReplicaPool(pipeline_on_device(config, self.device_id, runtime), self.device_id)

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
) -> Any:
    """The Serve application (``Deployment.bind()``) of a PaddleX pipeline YAML or config dict, one NPU per
    replica. ``num_replicas`` (default 1) or ``autoscaling_config`` (Serve's, passed through as given, e.g.
    ``{"min_replicas": 1, "max_replicas": 8, "target_ongoing_requests": 2}``); ``ray_actor_options`` are added
    to ``{"resources": {"NPU": 1}, "num_cpus": 1}``. ``runtime``/``env``: as for :func:`paddlex_npu.ray.ocr`."""
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
    }
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = 1 if num_replicas is None else num_replicas
    return serve.deployment(PipelineReplica, **options).bind(config, runtime, env, max_body_bytes, max_image_pixels)


def run_deployment(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = DEFAULT_NAME,
    proxy_location: str = "HeadOnly",
) -> str:
    """Start Serve's HTTP proxy on ``host:port`` (on the head node only, by default) and run ``app`` at ``/``;
    returns the URL once every replica has built its pipeline."""
    require_npus(1, "the Serve application (one NPU per replica)")
    serve.start(proxy_location=proxy_location, http_options={"host": host, "port": port})
    serve.run(app, name=name, route_prefix="/")
    return f"http://{host}:{port}"
