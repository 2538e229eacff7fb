"""Throughput of a PaddleX pipeline (or one model folder) by route, side by side in one run: the NPU route with
the executor's K workers, the NPU route serial (in-process), and PaddleX's own CPU engines (``onnxruntime`` on
3.5+, ``paddle_static`` where the model folders hold Paddle files).

Every route first runs the inputs once (warm-up, and the recording pass of the simulated device; excluded), then
is timed over ``repeat`` passes. Per route: images/s, latency percentiles, CPU use, and per-image stage times
(pre-processing / model / post-processing inside the predictors, the rest of the pipeline; the model time of
the NPU route holds the simulated device time). Returns figures; printing and drawing are the CLI's.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from .. import envs
from ..errors import ConfigError
from ..executor import ParallelExecutor
from ..paddlex.patcher import paddlex_version
from ..paddlex.pipelines import cpu_route, create_on_device
from ..paddlex.stages import instrument
from ..run import simulated

SERIAL = "NPU serial"
Progress = Callable[[str, int], None]
_SIM_KEYS = ("device_ms", "replay_ms", "computed")
_STAGE_KEYS = ("pre_seconds", "model_seconds", "post_seconds")


@dataclass
class RouteFigures:
    """One route's figures over ``images`` timed inputs (times per image unless said)."""

    route: str
    engine: str  # om, onnxruntime, paddle_static
    workers: int
    images: int
    seconds: float
    images_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cpu_ms: float  # CPU time of the processes doing the work
    cpu_percent: float  # of all the machine's cores, over the timed wall time
    pre_ms: float  # predictors' pre-processing
    model_ms: float  # predictors' model calls (NPU route: runner + session, with the simulated device time)
    post_ms: float  # predictors' post-processing
    other_ms: float  # the rest of the pipeline (reading, crops, sorting, results), mean latency minus the above
    device_ms: float  # simulated device time
    sim_overhead_ms: float  # the simulation's own host time (digest, mapping replayed outputs)
    computed: int  # simulated calls on inputs never recorded (should be 0)
    errors: int = 0


@dataclass
class BenchmarkReport:
    runtime: str
    cores: int
    cpu: str
    paddlex: str
    inputs: int
    repeat: int
    routes: List[RouteFigures] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)  # route -> why it did not run
    load_average: List[float] = field(default_factory=list)  # the machine's 1-minute load, at start and at end

    @property
    def busy(self) -> bool:
        """Whether other work shared the cores (load above the core count): throughput is then a lower bound."""
        return max(self.load_average, default=0.0) > self.cores

    @property
    def serial(self) -> RouteFigures:
        return next(r for r in self.routes if r.route == SERIAL)

    def bound(self) -> float:
        """min(1 / device time per image, cores / CPU time per image), from the NPU serial route's figures."""
        s = self.serial
        device = 1000.0 / s.device_ms if s.device_ms > 0 else float("inf")
        return min(device, self.cores * 1000.0 / s.cpu_ms)

    def as_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "bound_images_per_s": self.bound()}


def _figures(
    route: str, engine: str, workers: int, wall: float, lat: List[float], t: Dict[str, float], errors: int
) -> RouteFigures:
    n, cores = len(lat), os.cpu_count() or 1
    p50, p95, p99 = (float(np.percentile(lat, q)) * 1000.0 for q in (50, 95, 99))
    pre, model, post = (t.get(k, 0.0) * 1000.0 / n for k in _STAGE_KEYS)
    return RouteFigures(
        route=route,
        engine=engine,
        workers=workers,
        images=n,
        seconds=wall,
        images_per_s=n / wall,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        cpu_ms=t["cpu_seconds"] * 1000.0 / n,
        cpu_percent=100.0 * t["cpu_seconds"] / (wall * cores),
        pre_ms=pre,
        model_ms=model,
        post_ms=post,
        other_ms=max(0.0, 1000.0 * float(np.mean(lat)) - pre - model - post),
        device_ms=t.get("sim_device_ms", 0.0) / n,
        sim_overhead_ms=t.get("sim_replay_ms", 0.0) / n,
        computed=int(t.get("sim_computed", 0)),
        errors=errors,
    )


