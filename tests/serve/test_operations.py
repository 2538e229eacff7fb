"""Operating ``paddlex-npu serve`` (a real server on loopback, 2 worker processes, ``--log-format json``): its
``/metrics`` parse with prometheus-client's parser and count exactly the requests sent, with stage and device
times from the workers; every stderr line is one JSON object, one access record per request with its logId,
status, latency and error category; the pixel limit's 422 names its option; a killed worker leaves the ready
count; the metrics folder is removed at shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Tuple

import numpy as np
import pytest

import paddlex_npu
from tests.http_client import call, ocr_body
from tests.serve.conftest import free_ports, server_env, stop, wait_until

parser = pytest.importorskip("prometheus_client.parser", reason="metrics need requirements/serving.txt")

Labels = Tuple[Tuple[str, str], ...]


def _ocr(url: str, data: bytes, log_id: str):
    return call(url + "/ocr", ocr_body(data, logId=log_id))


def scrape(url: str) -> Dict[Tuple[str, Labels], float]:
    """{(sample name, sorted labels): value} of one /metrics answer, read with prometheus-client's parser."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


def _ready(url: str) -> bool:
    """``/ready`` 200: every worker has loaded its pipeline (``/health`` is 200 while they load)."""
    try:
        with urllib.request.urlopen(url + "/ready", timeout=5) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def _workers(pid: int) -> Dict[int, str]:
    """{pid: PROMETHEUS_MULTIPROC_DIR} of the server's worker processes (started with the folder in their
    environment; the server's own /proc environ is the one it was started with); multiprocessing's helpers left
    out."""
    out = {}
    for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
        cmdline = open(f"/proc/{child}/cmdline", "rb").read()
        if b"resource_tracker" in cmdline or b"forkserver" in cmdline:  # not workers: the PDF renderer's server
            continue
        with open(f"/proc/{child}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        out[int(child)] = env.get(b"PROMETHEUS_MULTIPROC_DIR", b"").decode()
    return out


@pytest.fixture(scope="module")
def server(pipeline_yaml, tmp_path_factory):
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    tmp = tmp_path_factory.mktemp("ops")
    out_log, err_log = tmp / "stdout.log", tmp / "stderr.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline_yaml), "--port", str(port)]
    cmd += ["--workers", "2", "--max-image-pixels", "4000000", "--log-format", "json"]
    with open(out_log, "wb") as out, open(err_log, "wb") as err:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=err)
    why = wait_until(lambda: _ready(url), proc, 240, err_log)
    assert why is None, why
    try:
        yield {"url": url, "proc": proc, "stderr": err_log, "workers": _workers(proc.pid)}
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def traffic(server, images):
    """Requests of each kind, sent once (3 readable pages, 2 at a time; a bad request; an image over the pixel
    limit), with the metrics before and after."""
    import cv2

    url = server["url"]
    before = scrape(url)
    data = images["english"].read_bytes()
    with ThreadPoolExecutor(2) as pool:
        good = list(pool.map(lambda i: _ocr(url, data, f"ops-{i}"), range(3)))
    bad = call(url + "/ocr", b"{}")
    huge = cv2.imencode(".png", np.full((2100, 2100, 3), 255, np.uint8))[1].tobytes()
    too_large = _ocr(url, huge, "ops-huge")
    return {"before": before, "after": scrape(url), "good": good, "bad": bad, "too_large": too_large}


