"""Throughput of a PaddleX pipeline (or one model folder) by route, side by side in one run: the NPU route with
the executor's K workers, the NPU route serial (in-process), and PaddleX's own CPU engines (``onnxruntime`` on
3.5+, ``paddle_static`` where the model folders hold Paddle files).

Every route first runs the inputs once (warm-up, and the recording pass of the simulated device; excluded), then
is timed over ``repeat`` passes (an executor route over more where that gives a worker fewer than
:data:`INPUTS_PER_WORKER` inputs). With ``rounds`` > 1 the NPU routes are timed that many times, interleaved (serial,
then each executor, then again), and each route reports its median round: a slow spell of a shared machine falls
on every route alike instead of on whichever ran then (``rounds_images_per_s`` keeps every round's figure).
Per route: images/s, latency percentiles, CPU use, and per-image stage times
(pre-processing / model / post-processing inside the predictors, the rest of the pipeline; the model time of
the NPU route holds the simulated device time). A route that cannot run here is recorded in ``skipped`` with
its reason, and the others still run. Returns figures; printing and drawing are the CLI's.

The bound is ``min(1 / device time, cores / host CPU time)`` per image, both from the NPU serial route, where
the host CPU time leaves out the simulated device's own work (``sim_overhead_ms``: its digest and mapping of
replayed outputs, which a real device does not spend): what the pipeline itself needs of the host. The
executor's workers return a one-number summary of each result (:func:`result_summary`), as the serial route
discards its results: both routes do the same work per image.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from .. import envs
from ..errors import ConfigError, PaddlexNpuError
from ..paddlex.parallel import ParallelExecutor
from ..paddlex.patcher import paddlex_version
from ..paddlex.pipelines import cpu_route, create_on_device
from ..paddlex.stages import instrument
from ..run import simulated
from .source_models import describe, reductions, source_config

SERIAL = "NPU serial"
T = TypeVar("T")
Progress = Callable[[str, int], None]
_SIM_KEYS = ("device_ms", "replay_ms", "computed", "transfer_ms")
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
    sim_overhead_ms: float  # the simulation's own host CPU time (digest, mapping replayed outputs)
    computed: int  # simulated calls on inputs never recorded (should be 0)
    errors: int = 0
    dispatch_ms: float = 0.0  # executor routes: the parent's CPU per image (dispatch, pipes, results), in cpu_ms
    rounds_images_per_s: List[float] = field(default_factory=list)  # every round's images/s (this is the median)
    transfer_ms: float = 0.0  # of device_ms: the simulated copies host to device and back
    # in-process routes: CPU of the calling thread outside model calls, per image (pre + post + rest as CPU time;
    # for PaddleX's engines, their host work without the engine's own threads)
    host_thread_ms: float = 0.0
    # in-process routes: all the calling thread's CPU per image, model calls included (the NPU route's host work
    # measured as PaddleX's is: its own thread, without the helper threads of OpenCV and the like)
    thread_ms: float = 0.0

    @property
    def per_core(self) -> float:
        """Images/s per busy host core: 1000 / CPU ms per image (what a core gives this route when it is busy)."""
        return 1000.0 / self.cpu_ms if self.cpu_ms > 0 else 0.0

    @property
    def host_ms(self) -> float:
        """CPU per image without the simulated device's own work: what the route needs of the host."""
        return max(0.0, self.cpu_ms - self.sim_overhead_ms)


