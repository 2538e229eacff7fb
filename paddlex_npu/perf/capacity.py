"""Capacity planning: pages/s and the bottleneck of a PaddleX pipeline on N host cores x M NPUs, predicted from
one benchmark run (``paddlex-npu benchmark --json``) and the device cost model.

What a page costs, from the benchmark's NPU serial route:

- **host CPU** per page: the route's CPU time without the simulated device's own work (``host_ms``), plus what
  the executor adds per page (dispatch, pipes, its parent: the 1-worker executor route's ``host_ms`` minus the
  serial one's), scaled by ``cpu_speed`` (a target core's speed relative to the benchmark machine's);
- **device time** per page: per model, its calls per page x ``base_ms`` plus its input elements per page x
  ``ms_per_melem``, the per-element part divided by the target chip's ``compute_scale`` (:data:`DEVICES`), plus
  the copies host to device and back (the simulator's ``transfer_ms``: bytes moved at the cost model's
  ``pcie_gbps``, the same on every chip of PCIe 4.0 x16);
- **serving** (optional): CPU per request of a front process that answers HTTP (``serving_ms``), which adds to
  the host CPU and can serve at most ``front_processes * 1000 / serving_ms`` requests/s.

The model: each NPU with its K workers is a closed queueing network of K pages in flight, a host CPU of
``cores / npus`` processors shared by processor sharing (as the OS shares cores between busy processes) and
one device served in turn; its exact product-form solution gives the throughput (:func:`throughput`). A page
costs more CPU as the cores fill (``contention``: +14% with every core busy, measured on the development VM).
A worker is either on the CPU or waiting for its device call (which holds the GIL and no core). The planner
tries K = 1.. and keeps the smallest K within 3% of the best (each worker holds a pipeline in memory). The
bottleneck is the resource most used at that point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..errors import ConfigError
from .benchmark import SERIAL, BenchmarkReport


@dataclass(frozen=True)
class Device:
    """A chip relative to the cost model's (310P3): per-element device time / ``compute_scale``; per-call time
    x ``base_scale``."""

    name: str
    compute_scale: float
    base_scale: float
    why: str


DEVICES: Dict[str, Device] = {
    "310P3": Device("310P3", 1.0, 1.0, "the cost model's own chip (Atlas 300I Pro, 300V Pro, 300I Duo per chip)"),
    "910B4": Device(
        "910B4",
        4.0,
        1.0,
        "assumed: FP16 peak 280 TFLOPS against the 310P3's 70 (Atlas 800I A2 data sheets), per-call time unchanged",
    ),
}


# CPU per page with every core busy / on an idle machine, minus 1: +12% to +16% on the 2-core development VM
# (the executor routes' CPU per image against the serial route's in the runs of 2026-12-01 at load 1-4)
CONTENTION = 0.14


@dataclass(frozen=True)
class Host:
    """A machine to plan for."""

    name: str
    cores: int
    npus: int
    device: str
    cpu_speed: float
    why: str


HOSTS: Dict[str, Host] = {
    "atlas-300i-pro-x4": Host(
        "4 x Atlas 300I Pro, 32 cores", 32, 4, "310P3", 1.0, "assumed: x86 cores as fast as the benchmark machine's"
    ),
    "atlas-800i-a2": Host(
        "Atlas 800I A2, 8 x 910B4, 192 cores",
        192,
        8,
        "910B4",
        0.5,
        "assumed: 4 x Kunpeng 920 (48 cores each), a core at half the benchmark machine's speed on this pipeline",
    ),
}


@dataclass
class PageCost:
    """What one page costs (ms)."""

    host_ms: float  # host CPU per page of the pipeline, no simulator's work
    executor_ms: float  # host CPU the executor adds per page
    device_base_ms: float  # device time per page: the per-call part
    device_elem_ms: float  # device time per page: the per-element part
    serving_ms: float = 0.0  # CPU per request in the front process (0: no HTTP front)
    source: str = ""
    transfer_ms: float = 0.0  # device time per page: the copies host to device and back

    def device_ms(self, device: Device) -> float:
        return self.device_base_ms * device.base_scale + self.device_elem_ms / device.compute_scale + self.transfer_ms

    def cpu_ms(self, cpu_speed: float) -> float:
        return (self.host_ms + self.executor_ms + self.serving_ms) / cpu_speed


@dataclass
class Prediction:
    host: str
    cores: float
    npus: int
    device: str
    workers_per_npu: int
    pages_per_s: float
    bottleneck: str  # device, host CPU, serving
    device_util: float  # 0..1, of the NPUs
    cpu_util: float  # 0..1, of the cores
    serving_util: float  # 0..1, of the front processes (0 without one)
    cpu_ms: float  # per page, on the target's cores
    device_ms: float  # per page, on the target's chip
    assumptions: List[str] = field(default_factory=list)


def page_cost(report: BenchmarkReport, serving_ms: float = 0.0) -> PageCost:
    """A page's costs from a benchmark report of the simulated runtime (NPU serial route, executor routes)."""
    serial = report.serial
    if serial is None:
        raise ConfigError(f"the benchmark report has no '{SERIAL}' route ({report.skipped}): run the benchmark again")
    if not report.models:
        raise ConfigError(
            "the benchmark report has no per-model device figures (runtime "
            f"{report.runtime!r}, or an older report): run paddlex-npu benchmark --runtime simulated --json ..."
        )
    one = next((r for r in report.routes if r.engine == "om" and r.workers == 1 and r.route != SERIAL), None)
    executor = max(0.0, one.host_ms - serial.host_ms) if one else 0.0
    base = sum(m["calls"] * m["base_ms"] for m in report.models.values())
    elem = sum(m["elements"] / 1e6 * m["ms_per_melem"] for m in report.models.values())
    moved = sum(m.get("transfer_ms", 0.0) for m in report.models.values())  # reports before issue 35: none
    where = f"{report.cores} cores, {report.cpu}, load {'/'.join(f'{x:.1f}' for x in report.load_average)}"
    return PageCost(
        serial.host_ms,
        executor,
        base,
        elem,
        serving_ms,
        source=f"{report.input_desc} on {where}; {report.route_text()}",
        transfer_ms=moved,
    )


