"""The serve load benchmark (``paddlex-npu benchmark --serve``) on a tiny setting, so it keeps working: real
servers started and stopped by it, real HTTP load, figures printed and written. No timing assertions."""

from __future__ import annotations

import json

import pytest

from paddlex_npu import cli
from paddlex_npu.perf.serve_load import LoadPlan, parse_servers, request_for, targets

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")


def test_benchmark_serve_runs_every_kind_of_server(tmp_path, capsys):
    out = tmp_path / "figures.json"
    argv = [
        "benchmark",
        "--serve",
        "--servers",
        "triton-batching,serve-1,paddlex",
        "--concurrency",
        "2",
        "--rounds",
        "2",
    ]
    assert (
        cli.main(
            argv + ["--seconds", "0.5", "--warmup", "0.5", "--json", str(out), "--workdir", str(tmp_path / "work")]
        )
        == 0
    )
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    points = {(p["server"].split(",")[0], p["model"]) for p in figures["points"]}
    assert points == {
        ("Triton", "text_recognition"),
        ("Triton", "ocr"),
        ("serve K=1", "ocr"),
        ("PaddleX basic serving", "ocr"),
    }, points
    for p in figures["points"]:
        assert p["requests"] > 0 and p["failed"] == 0 and p["first_failure"] == "", p
        assert p["server_cpu_ms"] > 0 and p["client_cpu_ms"] > 0, p  # the server's process tree was measured
        assert p["unseen"] >= 0  # counted; not asserted 0: on so short a warm-up a batch size may first show later
        assert len(p["rounds_requests_per_s"]) == 2 and p["requests_per_s"] == min(p["rounds_requests_per_s"])
        if p["server"].startswith("Triton"):  # from Triton's statistics API
            assert p["batch_mean"] >= 1 and p["compute_ms"] > 0, p
    assert figures["runtime"] == "simulated" and figures["targets"]["failed"] == 0
    assert (tmp_path / "work" / "sim-store").is_dir() and len(list((tmp_path / "work").glob("server*.log"))) == 3
    assert "req/s" in printed and "PaddleX basic serving" in printed and "target" not in printed  # ours, not theirs
    assert "rounds (median kept)" in printed and "serve K=1 / PaddleX basic serving" in printed


def test_plan_and_requests():
    assert parse_servers("triton-batching,serve-2,paddlex") == {
        "serve_workers": [2],
        "paddlex_basic": True,
        "triton_batching": [True],
    }
    for bad in ("serve-0", "gpu"):
        with pytest.raises(ValueError, match=f"unknown server '{bad}': triton-batching"):
            parse_servers(bad)
    path, body, check = request_for("triton", "text_recognition", {"file": "x"})
    assert path == "/v2/models/text_recognition/infer"
    assert json.loads(json.loads(body)["inputs"][0]["data"][0]) == {"file": "x"}
    ok = json.dumps({"outputs": [{"data": [json.dumps({"errorCode": 0})]}]}).encode()
    assert check(200, ok) is None and "HTTP 400" in check(400, b"bad")
    with pytest.raises(ValueError, match=r"paddlex serving answers the pipeline \(ocr\), not text_recognition"):
        request_for("paddlex", "text_recognition", {})
    assert LoadPlan().concurrency == (1, 4, 16) and targets.__doc__
