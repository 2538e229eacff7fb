"""The benchmark's per-input device figures (device calls, host syncs, device time) are the simulated device's own
per-model counters over the timed run: here of a decoder step graph's calls, read back through ``_per_image``."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.perf.benchmark import BenchmarkReport, _per_image, _unit
from paddlex_npu.run import simulated
from tests.unit.run.test_sim_costs import _session, step_model


def test_per_table_figures_are_the_simulated_devices_counters(tmp_path):
    sim = _session(tmp_path, step_model, "step")
    x = np.zeros((1, 4), dtype=np.float32)
    sim.infer([np.array([1], dtype=np.int64), x], mode="static")  # warm-up (records the outputs)
    before = simulated.model_stats()
    for n in (2, 3, 4, 5, 6, 7):  # two "tables" of three decoder steps each
        sim.infer([np.array([n], dtype=np.int64), x], mode="static")
    report = BenchmarkReport("simulated", 2, "cpu", "3.7.2", 2, 1)
    report.models, report.unit = _per_image(before, simulated.model_stats(), 2), "table"
    got = report.device_calls()
    assert got["calls"] == 3 and got["host_syncs"] == 3  # one If a step, on the hybrid executor
    assert got["device_ms"] == pytest.approx(3 * 0.484)  # 74 us of buffers + 10 us of sync + 400 us of AI CPU
    assert got["buffer_ms"] == pytest.approx(3 * 0.074) and got["aicpu_ms"] == pytest.approx(3 * 0.4)
    line = report.device_calls_line()  # the last of summary_lines, printed by `benchmark`
    assert line.startswith("per table on the simulated device: 3.0 device calls, 3.0 host syncs, 1.45 ms device")
    assert "step 3.0 calls x 8 buffers, 3.0 host syncs, 4 AI CPU nodes a call (hybrid executor)" in line
    assert BenchmarkReport.from_dict(report.as_dict()).device_calls() == got
    assert "per buffer a malloc (1 us), a synchronous copy (10 us)" in report.cost_model_text()


def test_the_unit_of_a_table_pipeline_is_a_table():
    assert _unit({"pipeline_name": "table_recognition"}) == "table"
    assert _unit({"pipeline_name": "OCR"}) == _unit("OCR") == "image"
