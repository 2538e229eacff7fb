"""Worker processes that each hold one PaddleX pipeline on the NPU route: K per device, so K calls are in flight
per device (the device call holds the GIL, so calls overlap only across processes).

:class:`PipelineWorkers` is the one interface the HTTP server uses (``submit`` -> a future of PaddleX results,
``close``); it is a standard-library process pool per device and can be swapped for the project's pipelined
executor without touching the server.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Dict, List, Optional, Sequence

_pipeline: Any = None  # the worker process's pipeline, built once by _init


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the server process dies (uvicorn ends by re-raising the signal it caught, which
    kills the server before it can stop its pool), so that no worker outlives it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the server died before the call above: nothing would signal us
        os._exit(0)


def _init(config: Dict[str, Any], device_id: int, runtime: Optional[str]) -> None:
    global _pipeline
    from ..log import configure_from_environment
    from .metrics import instrument_worker
    from .route import create_pipeline

    _die_with_parent()
    configure_from_environment()  # log as the server does
    _pipeline = instrument_worker(create_pipeline(config, device_id, runtime), device_id)


class Result:
    """What comes back from a worker for one PaddleX result (those do not pickle): its ``json`` and, when asked
    for, its ``img`` (the visualisations, PIL images), as PaddleX's serving apps read them."""

    def __init__(self, json: Dict[str, Any], img: Optional[Dict[str, Any]]) -> None:
        self.json = json
        self._img = img

    @property
    def img(self) -> Dict[str, Any]:
        if self._img is None:
            raise AttributeError("the visualisation was not asked for (visualize)")
        return self._img


def _predict(args: tuple, kwargs: Dict[str, Any], images: bool) -> List[Any]:
    out = []
    for item in _pipeline.predict(*args, **kwargs):
        if isinstance(item, dict) and item.keys() == {"error"}:
            out.append(dict(item))
        else:
            out.append(Result(item.json, dict(item.img) if images else None))
    return out


def _ready(hold: float) -> int:
    time.sleep(hold)  # keep this worker busy so the next probe reaches another one
    return os.getpid()


class PipelineWorkers:
    """``workers`` processes per device id, each building the pipeline once; ``submit`` goes to the device with
    the fewest calls in flight."""

    def __init__(
        self,
        config: Dict[str, Any],
        devices: Sequence[int],
        workers: int = 1,
        runtime: Optional[str] = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        ctx = multiprocessing.get_context("spawn")  # no forked PaddleX/runtime state
        self.devices = list(devices)
        self.workers = workers
        self._pools = [
            ProcessPoolExecutor(workers, ctx, initializer=_init, initargs=(config, d, runtime)) for d in self.devices
        ]
        self._in_flight = [0] * len(self._pools)
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Start every worker and wait until each has built its pipeline (errors raised here)."""
        for pool in self._pools:
            pids: set = set()
            while len(pids) < self.workers:
                pids.update(f.result() for f in [pool.submit(_ready, 0.2) for _ in range(self.workers)])

    def submit(self, *args: Any, images: bool = False, **kwargs: Any) -> Future:
        """``pipeline.predict(*args, **kwargs)`` in a worker; the future holds a list of :class:`Result` (with the
        visualisations when ``images``)."""
        with self._lock:
            i = min(range(len(self._pools)), key=self._in_flight.__getitem__)
            self._in_flight[i] += 1
        fut = self._pools[i].submit(_predict, args, kwargs, images)

        def done(_: Future, i: int = i) -> None:
            with self._lock:
                self._in_flight[i] -= 1

        fut.add_done_callback(done)
        return fut

    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(self._in_flight)

    def close(self, wait: bool = True) -> None:
        for pool in self._pools:
            pool.shutdown(wait=wait, cancel_futures=not wait)
