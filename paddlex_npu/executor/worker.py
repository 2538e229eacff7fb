"""The worker process of the executor and of ``serve`` (one supervised pool, :mod:`.pool`): one PaddleX pipeline
(its own sessions) on one device, one input at a time, answering over a pipe. The messages are the dataclasses
below: to the worker :class:`Task` or ``None`` (stop); from it :class:`Ready`, :class:`Fatal` (the pipeline did
not load) and :class:`Done` (one per task, in order). A task whose error is device-fatal
(:class:`~..errors.DeviceLostError`) is answered, then the worker exits: its supervisor starts a fresh process.

:func:`run_one` is the public entry for a runner that holds the pipeline in its own process (Ray Serve's
replica): the same call, transform, timing and :class:`~..errors.Failure` as a worker's."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Union

from ..errors import Failure
from ..log import configure_from_environment


@dataclass
class WorkerSpec:
    """What a worker needs to build its pipeline (picklable: sent to a spawned process)."""

    pipeline: Union[str, Dict[str, Any]]
    device_id: int
    create_kwargs: Optional[Dict[str, Any]] = None
    predict_kwargs: Dict[str, Any] = field(default_factory=dict)
    transform: Optional[Callable[[Any], Any]] = None
    env: Dict[str, str] = field(default_factory=dict)
    stages: bool = False  # time each predictor's pre-processing / model / post-processing (paddlex/stages.py)
    wrap: Optional[Callable[[Any, int], Any]] = None  # (pipeline, device_id) -> pipeline, once it is loaded


@dataclass
class Task:
    """Run ``pipeline.predict(item, **predict_kwargs, **kwargs)``; ``key`` comes back in :class:`Done`;
    ``transform_kwargs`` are passed to the transform of each result (e.g. whether to bring images back)."""

    key: Any
    item: Any
    kwargs: Optional[Dict[str, Any]] = None
    transform_kwargs: Optional[Dict[str, Any]] = None


@dataclass
class Ready:
    """The pipeline is loaded; the worker takes tasks."""

    pid: int


@dataclass
class Fatal:
    """The pipeline did not load: the worker's traceback (its last line names the cause) and the worker exits."""

    pid: int
    text: str


@dataclass
class Done:
    """One task's outcome: ``payload`` is the list of transformed results (``ok``), else the
    :class:`~..errors.Failure` of the error the pipeline raised."""

    key: Any
    ok: bool
    payload: Any
    timing: Dict[str, float] = field(default_factory=dict)

    @property
    def failure(self) -> Optional[Failure]:
        return None if self.ok else self.payload


# The thread pools of the libraries a pipeline runs on (OpenMP, OpenBLAS, MKL, OpenCV's parallel_for): each sizes
# itself to every core of the machine, in every worker.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM")


def thread_env(workers: int, cores: Optional[int] = None, environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The thread-pool sizes for ``workers`` processes on this host's ``cores``: ``cores // workers`` threads
    each (at least 1), so that the pools of K workers do not spin against each other (on 2 cores, 3 workers of 2
    threads each spent 12% more CPU per page than single-threaded ones). A variable already set in ``environ``
    (default: this process's environment) is the user's, and left alone."""
    cores = cores or os.cpu_count() or 1
    environ = os.environ if environ is None else environ
    threads = str(max(1, cores // max(1, workers)))
    return {name: threads for name in THREAD_VARIABLES if name not in environ}


def _sim_stats() -> Dict[str, float]:
    from ..run import simulated

    return simulated.stats()


def run_one(
    pipeline: Any,
    spec: WorkerSpec,
    item: Any,
    kwargs: Optional[Dict[str, Any]] = None,
    transform_kwargs: Optional[Dict[str, Any]] = None,
    clock: Any = None,
    key: Any = None,
) -> Done:
    """One input through ``pipeline``: a :class:`Done` holding the transformed results, or the
    :class:`~..errors.Failure` of what the pipeline raised, and the timing (wall, CPU, simulated device, stages)."""
    transform = spec.transform
    stages0 = clock.totals() if clock is not None else {}
    t0, c0, s0 = time.perf_counter(), time.process_time(), _sim_stats()
    merged = {**spec.predict_kwargs, **(kwargs or {})}
    try:
        extra = transform_kwargs or {}
        results = [transform(r, **extra) if transform else r for r in pipeline.predict(item, **merged)]
        ok, payload = True, results
    except Exception as exc:  # reported for this input; the worker goes on with the next (unless device-fatal)
        ok, payload = False, Failure.of(exc)
    s1 = _sim_stats()
    timing = {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        **{f"sim_{k}": s1[k] - s0[k] for k in ("calls", "computed", "device_ms", "replay_ms", "compute_ms")},
        **{k: v - stages0[k] for k, v in (clock.totals() if clock is not None else {}).items()},
    }
    return Done(key, ok, payload, timing)


def _die_with_parent(parent: int, every: float = 1.0) -> None:
    """Exit when the parent process is gone (even after ``kill -9``), so that no worker outlives it. A thread that
    watches ``getppid`` rather than ``PR_SET_PDEATHSIG``, which fires when the parent *thread* that started the
    worker ends (the pool starts workers from its own threads)."""

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="paddlex-npu-parent-watch", daemon=True).start()


def worker_main(conn: Any, spec: WorkerSpec) -> None:
    """Entry point of a worker process. Ctrl-C is the parent's to handle: the worker ignores SIGINT and is
    stopped by the parent (``None``, or SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(os.getppid())
    os.environ.update(spec.env)
    try:
        configure_from_environment()  # log as the program that started us (the CLI); nothing if none configured
        from ..paddlex.pipelines import create_on_device, plain_result

        if spec.transform is None:
            spec.transform = plain_result
        pipeline = create_on_device(spec.pipeline, spec.device_id, spec.create_kwargs)
        if spec.wrap is not None:
            pipeline = spec.wrap(pipeline, spec.device_id)
        clock = None
        if spec.stages:
            from ..paddlex.stages import instrument

            clock = instrument(pipeline)
    except BaseException:
        conn.send(Fatal(os.getpid(), traceback.format_exc()))
        return
    conn.send(Ready(os.getpid()))
    _serve_tasks(conn, pipeline, spec, clock)


def _serve_tasks(conn: Any, pipeline: Any, spec: WorkerSpec, clock: Any) -> None:
    """Answer tasks until ``None``, the parent's end, or a device-fatal error (answered, then the worker exits
    without touching the lost context again)."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        if msg is None:
            break
        done = run_one(pipeline, spec, msg.item, msg.kwargs, msg.transform_kwargs, clock, msg.key)
        try:
            conn.send(done)
        except Exception as exc:  # e.g. a result that does not pickle: report it as this input's error
            text = f"the result could not be sent to the parent ({exc}); pass a transform that returns plain data"
            conn.send(Done(msg.key, False, Failure(type(exc).__name__, text, traceback.format_exc()), done.timing))
        if done.failure is not None and done.failure.device_lost:
            return  # the process exits; its supervisor starts a fresh one
    try:
        pipeline.close()
    except Exception:
        pass
