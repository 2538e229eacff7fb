"""The benchmark's report and chart read right without a run: a report with a route that could not run, and one
whose serial route failed, are drawn (the header names the models, inputs, simulated device and cost model, the
bound) and summarised, never crash."""

from __future__ import annotations

from PIL import Image

from paddlex_npu.perf.benchmark import SERIAL, BenchmarkReport, RouteFigures, _why
from paddlex_npu.perf.chart import header_text, render


def _route(route: str, workers: int, images_per_s: float, cpu_ms: float = 20.0) -> RouteFigures:
    return RouteFigures(
        route=route, engine="om", workers=workers, images=24, seconds=24 / images_per_s, images_per_s=images_per_s,
        p50_ms=30.0, p95_ms=40.0, p99_ms=45.0, cpu_ms=cpu_ms, cpu_percent=50.0, pre_ms=5.0, model_ms=9.0,
        post_ms=3.0, other_ms=8.0, device_ms=6.6, sim_overhead_ms=0.8, computed=0,
    )  # fmt: skip


def _report() -> BenchmarkReport:
    report = BenchmarkReport("simulated", 2, "AMD EPYC", "3.7.2", 8, 3, load_average=[0.4, 1.1])
    report.input_desc = "8 inputs, 8 images of 900 x 664 px"
    report.models = {
        "PP-OCRv4_mobile_det": {"task": "TextDetPredictor", "base_ms": 0.469, "ms_per_melem": 0.938, "calls": 1.0,
                                "elements": 1.8e6, "device_ms": 2.2},
        "PP-OCRv4_mobile_rec": {"task": "TextRecPredictor", "base_ms": 0.469, "ms_per_melem": 3.842, "calls": 2.0,
                                "elements": 0.9e6, "device_ms": 4.4},
    }  # fmt: skip
    report.routes = [_route(SERIAL, 1, 38.0), _route("NPU executor, 3 workers", 3, 90.0, 21.0)]
    return report


def test_the_header_says_what_ran_and_how_device_time_is_made():
    report = _report()
    text = "\n".join(header_text(report))
    assert "Models: PP-OCRv4_mobile_det, PP-OCRv4_mobile_rec" in text and "900 x 664 px" in text
    assert "SIMULATED" in text and "PP-OCRv4_mobile_rec 0.469 ms + 3.842 ms/Melem" in text and "310P3" in text
    # bound = min(1000 / 6.6, 2 * 1000 / (20.0 - 0.8)): the host CPU without the simulator's work
    assert report.bound() == 2000 / 19.2 and "set by the host CPU" in text and "0.80 ms per image" in text
    assert "load average 0.4/1.1" in text
    lines = report.summary_lines()
    assert "= 4.0% (target <= 5%)" in lines[1]
    assert "NPU executor, 3 workers, 90.00 img/s = 86% of the bound" in lines[2] and "2.37x serial" in lines[2]


def test_skipped_routes_are_drawn_with_their_reason_and_a_missing_serial_does_not_crash(tmp_path):
    report = _report()
    try:
        raise RuntimeError("workers could not start: no /dev/shm\nsecond line")
    except RuntimeError as exc:
        report.skipped["NPU executor, 2 workers"] = _why(exc)
    assert report.skipped["NPU executor, 2 workers"].startswith(
        "RuntimeError: workers could not start: no /dev/shm (at"
    )
    try:
        raise RuntimeError("a worker could not create the pipeline:\nTraceback ...\n  File x\nValueError: no model")
    except RuntimeError as exc:
        assert _why(exc).startswith("RuntimeError: a worker could not create the pipeline: ValueError: no model (at")
    image = render(report)
    assert image.size[0] == 1100 and image.size[1] > 500
    report.routes = [r for r in report.routes if r.route != SERIAL]
    report.skipped[SERIAL] = "ConfigError: the pipeline failed"
    assert report.bound() is None and report.summary_lines()[0].startswith("no bound")
    image = render(report)
    image.save(tmp_path / "c.png")
    assert Image.open(tmp_path / "c.png").size == image.size
    data = report.as_dict()
    assert data["skipped"][SERIAL] == "ConfigError: the pipeline failed" and data["bound_images_per_s"] is None
    assert BenchmarkReport.from_dict(data).skipped == report.skipped


def test_the_copies_are_their_own_stage_and_the_header_names_their_rate():
    from paddlex_npu.perf.chart import STAGES, _stage

    report = _report()
    for m in report.models.values():
        m.update(pcie_gbps=16.0, bytes_out=48e6 if m["task"] == "TextRecPredictor" else 1.6e6, transfer_ms=1.5)
    serial = report.routes[0]
    serial.transfer_ms = 3.0
    assert "transfer_ms" in [key for key, _, _ in STAGES]
    assert _stage(serial, "device_ms") == 6.6 - 3.0 and _stage(serial, "transfer_ms") == 3.0
    assert sum(_stage(serial, k) for k in ("runner_ms", "device_ms", "transfer_ms")) == serial.model_ms
    text = " ".join(header_text(report))
    assert "16 GB/s" in text and "48000.0 kB out and 1.50 ms of copies per image" in text
    render(report)  # draws
