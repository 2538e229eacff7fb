"""``paddlex-npu serve``'s process life cycle: the worker pool started behind an open port (``/ready`` 503 until
it is loaded), uvicorn, and the drain at SIGTERM (503 for new requests, the ones in flight answered, then exit 0).
The app is :mod:`.app`, its guard :mod:`.guard`."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Optional

from ..executor.pool import RestartBudget, WorkerPool
from . import metrics
from .app import create_app
from .guard import State
from .settings import ServeOptions, ServerSettings
from .workers import check_packages, create_pool


def make_pool(pipeline_config: Dict[str, Any], options: ServeOptions) -> WorkerPool:
    """The server's worker pool, not started; the YAML's model packages are checked first
    (:class:`~..errors.ModelFileError` naming the SubModule, model and folder)."""
    check_packages(pipeline_config)
    server = options.server
    limit = server.restart_limit if server.restart_limit is not None else 2 * server.workers * len(server.devices)
    return create_pool(
        pipeline_config,
        server.devices,
        server.workers,
        server.runtime,
        max_queue=options.app.max_queue,
        timeout=server.request_timeout,
        restarts=RestartBudget(limit, server.restart_window),
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

    store = metrics.start(options.server.devices, options.server.workers)  # before the workers: they inherit its folder
    pool = make_pool(pipeline_config, options)
    failed: list = []
    try:
        app, state = create_app(pipeline_config, pool, options.app, options.server.request_timeout)
        state.pool = None  # starting: /ready 503 until the workers are loaded
        config = uvicorn.Config(  # uvicorn's records go to the handlers the program set (log.configure_logging)
            app,
            host=options.server.host,
            port=options.server.port,
            log_level="info",
            log_config=None,
            access_log=False,  # observe.ObservedApp logs each request
            timeout_graceful_shutdown=5,
            ssl_certfile=options.server.tls_certfile,
            ssl_keyfile=options.server.tls_keyfile,
        )
        server = _draining_server(config, state, options.server)

        def start_workers() -> None:
            try:
                pool.start()
            except BaseException as exc:  # the worker's error: the server stops and raises it
                failed.append(exc)
                server.should_exit = True
                return
            state.pool = pool
            if on_ready:
                scheme = "https" if options.server.tls_certfile else "http"
                on_ready(f"{scheme}://{options.server.host}:{options.server.port}")

        threading.Thread(target=start_workers, name="paddlex-npu-start", daemon=True).start()
        server.run()
    finally:
        pool.close()
        metrics.stop(store)
    if failed and not state.draining:
        raise failed[0]


def _draining_server(config: Any, state: State, settings: ServerSettings) -> Any:
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
            while time.monotonic() - start < settings.drain_timeout:
                if state.in_flight == 0 and time.monotonic() - start >= settings.shutdown_grace:
                    break
                time.sleep(0.05)
            clean = state.in_flight == 0
            super().handle_exit(sig, frame)
            if clean:  # every request answered: exit 0 rather than re-raise the signal (143)
                self._captured_signals.clear()

    return DrainingServer(config)