@dataclass
class BenchmarkReport:
    runtime: str
    cores: int
    cpu: str
    paddlex: str
    inputs: int
    repeat: int
    routes: List[RouteFigures] = field(default_factory=list)
    rounds: int = 1  # interleaved timed rounds of the NPU routes; each route reports its median round
    skipped: Dict[str, str] = field(default_factory=dict)  # route -> why it did not run
    load_average: List[float] = field(default_factory=list)  # the machine's 1-minute load, at start and at end
    input_desc: str = ""  # what the inputs are (count, kind, pixel sizes)
    # per model of the NPU serial route: task, cost model (base_ms, ms_per_melem), calls / elements /
    # device_ms per image (simulated runtime only; empty on the others)
    models: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # per CTC recognition model of the NPU route: whether its package reduces the CTC output on the device (as
    # `convert` builds it by default) or not (`convert --no-reduce`); reports before 2026-12-05 lack it
    reduced: Dict[str, bool] = field(default_factory=dict)
    route_recorded: bool = False  # whether ``reduced`` was recorded (False: a report from before 2026-12-05)
    # the models PaddleX's CPU engines ran without the package's reduction: the models the packages were built from
    cpu_unreduced: List[str] = field(default_factory=list)
    # per CPU route: the NPU route's results against its on the warm-up pass: pages, pages with equal texts, the
    # largest box corner difference in pixels (inf: a page with another box count)
    agreement: Dict[str, Dict[str, float]] = field(default_factory=dict)
    unit: str = "image"  # what one input is: "table" for table recognition (the per-input device figures say so)

    @property
    def busy(self) -> bool:
        """Whether other work shared the cores (the load before the run above half the core count): throughput is
        then a lower bound. The load at the end is not used: the benchmark's own workers make it."""
        return bool(self.load_average) and self.load_average[0] > self.cores / 2

    @property
    def serial(self) -> Optional[RouteFigures]:
        """The NPU serial route (None when it could not run: see ``skipped``)."""
        return next((r for r in self.routes if r.route == SERIAL), None)

    def bound(self) -> Optional[float]:
        """min(1 / device time, cores / host CPU time) per image, from the NPU serial route's figures; the host
        CPU time leaves out the simulated device's own work. None without a serial route."""
        s = self.serial
        if s is None:
            return None
        device = 1000.0 / s.device_ms if s.device_ms > 0 else float("inf")
        return min(device, self.cores * 1000.0 / max(s.host_ms, 1e-9))

    def bound_limit(self) -> str:
        """What sets the bound: ``device`` or ``host CPU``."""
        s = self.serial
        if s is None or s.device_ms <= 0:
            return "host CPU"
        return "device" if 1000.0 / s.device_ms <= self.cores * 1000.0 / max(s.host_ms, 1e-9) else "host CPU"

    def route_text(self) -> str:
        """What the NPU route ran and what PaddleX's engines were given, in one line."""
        if not self.route_recorded:
            return "NPU route not recorded (reports before 2026-12-05 ran the bundled recogniser unreduced)"
        cpu = ""
        if self.cpu_unreduced:
            cpu = (
                f"; PaddleX's CPU engines ran the models the packages were built from ({', '.join(self.cpu_unreduced)} "
                "without what convert added on the device)"
            )
        elif any(r.engine != "om" for r in self.routes):
            cpu = "; PaddleX's CPU engines ran the pipeline's own models (nothing convert added to take off)"
        return "NPU route: " + describe(self.reduced) + cpu

    def host_ratio(self) -> Optional[Tuple[float, float]]:
        """(the NPU route's host CPU per image, PaddleX's onnxruntime route's own host work per image), both as CPU
        time of the thread that ran the pipeline: PaddleX's outside its engine's calls (pre + post + rest), the
        route's with its runner and session calls but without the simulator's own work (reports before
        2026-12-06 give the route's process CPU here); None without both routes. The issue's measure of the
        route's host cost; the bound and the planner take the process CPU (:attr:`RouteFigures.host_ms`)."""
        s = self.serial
        ort = next((r for r in self.routes if r.engine == "onnxruntime"), None)
        if s is None or ort is None or ort.host_thread_ms <= 0:
            return None
        route = max(0.0, s.thread_ms - s.sim_overhead_ms) if s.thread_ms > 0 else s.host_ms
        return route, ort.host_thread_ms

    def pcie_per_image(self) -> Dict[str, float]:
        """Bytes across PCIe per image on the simulated device, host to device and back, all models summed
        (empty without the simulated runtime's per-model figures)."""
        if not self.models:
            return {}
        return {k: float(sum(m.get(k, 0.0) for m in self.models.values())) for k in ("bytes_in", "bytes_out")}

    def device_calls(self) -> Dict[str, Any]:
        """Per input on the simulated device, all models summed: ``calls``, ``host_syncs``, ``device_ms`` and its
        parts ``buffer_ms`` (ais_bench's per-buffer mallocs, copy launches, frees), ``sync_ms``, ``aicpu_ms``;
        empty without per-model figures that count host syncs (other runtimes, reports before 2026-12-07)."""
        models = [m for m in self.models.values() if "host_syncs" in m]
        if not models:
            return {}
        keys = ("calls", "host_syncs", "device_ms", "buffer_ms", "sync_ms", "aicpu_ms")
        return {k: float(sum(m.get(k, 0.0) for m in models)) for k in keys}

    def device_calls_line(self) -> Optional[str]:
        """:meth:`device_calls` in words, with each model's share (None without them)."""
        total = self.device_calls()
        if not total:
            return None
        per_model = "; ".join(
            f"{name} {m['calls']:.1f} calls x {m.get('buffers', 0):.0f} buffers, {m['host_syncs']:.1f} host syncs, "
            f"{m.get('aicpu_nodes', 0):.0f} AI CPU nodes a call{' (hybrid executor)' if m.get('hybrid') else ''}, "
            f"{m['device_ms']:.2f} ms"
            for name, m in sorted(self.models.items())
            if m.get("calls")
        )
        return (
            f"per {self.unit} on the simulated device: {total['calls']:.1f} device calls, {total['host_syncs']:.1f} "
            f"host syncs, {total['device_ms']:.2f} ms device time (of it ais_bench's per-buffer mallocs, copies and "
            f"frees {total['buffer_ms']:.2f} ms, host syncs {total['sync_ms']:.2f} ms, AI CPU {total['aicpu_ms']:.2f} "
            f"ms); {per_model}"
        )

    def cost_model_text(self) -> str:
        """The device cost model of each model that ran, in one line."""
        if not self.models:
            return f"device times from the {self.runtime} runtime (no cost model)"
        parts = [
            f"{name} {m['base_ms']:.3f} ms + {m['ms_per_melem']:.3f} ms/Melem, {m.get('bytes_out', 0) / 1e3:.1f} kB "
            f"out and {m.get('transfer_ms', 0):.2f} ms of copies per image"
            for name, m in sorted(self.models.items())
        ]
        gbps = max((m.get("pcie_gbps", 0.0) for m in self.models.values()), default=0.0)
        ran = [m for m in self.models.values() if m.get("calls")] or list(self.models.values())
        first = ran[0]  # the per-buffer figures are the run's: every model's are the same
        per_buffer = ""
        if "memcpy_us" in first:
            per_buffer = (
                f" + per buffer a malloc ({first['malloc_us']:g} us), a synchronous copy ({first['memcpy_us']:g} us) "
                f"and a free ({first['free_us']:g} us), per host sync {first['memcpy_us']:g} us, per AI CPU node "
                f"{first['aicpu_us']:g} us"
            )
        return (
            "simulated device times, cost model base + rate x input elements (310P3 figures) + bytes in and out at "
            f"{gbps:g} GB/s{per_buffer}: " + "; ".join(parts)
        )

    def summary_lines(self) -> List[str]:
        """The figures' conclusions in words: the bound and what sets it, the best NPU route against it and
        against serial, the simulator's share of the CPU (printed by the CLI, drawn by the chart)."""
        s, bound = self.serial, self.bound()
        if s is None or bound is None:
            return ["no bound: the NPU serial route did not run (see skipped)"]
        lines = [
            f"bound {bound:.2f} img/s = min(1/device {s.device_ms:.2f} ms, {self.cores} cores / host CPU "
            f"{s.host_ms:.2f} ms) per image, set by the {self.bound_limit()}; host CPU from the serial route without "
            f"the simulator's own work ({s.sim_overhead_ms:.2f} ms per image)"
        ]
        ratio = self.host_ratio()
        if ratio is not None and ratio[1] > 0:
            lines.append(
                f"NPU route's host CPU {ratio[0]:.2f} ms per image = {ratio[0] / ratio[1]:.2f}x PaddleX onnxruntime's "
                f"own host work (pre + post + rest: {ratio[1]:.2f} ms of CPU outside its engine) (target <= 0.35); "
                f"both the CPU of the pipeline's thread (the route's process, helper threads and all: "
                f"{s.host_ms:.2f} ms)"
            )
        for route, a in self.agreement.items():
            lines.append(
                f"results against {route}: texts equal on {a['texts_equal']:.0f} of {a['pages']:.0f} pages, boxes "
                f"within {a['max_box_px']:.2f} px (target: every page, <= 1 px)"
            )
        share = s.sim_overhead_ms / s.cpu_ms if s.cpu_ms > 0 else 0.0
        lines.append(
            f"simulated device's own host work: {s.sim_overhead_ms:.2f} ms of {s.cpu_ms:.2f} ms CPU per image = "
            f"{100 * share:.1f}% (target <= 5%)"
        )
        npu = [r for r in self.routes if r.engine == "om" and r.route != SERIAL]
        if npu:
            best = max(npu, key=lambda r: r.images_per_s)
            lines.append(
                f"best executor route: {best.route}, {best.images_per_s:.2f} img/s = "
                f"{100 * best.images_per_s / bound:.0f}% of the bound (target >= 90%), "
                f"{best.images_per_s / s.images_per_s:.2f}x serial (target >= 1.8); cores busy "
                f"{best.cpu_percent:.0f}%, executor parent {best.dispatch_ms:.2f} ms CPU per image"
            )
            if len(best.rounds_images_per_s) > 1:
                lines.append(
                    f"median of {len(best.rounds_images_per_s)} interleaved rounds; the rounds' img/s: serial "
                    f"{_spread(s.rounds_images_per_s)}, {best.route} {_spread(best.rounds_images_per_s)}"
                )
        calls = self.device_calls_line()
        if calls:
            lines.append(calls)
        return lines

    def as_dict(self) -> Dict[str, Any]:
        routes = [{**asdict(r), "host_ms": r.host_ms, "per_core": r.per_core} for r in self.routes]
        return {
            **asdict(self),
            "routes": routes,
            "bound_images_per_s": self.bound(),
            "bound_limit": self.bound_limit(),
            "cost_model": self.cost_model_text(),
            "route_text": self.route_text(),
            "pcie_bytes_per_image": self.pcie_per_image(),
            "device_calls_per_input": self.device_calls(),
            "host_ms_vs_paddlex": self.host_ratio(),
            "summary": self.summary_lines(),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> BenchmarkReport:
        """A report read back from :meth:`as_dict`'s JSON (the capacity planner's input)."""
        names = set(cls.__dataclass_fields__)
        route_names = set(RouteFigures.__dataclass_fields__)
        report = cls(**{k: v for k, v in data.items() if k in names and k != "routes"})
        report.routes = [RouteFigures(**{k: v for k, v in r.items() if k in route_names}) for r in data["routes"]]
        return report


def _spread(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.1f}" for v in values)


def result_summary(result: Any) -> int:
    """What an executor worker returns for one PaddleX result in the benchmark: the number of texts (or of
    items), so that the executor does the serial route's work and no result conversion or pickling."""
    for key in ("rec_texts", "boxes"):
        try:
            return len(result[key])
        except (KeyError, TypeError):
            continue
    return 1


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
        transfer_ms=t.get("sim_transfer_ms", 0.0) / n,
    )


