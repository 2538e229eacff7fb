"""The worker process of the executor and of ``serve`` (one supervised pool, :mod:`.pool`): one pipeline (its own
sessions) on one device, one input at a time, answering over a pipe. It knows nothing of PaddleX or the simulator:
its :class:`WorkerSpec` names the *factory* that builds the pipeline and the *meter* whose counters each input's
timing adds, both given by the spec's maker (PaddleX's: :mod:`paddlex_npu.paddlex.parallel`, ``serve``'s workers).
The messages are the dataclasses below: to the worker :class:`Task` or ``None`` (stop); from it :class:`Ready`,
:class:`Fatal` (the pipeline did not load) and :class:`Done` (one per task, in order). A task whose error is
device-fatal (:class:`~..errors.DeviceLostError`) is answered, then the worker exits: its supervisor starts a fresh
process.

:class:`Runner` is the public entry for a caller that holds the pipeline in its own process (Ray Serve's replica):
the same call, transform, timing and :class:`~..errors.Failure` as a worker's."""

from __future__ import annotations

import enum
import importlib
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from ..errors import Failure
from ..log import configure_from_environment

Hook = Union[str, Callable[..., Any]]
Reading = Callable[[], Dict[str, float]]


def resolve(hook: Optional[Hook]) -> Optional[Callable[..., Any]]:
    """The callable a hook names: itself, or the attribute ``name`` of module ``module`` for ``"module:name"``."""
    if hook is None or callable(hook):
        return hook
    module, sep, name = hook.partition(":")
    if not sep or not module or not name or ":" in name:
        raise ValueError(f"a hook is a callable or 'module:name', got {hook!r}")
    return getattr(importlib.import_module(module), name)


@dataclass
class WorkerSpec:
    """What a worker needs to build its pipeline (picklable: sent to a spawned process).

    ``factory(pipeline, device_id, create_kwargs)`` returns an object whose ``predict(item, **kwargs)`` yields
    results; ``transform(result, **transform_kwargs)`` turns each into what is sent back (default: as it is);
    ``wrap(pipeline, device_id)`` runs once it is loaded; ``meter(pipeline)`` returns a reading of cumulative
    counters (``{name: value}``) whose change over an input joins its timing. Hooks are callables that pickle
    (module-level functions) or ``"module:name"``; ``env`` is set before anything is imported or built. There is
    no default factory: this layer knows no pipeline."""

    pipeline: Any
    device_id: int
    create_kwargs: Optional[Dict[str, Any]] = None
    predict_kwargs: Dict[str, Any] = field(default_factory=dict)
    transform: Optional[Hook] = None
    env: Dict[str, str] = field(default_factory=dict)
    factory: Optional[Hook] = None
    meter: Optional[Hook] = None
    wrap: Optional[Hook] = None

    def __post_init__(self) -> None:
        if self.factory is None:
            raise ValueError("a WorkerSpec needs factory=, the callable (or 'module:name') that builds its pipeline")


class Cause(enum.Enum):
    """Why an input has no results."""

    RAISED = "raised"  # the pipeline (or the transform) raised; the worker goes on
    DEVICE_LOST = "device_lost"  # it raised a device-fatal error: answered, then the worker is replaced
    UNSENDABLE = "unsendable"  # the results do not pickle
    CRASHED = "crashed"  # the worker died while running it (retried once when safe)
    TIMED_OUT = "timed_out"  # it ran over the timeout: its worker was killed and replaced


@dataclass(frozen=True)
class Task:
    """Run ``pipeline.predict(item, **predict_kwargs, **kwargs)``; ``key`` comes back in :class:`Done`;
    ``transform_kwargs`` are passed to the transform of each result (e.g. whether to bring images back)."""

    key: Any
    item: Any
    kwargs: Optional[Dict[str, Any]] = None
    transform_kwargs: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class Ready:
    """The pipeline is loaded; the worker takes tasks."""

    pid: int


