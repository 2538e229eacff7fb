"""The serve load benchmark (``paddlex-npu benchmark --serve``) on a tiny setting, so it keeps working: real
servers started and stopped by it, real HTTP load, figures printed and written. No timing assertions."""

from __future__ import annotations

import json

import pytest
import yaml

from paddlex_npu import cli, envs
from paddlex_npu.perf.serve_load import LoadPlan, device_traffic, ocr_packages, parse_servers, request_for, targets
from paddlex_npu.samples import assets, env

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
        "--no-reduce",
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
        traffic = figures["traffic"][p["model"]]  # --no-reduce: PP-OCRv4's 6625 classes, 4 bytes each, to the host
        assert p["bytes_to_host"] == traffic["bytes_to_host"] and p["lines_per_s"] == pytest.approx(
            p["requests_per_s"] * traffic["lines"]
        )
    assert figures["traffic"]["text_recognition"]["bytes_to_host"] % (6625 * 4) == 0
    assert figures["runtime"] == "simulated" and figures["targets"]["failed"] == 0
    assert (tmp_path / "work" / "sim-store").is_dir() and len(list((tmp_path / "work").glob("server*.log"))) == 3
    assert "req/s" in printed and "PaddleX basic serving" in printed and "target" not in printed  # ours, not theirs
    assert "simulated device, one ocr request: 12 text line(s)" in printed and "lines/s" in printed
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


CLASSES = 6625  # PP-OCRv4_mobile_rec's, the bundled recogniser's


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """device_traffic of the bundled OCR pipeline, its recogniser converted with the reduction and without."""
    env.prepare(default_runtime=False)
    work = tmp_path_factory.mktemp("traffic")
    root = assets.build_model_folders()
    page = assets.render_pages(work, 1)[0]
    line = assets.render_text_image(["Invoice total amount due 1234.56"], work / "line.png", size=28)
    run_env = {
        envs.RUNTIME.name: "simulated",
        envs.SIM_STORE.name: str(work / "store"),
        envs.SIM_LOCKS.name: str(work / "locks"),
    }
    out = {}
    for name, reduce in (("reduced", True), ("full", False)):
        packages = ocr_packages(root, work / name, assets.DET, assets.REC, reduce=reduce)
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump(assets.ocr_pipeline_config(packages)))
        out[name] = device_traffic(config, page, line, run_env)
    return out


def test_device_traffic_counts_what_the_reduction_saves(traffic):
    reduced, full = traffic["reduced"], traffic["full"]
    rec_r, rec_f = reduced["text_recognition"], full["text_recognition"]
    # one line, T steps: reduced 8 bytes a step (index and score), full 4 bytes per class a step
    assert rec_r["lines"] == rec_f["lines"] == 1 and rec_r["calls"] == rec_f["calls"] == 1
    steps = rec_r["bytes_to_host"] / 8
    assert steps == int(steps) > 0 and rec_f["bytes_to_host"] == steps * CLASSES * 4
    ocr_r, ocr_f = reduced["ocr"], full["ocr"]
    assert ocr_r["lines"] == ocr_f["lines"] == 12  # the rendered page's text lines
    assert ocr_r["calls"] == ocr_f["calls"] == 3  # detection, then recognition in batches of 6
    assert ocr_r["bytes_to_device"] == ocr_f["bytes_to_device"] > 0  # the same inputs either way
    saved = ocr_f["bytes_to_host"] - ocr_r["bytes_to_host"]  # the recognition steps of the page, (4C - 8) each
    assert saved > 0 and saved % (CLASSES * 4 - 8) == 0
    for t in (rec_r, rec_f, ocr_r, ocr_f):  # the copies at 16 GB/s, both ways, inside the device time
        assert t["copy_ms"] == pytest.approx((t["bytes_to_device"] + t["bytes_to_host"]) / 16e6)
        assert t["device_ms"] > t["copy_ms"]
    assert ocr_f["copy_ms"] - ocr_r["copy_ms"] == pytest.approx(saved / 16e6)


def test_ocr_packages_never_replace_a_folder_that_holds_files(tmp_path):
    """A --workdir of the user's may hold a packages folder: it is refused, not deleted."""
    from paddlex_npu.errors import ConfigError

    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="is not empty"):
        ocr_packages(tmp_path / "nowhere", tmp_path / "packages", "det", "rec")
    assert (tmp_path / "packages" / "mine.txt").read_text() == "keep"