def warmed(pipeline: Any, inputs: Sequence[str], keep: Optional[List[Any]] = None) -> Any:
    """Instrument ``pipeline`` (its stage clock is returned) and run ``inputs`` once through it, untimed;
    ``keep``: a list that gets each input's :func:`reading`."""
    clock = instrument(pipeline)
    for x in inputs:
        results = list(pipeline.predict(x))
        if keep is not None:
            keep.append([reading(r) for r in results])
    return clock


def reading(result: Any) -> Optional[Tuple[List[str], np.ndarray]]:
    """A result's texts and boxes: an OCR result's texts and boxes (``rec_polys``, else ``dt_polys``); a document
    result's (table recognition, layout parsing, PP-StructureV3) page OCR, followed by its tables' HTML and its
    layout blocks as texts; None for other results."""
    try:
        ocr = result["overall_ocr_res"]
    except (KeyError, TypeError):
        ocr = result
    try:
        texts = [str(t) for t in ocr["rec_texts"]]
    except (KeyError, TypeError):
        return None
    polys = ocr.get("rec_polys") if hasattr(ocr, "get") else None
    if ocr is not result:
        texts += [str(table["pred_html"]) for table in result.get("table_res_list") or []]
        texts += [_block_text(b) for b in result.get("parsing_res_list") or []]
    return texts, np.asarray(polys if polys is not None else [], dtype=np.float64)