def _in_process(
    route: str, engine: str, pipeline: Any, inputs: Sequence[str], repeat: int, progress: Progress
) -> RouteFigures:
    """One in-process pipeline, one input at a time."""
    clock = instrument(pipeline)
    for x in inputs:  # warm-up and recording pass
        list(pipeline.predict(x))
    lat: List[float] = []
    st0, s0, c0, t0 = clock.totals(), simulated.stats(), time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for x in inputs:
            t = time.perf_counter()
            list(pipeline.predict(x))
            lat.append(time.perf_counter() - t)
            progress(route, 1)
    wall, cpu, s1, st1 = time.perf_counter() - t0, time.process_time() - c0, simulated.stats(), clock.totals()
    timing = {
        "cpu_seconds": cpu,
        **{f"sim_{k}": s1[k] - s0[k] for k in _SIM_KEYS},
        **{k: st1[k] - st0[k] for k in _STAGE_KEYS},
    }
    return _figures(route, engine, 1, wall, lat, timing, 0)


def _executor(
    ex: ParallelExecutor, inputs: Sequence[str], repeat: int, workers: int, progress: Progress
) -> RouteFigures:
    route = f"NPU executor, {workers} worker{'s' if workers > 1 else ''}"
    for _ in ex.map(list(inputs) * workers):  # warm-up: every worker sees inputs
        pass
    lat: List[float] = []
    totals = dict.fromkeys(("cpu_seconds", "sim_device_ms", "sim_replay_ms", "sim_computed", *_STAGE_KEYS), 0.0)
    errors, c0, t0 = 0, time.process_time(), time.perf_counter()
    for r in ex.map(list(inputs) * repeat):
        errors += not r.ok
        lat.append(r.timing.get("seconds", 0.0))
        for k in totals:
            totals[k] += r.timing.get(k, 0.0)
        progress(route, 1)
    wall = time.perf_counter() - t0
    totals["cpu_seconds"] += time.process_time() - c0  # the dispatcher's own CPU
    return _figures(route, "om", workers, wall, lat, totals, errors)


def _close(pipeline: Any) -> None:
    close = getattr(pipeline, "close", None)
    if callable(close):
        close()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _cpu_routes(
    report: BenchmarkReport, cpu_pipelines: Dict[str, Any], inputs: Sequence[str], repeat: int, progress: Progress
) -> None:
    """PaddleX's own CPU engines; a route that does not apply is recorded in ``report.skipped`` with the reason."""
    for engine, pipeline in cpu_pipelines.items():
        route = f"PaddleX {engine} (CPU)"
        try:
            created = cpu_route(pipeline, engine)
        except (ConfigError, ImportError) as exc:  # this PaddleX, these folders or this environment lack it
            report.skipped[route] = str(exc)
            progress(route, repeat * len(inputs))
            continue
        try:
            report.routes.append(_in_process(route, engine, created, inputs, repeat, progress))
        except ImportError as exc:  # a package the engine imports only when it runs: the other figures are kept
            report.skipped[route] = f"{type(exc).__name__}: {exc}"
        finally:
            _close(created)


def run_benchmark(
    pipeline: Union[str, Dict[str, Any]],
    inputs: Sequence[str],
    *,
    workers: Sequence[int] = (1, 2),
    repeat: int = 3,
    runtime: str = "simulated",
    create_kwargs: Optional[Dict[str, Any]] = None,
    env: Optional[Dict[str, str]] = None,
    cpu_pipelines: Optional[Dict[str, Union[str, Dict[str, Any]]]] = None,
    progress: Optional[Progress] = None,
) -> BenchmarkReport:
    """The NPU route serial, the executor with each worker count in ``workers`` (one device), then each engine
    of ``cpu_pipelines`` (``{"onnxruntime": config, "paddle_static": config}``: the same pipeline over model
    folders that hold that engine's files), on ``inputs``. ``progress(route, n)`` is called as inputs finish."""
    progress = progress or (lambda route, n: None)
    os.environ.update(env or {})
    os.environ[envs.RUNTIME.name] = runtime
    report = BenchmarkReport(runtime, os.cpu_count() or 1, _cpu_name(), paddlex_version() or "", len(inputs), repeat)
    report.load_average.append(os.getloadavg()[0])
    serial = create_on_device(pipeline, 0, create_kwargs)
    try:
        report.routes.append(_in_process(SERIAL, "om", serial, inputs, repeat, progress))
    finally:
        _close(serial)
    for k in workers:
        with ParallelExecutor(
            pipeline, workers_per_device=k, create_kwargs=create_kwargs, runtime=runtime, stages=True
        ) as ex:
            report.routes.append(_executor(ex, inputs, repeat, k, progress))
    _cpu_routes(report, cpu_pipelines or {}, inputs, repeat, progress)
    report.load_average.append(os.getloadavg()[0])
    return report