def throughput(workers: int, cpu_ms: float, cores: float, device_ms: float, contention: float = 0.0) -> float:
    """Throughput (pages/ms) of ``workers`` pages in flight over a processor-sharing CPU of ``cores``
    processors (demand ``cpu_ms`` per page on an otherwise idle CPU) and one device served in turn (demand
    ``device_ms``): the exact product-form solution of this two-station closed network (as mean value
    analysis gives it, computed from the state probabilities in logs, which stays stable at high load).
    ``contention``: how much more CPU a page costs when every core is busy (shared caches and memory
    bandwidth), growing linearly with the busy cores."""
    if cpu_ms <= 0:
        return 1.0 / device_ms if device_ms > 0 else float("inf")

    def rate(j: int) -> float:  # pages per cpu_ms with j pages on the CPU
        busy = min(j, cores)
        return busy / (1.0 + contention * (busy - 1.0) / max(cores - 1.0, 1.0))

    if device_ms <= 0:
        return rate(workers) / cpu_ms
    logs = []
    for at_device in range(workers + 1):
        at_cpu = workers - at_device
        w = at_device * math.log(device_ms) + at_cpu * math.log(cpu_ms)
        w -= sum(math.log(rate(j)) for j in range(1, at_cpu + 1))
        logs.append(w)
    top = max(logs)
    weights = [math.exp(w - top) for w in logs]
    device_busy = 1.0 - weights[0] / sum(weights)
    return device_busy / device_ms


