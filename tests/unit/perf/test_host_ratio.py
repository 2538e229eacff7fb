"""The benchmark's host-work ratio measures both routes the same way: the CPU of the thread that ran the pipeline
(PaddleX's outside its engine's calls, the route's without the simulator's own work), while the bound keeps the
route's process CPU; a report from before the route's thread CPU was recorded falls back to its process CPU."""

from __future__ import annotations

from paddlex_npu.perf.benchmark import SERIAL, BenchmarkReport, RouteFigures


def _route(route: str, engine: str, cpu_ms: float, **kw: float) -> RouteFigures:
    zero = dict.fromkeys(("seconds", "p50_ms", "p95_ms", "p99_ms", "pre_ms", "model_ms", "post_ms", "other_ms"), 1.0)
    return RouteFigures(
        route, engine, 1, 16, images_per_s=50.0, cpu_ms=cpu_ms, cpu_percent=40.0, device_ms=kw.pop("device_ms", 0.0),
        sim_overhead_ms=kw.pop("sim_overhead_ms", 0.0), computed=0, **zero, **kw,
    )  # fmt: skip


def test_the_ratio_takes_both_threads_and_the_bound_the_process():
    report = BenchmarkReport("simulated", 2, "test", "3.7.2", 8, 2)
    serial = _route(SERIAL, "om", 14.0, device_ms=6.8, sim_overhead_ms=0.5, thread_ms=12.5)
    report.routes = [serial, _route("PaddleX onnxruntime (CPU)", "onnxruntime", 900.0, host_thread_ms=30.0)]
    assert report.host_ratio() == (12.0, 30.0)  # the route's thread without the simulator's 0.5 ms
    assert serial.host_ms == 13.5 and report.bound() == min(1000 / 6.8, 2 * 1000 / 13.5)
    line = next(x for x in report.summary_lines() if x.startswith("NPU route's host CPU"))
    assert "12.00 ms per image = 0.40x" in line and "helper threads and all: 13.50 ms" in line
    serial.thread_ms = 0.0  # a report from before 2026-12-06
    assert report.host_ratio() == (13.5, 30.0)