def _block_text(block: Any) -> str:
    """A layout block as text: ``label: content`` (layout_parsing's dicts, PP-StructureV3's ``LayoutBlock``)."""
    if isinstance(block, dict):
        return f"{block.get('block_label')}: {block.get('block_content')}"
    return f"{getattr(block, 'label', None)}: {getattr(block, 'content', None)}"


def agreement(ours: Sequence[Any], theirs: Sequence[Any]) -> Dict[str, float]:
    """Pages, pages whose texts are equal, and the largest box corner difference (px) between two routes'
    readings of the same inputs (inf where a page's box counts differ)."""
    pages, equal, worst = 0, 0, 0.0
    for a_page, b_page in zip(ours, theirs):
        for a, b in zip(a_page, b_page):
            if a is None or b is None:
                continue
            pages += 1
            equal += a[0] == b[0]
            same = a[1].shape == b[1].shape
            diff = float(np.abs(a[1] - b[1]).max()) if same and a[1].size else (0.0 if same else float("inf"))
            worst = max(worst, diff)
    return {"pages": pages, "texts_equal": equal, "max_box_px": worst}


def _in_process(
    route: str,
    engine: str,
    pipeline: Any,
    inputs: Sequence[str],
    repeat: int,
    progress: Progress,
    models: Optional[Dict[str, Any]] = None,
    clock: Any = None,
    keep: Optional[List[Any]] = None,
) -> RouteFigures:
    """One in-process pipeline, one input at a time (``clock``: its stage clock once :func:`warmed`; ``keep``: as
    :func:`warmed`'s)."""
    if clock is None:  # the first round: instrument, then warm up (and record, on the simulated device)
        clock = warmed(pipeline, inputs, keep)
    lat: List[float] = []
    models0, m0, th0 = simulated.model_stats(), clock.model_thread_cpu, time.thread_time()
    st0, s0, c0, t0 = clock.totals(), simulated.stats(), time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for x in inputs:
            t = time.perf_counter()
            list(pipeline.predict(x))
            lat.append(time.perf_counter() - t)
            progress(route, 1)
    wall, cpu, s1, st1 = time.perf_counter() - t0, time.process_time() - c0, simulated.stats(), clock.totals()
    thread = time.thread_time() - th0
    timing = {
        "cpu_seconds": cpu,
        **{f"sim_{k}": s1[k] - s0[k] for k in _SIM_KEYS},
        **{k: st1[k] - st0[k] for k in _STAGE_KEYS},
    }
    host_thread = thread - (clock.model_thread_cpu - m0)
    if models is not None:
        models.update(_per_image(models0, simulated.model_stats(), len(lat)))
    figures = _figures(route, engine, 1, wall, lat, timing, 0)
    figures.host_thread_ms = max(0.0, host_thread) * 1000.0 / max(len(lat), 1)
    figures.thread_ms = thread * 1000.0 / max(len(lat), 1)
    return figures