@dataclass(frozen=True)
class Fatal:
    """The pipeline did not load: the worker's traceback (its last line names the cause) and the worker exits."""

    pid: int
    text: str

    @property
    def cause(self) -> str:
        """The traceback's last line: the exception's type and text."""
        return self.text.strip().splitlines()[-1]


@dataclass(frozen=True)
class Done:
    """One task's outcome: the transformed ``results``, or the ``failure`` and its ``cause``; the timing."""

    key: Any
    results: Optional[List[Any]] = None
    failure: Optional[Failure] = None
    cause: Optional[Cause] = None
    timing: Dict[str, float] = field(default_factory=dict)


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


class Runner:
    """A loaded pipeline answering one input at a time: ``predict`` with the spec's and the call's keywords, the
    transform of each result, the failure of what raised, the timing (wall, CPU, and the meter's counters)."""

    def __init__(
        self,
        pipeline: Any,
        transform: Optional[Callable[..., Any]] = None,
        predict_kwargs: Optional[Dict[str, Any]] = None,
        read: Optional[Reading] = None,
    ) -> None:
        self.pipeline, self.transform, self.read = pipeline, transform, read
        self.predict_kwargs = dict(predict_kwargs or {})

    def run(
        self,
        item: Any,
        kwargs: Optional[Dict[str, Any]] = None,
        transform_kwargs: Optional[Dict[str, Any]] = None,
        key: Any = None,
    ) -> Done:
        before = self.read() if self.read else {}
        t0, c0 = time.perf_counter(), time.process_time()
        results, failure, cause = None, None, None
        try:
            extra = transform_kwargs or {}
            predicted = self.pipeline.predict(item, **{**self.predict_kwargs, **(kwargs or {})})
            results = [self.transform(r, **extra) if self.transform else r for r in predicted]
        except Exception as exc:  # reported for this input; the worker goes on with the next (unless device-fatal)
            failure = Failure.of(exc)
            cause = Cause.DEVICE_LOST if failure.device_lost else Cause.RAISED
        timing = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
        after = self.read() if self.read else {}
        timing.update({name: value - before.get(name, 0) for name, value in after.items()})
        return Done(key, results, failure, cause, timing)


def load(spec: WorkerSpec) -> Runner:
    """Build the spec's pipeline on its device: factory, wrap, meter and transform resolved."""
    factory, wrap, meter = resolve(spec.factory), resolve(spec.wrap), resolve(spec.meter)
    pipeline = factory(spec.pipeline, spec.device_id, spec.create_kwargs)
    if wrap is not None:
        pipeline = wrap(pipeline, spec.device_id)
    read = meter(pipeline) if meter is not None else None
    return Runner(pipeline, resolve(spec.transform), spec.predict_kwargs, read)


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
        runner = load(spec)
    except BaseException:
        conn.send(Fatal(os.getpid(), traceback.format_exc()))
        return
    conn.send(Ready(os.getpid()))
    _serve_tasks(conn, runner)


def _serve_tasks(conn: Any, runner: Runner) -> None:
    """Answer tasks until ``None``, the parent's end, or a device-fatal error (answered, then the worker exits
    without touching the lost context again)."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        if msg is None:
            break
        done = runner.run(msg.item, msg.kwargs, msg.transform_kwargs, msg.key)
        try:
            conn.send(done)
        except Exception as exc:  # e.g. a result that does not pickle: report it as this input's error
            text = f"the result could not be sent to the parent ({exc}); pass a transform that returns plain data"
            failure = Failure(type(exc).__name__, text, traceback.format_exc())
            conn.send(Done(msg.key, None, failure, Cause.UNSENDABLE, done.timing))
        if done.cause is Cause.DEVICE_LOST:
            return  # the process exits; its supervisor starts a fresh one
    try:
        runner.pipeline.close()
    except Exception:
        pass