def predict(
    cost: PageCost,
    *,
    cores: float,
    npus: int,
    device: str = "310P3",
    cpu_speed: float = 1.0,
    workers_per_npu: Optional[int] = None,
    front_processes: int = 1,
    host: str = "",
    contention: float = CONTENTION,
) -> Prediction:
    """Pages/s of ``npus`` NPUs with ``workers_per_npu`` workers each (None: the best, up to 4 x cores per NPU)
    sharing ``cores`` host cores."""
    if cores <= 0 or npus < 1 or cpu_speed <= 0 or front_processes < 1:
        raise ConfigError(
            f"cores ({cores}), npus ({npus}), cpu speed ({cpu_speed}) and front processes ({front_processes}) "
            "must be positive: give e.g. --cores 32 --npus 4"
        )
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}: give one of {', '.join(DEVICES)}")
    chip = DEVICES[device]
    cpu, dev = cost.cpu_ms(cpu_speed), cost.device_ms(chip)
    share = cores / npus
    if workers_per_npu is not None:
        ks = [workers_per_npu]
    else:
        ks = list(range(1, max(2, int(4 * share)) + 1))
    rates = {k: npus * throughput(k, cpu, share, dev, contention) * 1000.0 for k in ks}
    best = max(rates.values())
    k = min(k for k, x in rates.items() if x >= 0.97 * best)  # more workers: more memory for ~nothing
    x = rates[k]
    serving_util = 0.0
    if cost.serving_ms > 0:
        cap = front_processes * 1000.0 / (cost.serving_ms / cpu_speed)
        x = min(x, cap)
        serving_util = x / cap
    cpu_use = x * cpu / 1000.0 / cores  # at an idle machine's cost per page; contention adds to it as cores fill
    cpu_use = min(1.0, cpu_use * (1.0 + contention * cpu_use))
    utils = {"device": x * dev / 1000.0 / npus, "host CPU": cpu_use, "serving": serving_util}
    return Prediction(
        host=host,
        cores=cores,
        npus=npus,
        device=chip.name,
        workers_per_npu=k,
        pages_per_s=x,
        bottleneck=max(utils, key=lambda u: utils[u]),
        device_util=utils["device"],
        cpu_util=utils["host CPU"],
        serving_util=serving_util,
        cpu_ms=cpu,
        device_ms=dev,
        assumptions=_assumptions(cost, chip, cpu, cpu_speed, contention),
    )


def _assumptions(cost: PageCost, chip: Any, cpu: float, cpu_speed: float, contention: float) -> List[str]:
    """What a prediction rests on, in words (printed under it)."""
    return [
        f"page costs measured on {cost.source}",
        f"device {chip.name}: {chip.why}",
        f"host CPU {cpu:.2f} ms per page (pipeline {cost.host_ms:.2f} + executor {cost.executor_ms:.2f}"
        + (f" + serving {cost.serving_ms:.2f}" if cost.serving_ms else "")
        + f") / cpu speed {cpu_speed:g}",
        f"CPU per page {100 * contention:.0f}% higher with every core busy (shared caches, memory bandwidth; "
        "measured on the 2-core development VM)",
        "pages like the benchmark's (same sizes, same text density: device and CPU time scale with both)",
    ]


def predict_host(cost: PageCost, name: str, contention: float = CONTENTION) -> Prediction:
    """The prediction for one of :data:`HOSTS`."""
    h = HOSTS[name]
    p = predict(
        cost, cores=h.cores, npus=h.npus, device=h.device, cpu_speed=h.cpu_speed, host=h.name, contention=contention
    )
    p.assumptions.insert(1, f"host: {h.why}")
    return p


@dataclass
class Check:
    """A prediction for this machine against a route the benchmark measured."""

    route: str
    workers: int
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def check(report: BenchmarkReport, cost: Optional[PageCost] = None, contention: float = CONTENTION) -> List[Check]:
    """The planner on the benchmark's own machine (its cores, one NPU of the cost model) against each executor
    route the benchmark measured."""
    cost = cost or page_cost(report)
    out = []
    for r in report.routes:
        if r.engine != "om" or r.route == SERIAL:
            continue
        p = predict(cost, cores=report.cores, npus=1, workers_per_npu=r.workers, contention=contention)
        out.append(Check(r.route, r.workers, r.images_per_s, p.pages_per_s))
    return out


def format_prediction(p: Prediction) -> List[str]:
    """A prediction as lines for the terminal."""
    serving = f", serving {100 * p.serving_util:.0f}%" if p.serving_util else ""
    lines = [
        f"{p.host or f'{p.cores:g} cores x {p.npus} {p.device}'}: {p.pages_per_s:.1f} pages/s with "
        f"{p.workers_per_npu} worker(s) per NPU; bottleneck: {p.bottleneck} (device {100 * p.device_util:.0f}%, "
        f"host CPU {100 * p.cpu_util:.0f}%{serving})",
        f"  per page: host CPU {p.cpu_ms:.2f} ms, device {p.device_ms:.2f} ms",
    ]
    lines += [f"  assumes: {a}" for a in p.assumptions]
    return lines


def hosts_table(
    cost: PageCost, names: Sequence[str] = tuple(HOSTS), contention: float = CONTENTION
) -> List[Prediction]:
    """The predictions for the typical hosts of :data:`HOSTS`."""
    return [predict_host(cost, n, contention) for n in names]