# An executor round gives every worker at least this many inputs: its throughput is then that of a steady stream,
# not of its start and its last wave (16 inputs over 6 workers measured 102 pages/s where 48 measured 120).
INPUTS_PER_WORKER = 8


def executor_passes(repeat: int, inputs: int, workers: int) -> int:
    """Passes over ``inputs`` in one executor round: ``repeat``, or more for :data:`INPUTS_PER_WORKER` each."""
    return max(repeat, math.ceil(INPUTS_PER_WORKER * workers / max(inputs, 1)))


def _executor(
    ex: ParallelExecutor, inputs: Sequence[str], repeat: int, workers: int, progress: Progress, warm: bool = True
) -> RouteFigures:
    route = f"NPU executor, {workers} worker{'s' if workers > 1 else ''}"
    for _ in ex.map(list(inputs) * workers if warm else []):  # warm-up: every worker sees inputs
        pass
    repeat = executor_passes(repeat, len(inputs), workers)
    lat: List[float] = []
    totals = dict.fromkeys(("cpu_seconds", *(f"sim_{k}" for k in _SIM_KEYS), *_STAGE_KEYS), 0.0)
    errors, c0, t0 = 0, time.process_time(), time.perf_counter()
    for r in ex.map(list(inputs) * repeat):
        errors += not r.ok
        lat.append(r.timing.get("seconds", 0.0))
        for k in totals:
            totals[k] += r.timing.get(k, 0.0)
        progress(route, 1)
    wall = time.perf_counter() - t0
    parent = time.process_time() - c0
    totals["cpu_seconds"] += parent  # the dispatcher's own CPU
    figures = _figures(route, "om", workers, wall, lat, totals, errors)
    figures.dispatch_ms = parent * 1000.0 / max(len(lat), 1)
    return figures