def test_metrics_count_the_requests_sent(traffic):
    before, after = traffic["before"], traffic["after"]
    assert [s for s, _ in traffic["good"]] == [200] * 3 and traffic["bad"][0] == 422
    assert traffic["too_large"][0] == 422

    def delta(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert delta("paddlex_npu_requests_total", path="/ocr", status="200", category="none") == 3
    assert delta("paddlex_npu_requests_total", path="/ocr", status="422", category="input") == 2
    assert delta("paddlex_npu_request_duration_seconds_count", path="/ocr") == 5
    assert delta("paddlex_npu_request_duration_seconds_sum", path="/ocr") > 0
    assert delta("paddlex_npu_request_duration_seconds_bucket", path="/ocr", le="+Inf") == 5
    # only the 3 readable pages reached a worker (the others were refused while decoding, in the server)
    for stage in ("pre", "model", "post", "other", "device"):
        assert delta("paddlex_npu_stage_seconds_count", device="0", stage=stage) == 3, stage
    assert delta("paddlex_npu_stage_seconds_sum", stage="model") > 0
    assert delta("paddlex_npu_stage_seconds_sum", stage="device") > 0
    # the device calls are within the model calls: device time is a part of model time
    assert delta("paddlex_npu_stage_seconds_sum", stage="device") <= delta(
        "paddlex_npu_stage_seconds_sum", stage="model"
    )
    det = {"device": "0", "model": "PP-OCRv4_mobile_det"}
    assert delta("paddlex_npu_device_calls_total", **det) == 3  # one detection call per page
    assert delta("paddlex_npu_device_calls_total", device="0", model="PP-OCRv4_mobile_rec") >= 3
    assert delta("paddlex_npu_device_call_seconds_count", **det) == 3
    assert delta("paddlex_npu_device_call_seconds_sum", **det) > 0
    assert total(after, "paddlex_npu_device_call_failures_total") == 0


def test_metrics_show_the_workers_and_their_warm_up(traffic):
    after = traffic["after"]
    assert value(after, "paddlex_npu_workers_configured", device="0") == 2
    assert value(after, "paddlex_npu_workers_ready", device="0") == 2  # two processes, merged
    assert value(after, "paddlex_npu_worker_starts_total", device="0") == 2
    assert value(after, "paddlex_npu_worker_restarts_total", device="0") == 0
    assert value(after, "paddlex_npu_warmed_up") == 1
    assert value(after, "paddlex_npu_workers_busy", device="0") == 0
    assert value(after, "paddlex_npu_requests_in_flight") == 0 and value(after, "paddlex_npu_requests_queued") == 0


def test_the_pixel_limit_names_its_option(traffic):
    status, answer = traffic["too_large"]
    assert status == 422 and answer["errorCode"] == 422
    assert "exceeds maximum allowed 4000000" in answer["errorMsg"]
    assert "--max-image-pixels" in answer["errorMsg"]


def _records(path) -> list:
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a stderr line is not one JSON object: {line[:300]!r}")
    return records


def test_json_logs_one_object_per_line_and_one_access_record_per_request(server, traffic):
    records = _records(server["stderr"])
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    loggers = {r["logger"] for r in records}
    assert {"paddlex_npu", "paddlex", "uvicorn.error"} <= loggers  # the workers', PaddleX's, uvicorn's
    access = {r["logId"]: r for r in records if r["logger"] == "paddlex_npu.serve.access"}
    for i in range(3):
        r = access[f"ops-{i}"]
        assert (r["status"], r["category"], r["path"], r["method"]) == (200, "none", "/ocr", "POST")
        assert r["latency_ms"] > 0
    assert access["ops-huge"]["status"] == 422 and access["ops-huge"]["category"] == "input"
    bad_id = traffic["bad"][1]["logId"]  # PaddleX made one up: the record carries the one it answered with
    assert access[bad_id]["status"] == 422


def test_a_dead_worker_leaves_the_ready_count(server, traffic):
    """SIGKILL one worker: its live gauges leave the sums (ready below the configured 2, warmed_up 0) while its
    counts stay. (A supervised pool then starts a replacement, which worker_restarts_total counts.)"""
    victim = sorted(server["workers"])[0]
    os.kill(victim, signal.SIGKILL)
    deadline, seen = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        seen = scrape(server["url"])
        if value(seen, "paddlex_npu_workers_ready", device="0") < 2:
            break
        time.sleep(0.1)
    assert value(seen, "paddlex_npu_workers_ready", device="0") < 2 and value(seen, "paddlex_npu_warmed_up") == 0
    assert value(seen, "paddlex_npu_worker_starts_total", device="0") >= 2  # the dead worker's count is kept
    assert total(seen, "paddlex_npu_device_calls_total") >= total(traffic["after"], "paddlex_npu_device_calls_total")


def test_metrics_folder_removed_at_shutdown(server, traffic):
    """Last: SIGTERM; the server's multiprocess folder goes with it."""
    (folder,) = set(server["workers"].values())
    assert folder and os.path.isdir(folder) and os.listdir(folder)
    server["proc"].send_signal(signal.SIGTERM)
    assert server["proc"].wait(60) in (0, -signal.SIGTERM)
    deadline = time.monotonic() + 10
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(folder)


def test_error_categories_in_process():
    """The category label of each kind of answer, through the same middleware and store (no server): a category an
    error handler recorded wins (its row's metrics label); else 4xx is the client's input, 5xx runtime."""
    import asyncio

    from paddlex_npu.serve import metrics, observe

    async def app(scope, receive, send):
        status, recorded = {"/dev": (503, "device"), "/busy": (503, None), "/bug": (500, None)}[scope["path"]]
        if recorded:
            scope.setdefault("state", {})[observe.CATEGORY_STATE_KEY] = recorded
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b'{"logId": "L1", "errorCode": %d}' % status})

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    store = metrics.start([0], 1)
    try:
        wrapped = observe.ObservedApp(app, ["/dev", "/busy", "/bug"])
        for path in ("/dev", "/busy", "/bug", "/bug"):
            asyncio.run(wrapped({"type": "http", "method": "GET", "path": path, "headers": []}, receive, send))
        status, body, _ = metrics.exposition()
        assert status == 200
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(body.decode())
            for s in family.samples
        }
        assert value(samples, "paddlex_npu_requests_total", path="/dev", status="503", category="device") == 1
        assert value(samples, "paddlex_npu_requests_total", path="/busy", status="503", category="runtime") == 1
        assert value(samples, "paddlex_npu_requests_total", path="/bug", status="500", category="runtime") == 2
        assert value(samples, "paddlex_npu_warmed_up") == 0  # no worker loaded in this store
        assert value(samples, "paddlex_npu_build_info", version=paddlex_npu.__version__) == 1  # = --version, info
    finally:
        metrics.stop(store)
    assert not store.path.exists() and metrics.exposition()[0] == 503
