"""The worker process of the executor: one PaddleX pipeline (its own sessions) on one device, one input at a
time, answering over a pipe. Messages to the worker: ``("task", epoch, index, item, predict_kwargs or None)``
or ``None`` (stop); from it: ``("ready", pid)``, ``("fatal", text)`` (the pipeline did not load),
``("result", epoch, index, ok, payload, timing)``."""

from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Union

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


def _sim_stats() -> Dict[str, float]:
    from ..run import simulated

    return simulated.stats()


def _run_one(
    pipeline: Any, spec: WorkerSpec, item: Any, kwargs: Optional[Dict[str, Any]] = None, clock: Any = None
) -> tuple:
    """(ok, payload, timing) for one input: the transformed results, or the error's type, text and traceback."""
    transform = spec.transform
    stages0 = clock.totals() if clock is not None else {}
    t0, c0, s0 = time.perf_counter(), time.process_time(), _sim_stats()
    merged = {**spec.predict_kwargs, **(kwargs or {})}
    try:
        results = [transform(r) if transform else r for r in pipeline.predict(item, **merged)]
        ok, payload = True, results
    except Exception as exc:  # reported for this input; the worker goes on with the next
        ok, payload = False, (type(exc).__name__, str(exc), traceback.format_exc())
    s1 = _sim_stats()
    timing = {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        **{f"sim_{k}": s1[k] - s0[k] for k in ("calls", "computed", "device_ms", "replay_ms", "compute_ms")},
        **{k: v - stages0[k] for k, v in (clock.totals() if clock is not None else {}).items()},
    }
    return ok, payload, timing


def worker_main(conn: Any, spec: WorkerSpec) -> None:
    """Entry point of a worker process. Ctrl-C is the parent's to handle: the worker ignores SIGINT and is
    stopped by the parent (``None``, or SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(spec.env)
    try:
        configure_from_environment()  # log as the program that started us (the CLI); nothing if none configured
        from ..paddlex.pipelines import create_on_device, plain_result

        if spec.transform is None:
            spec.transform = plain_result
        pipeline = create_on_device(spec.pipeline, spec.device_id, spec.create_kwargs)
        clock = None
        if spec.stages:
            from ..paddlex.stages import instrument

            clock = instrument(pipeline)
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        if msg is None:
            break
        _, epoch, index, item, kwargs = msg
        ok, payload, timing = _run_one(pipeline, spec, item, kwargs, clock)
        try:
            conn.send(("result", epoch, index, ok, payload, timing))
        except Exception as exc:  # e.g. a result that does not pickle: report it as this input's error
            text = f"the result could not be sent to the parent ({exc}); pass a transform that returns plain data"
            conn.send(("result", epoch, index, False, (type(exc).__name__, text, traceback.format_exc()), timing))
    try:
        pipeline.close()
    except Exception:
        pass
