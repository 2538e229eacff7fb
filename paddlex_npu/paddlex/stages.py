"""Per-stage times of a PaddleX pipeline or model, for the benchmark: each predictor's ``process`` is split at its
model calls into pre-processing (before the first model call), model (the runner: ``predictor.runner`` on 3.5+,
``predictor.infer`` on 3.0-3.4; on the NPU route this is the device call plus the OM runner) and
post-processing (after the last); what the pipeline does outside its predictors (reading, cropping text lines,
sorting, building results) is the rest of the wall time. Timers wrap instance attributes only: nothing of
PaddleX's classes changes, and other pipelines are not affected."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List

from .patcher import adapter


class StageClock:
    """Seconds spent in each stage by the instrumented predictors of one process (one thread at a time)."""

    def __init__(self) -> None:
        self.pre = self.model = self.post = 0.0
        self.model_thread_cpu = 0.0  # CPU seconds of the calling thread inside model calls (the rest is host work)
        self._mark = 0.0
        self._mark_is_start = True  # the mark is the start of a process call (else the end of a model call)

    def totals(self) -> Dict[str, float]:
        return {"pre_seconds": self.pre, "model_seconds": self.model, "post_seconds": self.post}


class _TimedModel:
    """Stands for a predictor's runner: the time before a call is pre-processing, the call is model time."""

    def __init__(self, inner: Any, clock: StageClock) -> None:
        self._inner, self._clock = inner, clock
        self.__wrapped__ = inner  # what it stands for (host_steps.om_runner_of looks through it)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        clock = self._clock
        start, thread_start = time.perf_counter(), time.thread_time()
        if clock._mark_is_start:
            clock.pre += start - clock._mark
        else:
            clock.post += start - clock._mark  # between two model calls of one process: host work, after a call
        try:
            return self._inner(*args, **kwargs)
        finally:
            clock._mark = time.perf_counter()
            clock._mark_is_start = False
            clock.model += clock._mark - start
            clock.model_thread_cpu += time.thread_time() - thread_start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _predictors(root: Any, attr: str) -> Iterator[Any]:
    """Objects reachable from ``root`` through attributes (depth 4) that have ``process`` and the runner."""
    seen, frontier = set(), [root]
    for _ in range(5):
        found: List[Any] = []
        for obj in frontier:
            if id(obj) in seen or not hasattr(obj, "__dict__"):
                continue
            seen.add(id(obj))
            if callable(getattr(type(obj), "process", None)) and attr in vars(obj):
                yield obj
                continue
            found += [v for v in vars(obj).values() if hasattr(v, "__dict__") and not isinstance(v, type)]
        frontier = found


def instrument(pipeline: Any) -> StageClock:
    """Time the stages of every predictor of ``pipeline`` (a PaddleX pipeline, or one model's predictor)."""
    clock = StageClock()
    attr = adapter().static_infer_attr()
    for predictor in _predictors(pipeline, attr):
        predictor.process = _start_process(clock, predictor.process)
        setattr(predictor, attr, _TimedModel(getattr(predictor, attr), clock))
    return clock


SIMULATED = ("calls", "computed", "device_ms", "replay_ms", "compute_ms", "transfer_ms")


def device_meter(pipeline: Any) -> Callable[[], Dict[str, float]]:
    """The executor's default meter (``WorkerSpec.meter``): this process's simulated-device counters, as
    ``sim_<name>`` (zeros on another runtime)."""
    from ..run import simulated

    def read() -> Dict[str, float]:
        stats = simulated.stats()
        return {f"sim_{name}": stats[name] for name in SIMULATED}

    return read


def stage_meter(pipeline: Any) -> Callable[[], Dict[str, float]]:
    """:func:`device_meter` and the stage times of :func:`instrument` (the executor's ``stages=True``)."""
    clock, device = instrument(pipeline), device_meter(pipeline)
    return lambda: {**device(), **clock.totals()}


def _start_process(clock: StageClock, original: Callable[..., Any]) -> Callable[..., Any]:
    def process(*args: Any, **kwargs: Any) -> Any:
        clock._mark, clock._mark_is_start = time.perf_counter(), True
        try:
            return original(*args, **kwargs)
        finally:
            end = time.perf_counter()
            if clock._mark_is_start:
                clock.pre += end - clock._mark  # no model call: all of it before one
            else:
                clock.post += end - clock._mark

    return process