def _why(exc: BaseException) -> str:
    """A route's failure in one line for ``skipped``: the exception's type and first line, and where."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [""]
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:  # e.g. a worker's traceback follows: its last line is the cause
        first = f"{first} {lines[-1]}"
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {Path(where[0].filename).name}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {first}{at}"


def _unit(pipeline: Union[str, Dict[str, Any]]) -> str:
    """What one input of ``pipeline`` is, for the per-input figures: a table for table recognition, else an image."""
    name = pipeline.get("pipeline_name") if isinstance(pipeline, dict) else Path(str(pipeline)).stem
    return "table" if name == "table_recognition" else "image"


def _describe_inputs(inputs: Sequence[str]) -> str:
    """The inputs in words: their count, kind and pixel sizes (images only)."""
    from PIL import Image  # PaddleX's dependency: the benchmark runs PaddleX

    sizes, other = [], 0
    for path in inputs:
        try:
            with Image.open(path) as im:
                sizes.append(im.size)
        except (OSError, ValueError):
            other += 1
    text = f"{len(inputs)} inputs"
    if sizes:
        ws, hs = [w for w, _ in sizes], [h for _, h in sizes]
        w = f"{min(ws)}" if min(ws) == max(ws) else f"{min(ws)}-{max(ws)}"
        h = f"{min(hs)}" if min(hs) == max(hs) else f"{min(hs)}-{max(hs)}"
        text += f", {len(sizes)} images of {w} x {h} px"
    if other:
        text += f", {other} other files"
    return text


def _per_image(before: Dict[str, Dict[str, Any]], after: Dict[str, Dict[str, Any]], n: int) -> Dict[str, Any]:
    """Each model's cost model and its calls, input elements and device ms per image over a route's timed run."""
    out = {}
    for name, m in after.items():
        b = before.get(name, {})
        out[name] = {
            **{k: m[k] for k in _MODEL_FIGURES if k in m},
            **{k: (m.get(k, 0) - b.get(k, 0)) / max(n, 1) for k in _MODEL_SUMS},
        }
    return out


# what a model is (its cost model, its graph's structure per call) and what its calls add up to, per input
_MODEL_FIGURES = ("task", "base_ms", "ms_per_melem", "pcie_gbps", "malloc_us", "free_us", "memcpy_us", "aicpu_us")
_MODEL_FIGURES += ("hybrid", "if_nodes", "aicpu_nodes", "buffers")
_MODEL_SUMS = ("calls", "elements", "device_ms", "transfer_ms", "bytes_in", "bytes_out", "host_syncs", "mallocs")
_MODEL_SUMS += ("buffer_ms", "sync_ms", "aicpu_ms")


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
    report: BenchmarkReport,
    cpu_pipelines: Dict[str, Any],
    inputs: Sequence[str],
    repeat: int,
    progress: Progress,
    npu_readings: Sequence[Any] = (),
) -> None:
    """PaddleX's own CPU engines, on the models the packages were built from (a reduced package's reduction taken
    off, :mod:`.source_models`); a route that does not apply is recorded in ``report.skipped`` with the reason."""
    with tempfile.TemporaryDirectory(prefix="paddlex-npu-sources-") as work:
        for i, (engine, pipeline) in enumerate(cpu_pipelines.items()):
            theirs: List[Any] = []
            _cpu_route(report, engine, pipeline, Path(work) / str(i), inputs, repeat, progress, theirs)
            if npu_readings and theirs:
                report.agreement[f"PaddleX {engine} (CPU)"] = agreement(npu_readings, theirs)


def _cpu_route(
    report: BenchmarkReport,
    engine: str,
    pipeline: Any,
    work: Path,
    inputs: Sequence[str],
    repeat: int,
    progress: Progress,
    keep: List[Any],
) -> None:
    route = f"PaddleX {engine} (CPU)"
    try:
        config, unreduced = source_config(pipeline, work)
        report.cpu_unreduced = sorted(set(report.cpu_unreduced) | set(unreduced))
        created = cpu_route(config, engine)
    except Exception as exc:  # this PaddleX, these folders or this environment lack it; a pipeline PaddleX refuses
        expected = isinstance(exc, (PaddlexNpuError, ImportError))
        report.skipped[route] = str(exc) if expected else _why(exc)
        progress(route, repeat * len(inputs))
        return
    try:
        report.routes.append(_in_process(route, engine, created, inputs, repeat, progress, keep=keep))
    except Exception as exc:  # this route fails here: the others' figures are kept
        report.skipped[route] = _why(exc)
    finally:
        _close(created)


def run_benchmark(
    pipeline: Union[str, Dict[str, Any]],
    inputs: Sequence[str],
    *,
    workers: Sequence[int] = (1, 2),
    repeat: int = 3,
    rounds: int = 1,
    runtime: str = "simulated",
    create_kwargs: Optional[Dict[str, Any]] = None,
    env: Optional[Dict[str, str]] = None,
    cpu_pipelines: Optional[Dict[str, Union[str, Dict[str, Any]]]] = None,
    progress: Optional[Progress] = None,
) -> BenchmarkReport:
    """The NPU route serial, the executor with each worker count in ``workers`` (one device), ``rounds`` times
    interleaved (each route's median round is kept), then each engine of ``cpu_pipelines`` (``{"onnxruntime":
    config, "paddle_static": config}``: the same pipeline over model folders that hold that engine's files), on
    ``inputs``. ``progress(route, n)`` is called as inputs finish."""
    if rounds < 1:
        raise ConfigError(f"rounds must be >= 1, got {rounds}")
    progress = progress or (lambda route, n: None)
    os.environ.update(env or {})
    os.environ[envs.RUNTIME.name] = runtime
    report = BenchmarkReport(runtime, os.cpu_count() or 1, _cpu_name(), paddlex_version() or "", len(inputs), repeat)
    report.rounds = rounds
    report.input_desc = _describe_inputs(inputs)
    report.unit = _unit(pipeline)
    report.load_average.append(os.getloadavg()[0])
    measured: Dict[str, List[RouteFigures]] = {}
    npu: List[Any] = []  # the serial route's readings of the inputs, to compare with PaddleX's engines
    with _interruptible(report), contextlib.ExitStack() as stack:  # Ctrl-C: the routes that finished are kept
        serial, clock = _open_serial(report, stack, pipeline, inputs, create_kwargs, rounds * repeat, progress, npu)
        run = _ExecutorRun(pipeline, create_kwargs, runtime, stack, {})
        for r in range(rounds):
            if SERIAL not in report.skipped:
                try:
                    models: Dict[str, Any] = {}
                    measured.setdefault(SERIAL, []).append(
                        _in_process(SERIAL, "om", serial, inputs, repeat, progress, models, clock)
                    )
                    report.models = report.models or models
                except Exception as exc:
                    report.skipped[SERIAL] = _why(exc)
            for k in workers:
                _executor_round(report, measured, run, k, inputs, repeat, progress, warm=r == 0)
    for route, figures in measured.items():
        if route not in report.skipped and figures:  # (empty: a route Ctrl-C cut short)
            median = median_round(figures, lambda f: f.images_per_s)
            median.rounds_images_per_s = [f.images_per_s for f in figures]
            report.routes.append(median)
    if INTERRUPTED not in report.skipped:
        with _interruptible(report):
            _cpu_routes(report, cpu_pipelines or {}, inputs, repeat, progress, npu)
    report.load_average.append(os.getloadavg()[0])
    return report


def _open_serial(
    report: BenchmarkReport,
    stack: contextlib.ExitStack,
    pipeline: Any,
    inputs: Sequence[str],
    create_kwargs: Optional[Dict[str, Any]],
    passes: int,
    progress: Progress,
    keep: List[Any],
) -> Tuple[Any, Any]:
    """The serial route's pipeline on device 0, warmed up, and its stage clock; (None, None) with the reason in
    ``report.skipped`` when it cannot be made (e.g. runtime ais_bench without an NPU: the CPU routes still run)."""
    try:
        serial = create_on_device(pipeline, 0, create_kwargs)
        stack.callback(_close, serial)
        report.reduced, report.route_recorded = reductions(pipeline), True
        return serial, warmed(serial, inputs, keep)
    except Exception as exc:
        report.skipped[SERIAL] = _why(exc)
        progress(SERIAL, passes * len(inputs))
        return None, None


@dataclass
class _ExecutorRun:
    """What every executor route of a run shares: the pipeline, its options and the executors made so far."""

    pipeline: Any
    create_kwargs: Optional[Dict[str, Any]]
    runtime: str
    stack: contextlib.ExitStack
    executors: Dict[int, ParallelExecutor]

    def executor(self, workers: int) -> ParallelExecutor:
        if workers not in self.executors:
            self.executors[workers] = self.stack.enter_context(
                ParallelExecutor(
                    self.pipeline,
                    workers_per_device=workers,
                    create_kwargs=self.create_kwargs,
                    runtime=self.runtime,
                    stages=True,
                    transform=result_summary,
                )
            )
        return self.executors[workers]


def _executor_round(
    report: BenchmarkReport,
    measured: Dict[str, List[RouteFigures]],
    run: _ExecutorRun,
    workers: int,
    inputs: Sequence[str],
    repeat: int,
    progress: Progress,
    warm: bool,
) -> None:
    """One round of the executor route with ``workers`` workers; a failure is kept in ``report.skipped``."""
    route = f"NPU executor, {workers} worker{'s' if workers > 1 else ''}"
    if route in report.skipped:
        return
    try:
        measured.setdefault(route, []).append(_executor(run.executor(workers), inputs, repeat, workers, progress, warm))
    except Exception as exc:  # e.g. workers that cannot start here: the other routes' figures are kept
        report.skipped[route] = _why(exc)
        measured.pop(route, None)


INTERRUPTED = "interrupted"  # the key of report.skipped after a Ctrl-C


@contextlib.contextmanager
def _interruptible(report: BenchmarkReport) -> Iterator[None]:
    """Ctrl-C ends the run and is recorded in ``report.skipped``; the figures of the routes that finished stay."""
    try:
        yield
    except KeyboardInterrupt:
        report.skipped[INTERRUPTED] = "Ctrl-C: the routes not listed did not finish"


def median_round(rounds: Sequence[T], rate: Callable[[T], float]) -> T:
    """The round of median ``rate`` (the lower middle one of an even count): what a route or a server point
    reports when it was timed in several rounds."""
    return sorted(rounds, key=rate)[(len(rounds) - 1) // 2]
