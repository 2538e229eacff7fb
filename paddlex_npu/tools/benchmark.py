"""Throughput of a PaddleX pipeline on the NPU route: in-process (serial) against the executor with K workers.

Every route first runs the inputs once (warm-up, and the recording pass of the simulated device; excluded),
then is timed over ``repeat`` passes. Returns figures; printing is the CLI's.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from ..executor import ParallelExecutor
from ..paddlex.pipelines import create_on_device
from ..run import simulated


@dataclass
class RouteFigures:
    """One route's figures over ``images`` timed inputs (times per image unless said)."""

    route: str
    workers: int
    images: int
    seconds: float
    images_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    cpu_ms: float  # CPU time of the processes doing the work
    device_ms: float  # simulated device time
    sim_overhead_ms: float  # the simulation's own host time (digest, mapping replayed outputs)
    computed: int  # simulated calls on inputs never recorded (should be 0)
    errors: int = 0


@dataclass
class BenchmarkReport:
    runtime: str
    cores: int
    cpu: str
    inputs: int
    repeat: int
    routes: List[RouteFigures] = field(default_factory=list)

    @property
    def serial(self) -> RouteFigures:
        return self.routes[0]

    def bound(self) -> float:
        """min(1 / device time per image, cores / CPU time per image), from the serial route's figures."""
        s = self.serial
        device = 1000.0 / s.device_ms if s.device_ms > 0 else float("inf")
        return min(device, self.cores * 1000.0 / s.cpu_ms)

    def as_dict(self) -> Dict[str, Any]:
        return {**asdict(self), "bound_images_per_s": self.bound()}


def _figures(route: str, workers: int, wall: float, lat: List[float], timing: Dict[str, float], errors: int):
    n = len(lat)
    p50, p95, p99 = (float(np.percentile(lat, q)) * 1000.0 for q in (50, 95, 99))
    return RouteFigures(
        route,
        workers,
        n,
        wall,
        n / wall,
        p50,
        p95,
        p99,
        timing["cpu_seconds"] * 1000.0 / n,
        timing["sim_device_ms"] / n,
        timing["sim_replay_ms"] / n,
        int(timing["sim_computed"]),
        errors,
    )


def _serial(pipeline: Any, inputs: Sequence[str], repeat: int) -> RouteFigures:
    for x in inputs:  # warm-up and recording pass
        list(pipeline.predict(x))
    lat: List[float] = []
    s0, c0, t0 = simulated.stats(), time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for x in inputs:
            t = time.perf_counter()
            list(pipeline.predict(x))
            lat.append(time.perf_counter() - t)
    wall, cpu, s1 = time.perf_counter() - t0, time.process_time() - c0, simulated.stats()
    timing = {"cpu_seconds": cpu, **{f"sim_{k}": s1[k] - s0[k] for k in ("device_ms", "replay_ms", "computed")}}
    return _figures("serial (in-process)", 1, wall, lat, timing, 0)


def _executor(ex: ParallelExecutor, inputs: Sequence[str], repeat: int, workers: int) -> RouteFigures:
    for _ in ex.map(list(inputs) * workers):  # warm-up: every worker sees inputs
        pass
    lat: List[float] = []
    totals = {"cpu_seconds": 0.0, "sim_device_ms": 0.0, "sim_replay_ms": 0.0, "sim_computed": 0.0}
    errors, c0, t0 = 0, time.process_time(), time.perf_counter()
    for r in ex.map(list(inputs) * repeat):
        errors += not r.ok
        lat.append(r.timing.get("seconds", 0.0))
        for k in totals:
            totals[k] += r.timing.get(k, 0.0)
    wall = time.perf_counter() - t0
    totals["cpu_seconds"] += time.process_time() - c0  # the dispatcher's own CPU
    return _figures(f"executor, {workers} worker(s)", workers, wall, lat, totals, errors)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def run_benchmark(
    pipeline: Union[str, Dict[str, Any]],
    inputs: Sequence[str],
    *,
    workers: Sequence[int] = (1, 2),
    repeat: int = 3,
    runtime: str = "simulated",
    create_kwargs: Optional[Dict[str, Any]] = None,
    env: Optional[Dict[str, str]] = None,
) -> BenchmarkReport:
    """The serial route, then the executor with each worker count in ``workers`` (one device), on ``inputs``."""
    os.environ.update(env or {})
    os.environ["PADDLEX_NPU_RUNTIME"] = runtime
    report = BenchmarkReport(runtime, os.cpu_count() or 1, _cpu_name(), len(inputs), repeat)
    serial = create_on_device(pipeline, 0, create_kwargs)
    try:
        report.routes.append(_serial(serial, inputs, repeat))
    finally:
        serial.close()
    for k in workers:
        with ParallelExecutor(pipeline, workers_per_device=k, create_kwargs=create_kwargs, runtime=runtime) as ex:
            report.routes.append(_executor(ex, inputs, repeat, k))
    return report
