"""``paddlex-npu serve``'s process life cycle: the worker pool started behind an open port (``/ready`` 503 until
it is loaded), uvicorn, and the drain at SIGTERM (503 for new requests, the ones in flight answered, then exit 0).
The app is :mod:`.app`, its guard :mod:`.guard`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ..executor.pool import RestartBudget, WorkerPool
from . import metrics
from .app import create_app
from .guard import State
from .images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS
from .workers import check_packages, create_pool

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_QUEUE = 64  # requests waiting for a worker, beyond those running; 503 + Retry-After above
DEFAULT_REQUEST_TIMEOUT = 120.0  # seconds a worker may spend on one request; 504 above, and the worker replaced


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
        config = uvicorn.Config(  # uvicorn's records go to the handlers the program set (log.configure_logging)
            app,
            host=options.host,
            port=options.port,
            log_level="info",
            log_config=None,
            access_log=False,  # observe.ObservedApp logs each request
            timeout_graceful_shutdown=5,
        )
        server = _draining_server(config, state, options)

        def start_workers() -> None:
            try:
                pool.start()
            except BaseException as exc:  # the worker's error: the server stops and raises it
                failed.append(exc)
                server.should_exit = True
                return
            state.pool = pool
            if on_ready:
                on_ready(f"http://{options.host}:{options.port}")

        threading.Thread(target=start_workers, name="paddlex-npu-start", daemon=True).start()
        server.run()
    finally:
        pool.close()
        metrics.stop(store)
    if failed and not state.draining:
        raise failed[0]


def _draining_server(config: Any, state: State, options: ServeOptions) -> Any:
    """uvicorn's server that drains at the first SIGTERM/SIGINT: ``/ready`` and new requests 503 (the guard reads
    ``state.draining``), the requests in flight answered (up to ``drain_timeout``, at least ``shutdown_grace``),
    then exit 0; a second signal stops at once."""
    import uvicorn

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

    return DrainingServer(config)
