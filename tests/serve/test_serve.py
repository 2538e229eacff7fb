"""``paddlex-npu serve`` as a user starts it (a real server on loopback, 2 worker processes), queried with a plain
HTTP client: PaddleX's schema and answers equal to the in-process pipeline's; bad requests get a 4xx and the
server keeps serving; at shutdown, requests in flight are answered and new ones get 503."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from paddlex_npu import errors
from paddlex_npu.run.gears import InputShapeError
from paddlex_npu.serve.replies import answer
from paddlex_npu.serve.route import parse_devices
from tests.http_client import call, ocr_body
from tests.serve.conftest import children, free_ports, server_env, stop, wait_busy, wait_until


def _ocr(server, path, **extra):
    return call(server["url"] + "/ocr", ocr_body(path, **extra))


def _health(url) -> bool:
    with urllib.request.urlopen(url + "/health", timeout=5) as r:
        return r.status == 200


def _ready(url) -> bool:
    try:
        with urllib.request.urlopen(url + "/ready", timeout=5) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


@pytest.fixture(scope="module")
def server(pipeline_yaml, tmp_path):
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline_yaml), "--port", str(port)]
    cmd += ["--workers", "2", "--max-image-pixels", "4000000", "--max-body-mb", "8", "--shutdown-grace", "3"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    why = wait_until(lambda: _ready(url), proc, 240, log)
    assert why is None, why
    try:
        yield {"url": url, "proc": proc, "log": log}
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory):
    return tmp_path_factory.mktemp("serve")


def test_health_and_workers(server):
    status, body = call(server["url"] + "/ocr", b"{}")
    assert status == 422
    with urllib.request.urlopen(server["url"] + "/health") as r:
        assert json.loads(r.read())["errorCode"] == 0
    kids = open(f"/proc/{server['proc'].pid}/task/{server['proc'].pid}/children").read().split()
    assert len(kids) >= 2  # two pipeline workers (plus multiprocessing's resource tracker)


def test_answers_equal_the_in_process_pipeline(server, npu_pipeline, images):
    for key in ("english", "page", "chinese"):
        status, ans = _ocr(server, images[key], logId=key)
        assert status == 200 and ans["errorCode"] == 0 and ans["logId"] == key, ans
        (theirs,) = list(npu_pipeline.predict(str(images[key])))
        got = ans["result"]["ocrResults"][0]["prunedResult"]
        assert got["rec_texts"] == list(theirs["rec_texts"])
        np.testing.assert_allclose(got["rec_scores"], theirs["rec_scores"], atol=1e-5)
        np.testing.assert_array_equal(got["rec_boxes"], np.asarray(theirs["rec_boxes"]))
        assert "ocrImage" not in ans["result"]["ocrResults"][0]  # Serving.visualize: False


def test_visualize_brings_the_images_back(server, images):
    status, ans = _ocr(server, images["english"], visualize=True)
    assert status == 200, ans
    res = ans["result"]["ocrResults"][0]
    assert base64.b64decode(res["ocrImage"])[:3] == b"\xff\xd8\xff"  # JPEG, as PaddleX answers


def test_concurrent_requests_all_answered_once(server, images):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: _ocr(server, images["english"], logId=f"r{i}"), range(6)))
    assert [a["logId"] for _, a in answers] == [f"r{i}" for i in range(6)]
    assert all(s == 200 for s, _ in answers)


def _huge_png() -> bytes:
    import cv2

    return cv2.imencode(".png", np.full((2100, 2100, 3), 255, np.uint8))[1].tobytes()


@pytest.mark.parametrize(
    "body, ctype, status, says",
    [
        (
            json.dumps({"file": base64.b64encode(b"no image").decode(), "fileType": 1}),
            "application/json",
            422,
            "Invalid input file",
        ),
        ("", "application/json", 422, "Field required"),
        (json.dumps({"fileType": 1}), "application/json", 422, "body.file"),
        ("{", "application/json", 422, "json_invalid"),
        (json.dumps({"file": "x", "fileType": 1}), "text/plain", 415, "Content-Type must be application/json"),
        ("HUGE", "application/json", 422, "exceeds maximum allowed 4000000"),
        (
            "x" * (9 * 1024 * 1024),
            "application/json",
            413,
            "(8 MB): send a smaller request, or start paddlex-npu serve with a larger --max-body-mb",
        ),
    ],
    ids=["non-image", "empty-body", "missing-field", "not-json", "wrong-content-type", "huge-image", "huge-body"],
)
def test_bad_requests_get_4xx_and_the_server_keeps_serving(server, images, body, ctype, status, says):
    if body == "HUGE":
        body = json.dumps({"file": base64.b64encode(_huge_png()).decode(), "fileType": 1})
    got, ans = call(server["url"] + "/ocr", body.encode(), ctype=ctype)
    assert got == status and ans["errorCode"] == status and says in ans["errorMsg"], ans
    assert _ocr(server, images["english"])[0] == 200


def test_route_errors_map_to_status_codes():
    def status(exc):
        return answer(exc).status

    assert status(InputShapeError("x")) == 422
    assert status(errors.ConfigError("x")) == 500 and status(errors.DeviceCallError("x")) == 503
    assert status(errors.RuntimeUnavailableError("x")) == 503 and status(ValueError()) == 500
    assert answer(ValueError("secret")).body["errorMsg"].startswith("Internal server error (ValueError)")
    assert "secret" not in answer(ValueError("secret")).body["errorMsg"]
    assert answer(InputShapeError("too wide")).body["errorMsg"] == "InputShapeError: too wide"
    assert parse_devices("npu:0,1") == [0, 1] and parse_devices("npu") == [0]
    for bad in ("gpu:0", "npu:a", "npu:0,0"):
        with pytest.raises(errors.ConfigError, match="device"):
            parse_devices(bad)


def test_a_streamed_body_over_the_limit_gets_413_naming_the_option():
    """Without a Content-Length (chunked), the guard counts what the app reads and answers 413 the same way."""
    import asyncio

    from paddlex_npu.serve.guard import Guard, State

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass

    chunks = [{"type": "http.request", "body": b"x" * 600_000, "more_body": True}] * 2
    chunks.append({"type": "http.request", "body": b"", "more_body": False})
    sent = []

    async def receive():
        return chunks.pop(0)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "headers": [(b"content-type", b"application/json")]}
    asyncio.run(Guard(app, State(), 1024 * 1024)(scope, receive, send))
    answer = json.loads(sent[1]["body"])
    assert sent[0]["status"] == 413 and answer["errorCode"] == 413
    assert "limit of 1048576 bytes (1 MB)" in answer["errorMsg"] and "--max-body-mb" in answer["errorMsg"]


def test_a_url_input_is_refused_by_default_and_nothing_is_fetched(server, internal):
    """No --allow-url-host: a `file` URL gets 422 naming the option, and the internal host sees no request
    (the URL limits when allowed: test_serve_guard.py)."""
    body = json.dumps({"file": internal["secret"].url + "/file/english.png", "fileType": 1}).encode()
    status, ans = call(server["url"] + "/ocr", body)
    assert status == 422 and "fetches no URLs" in ans["errorMsg"] and "--allow-url-host" in ans["errorMsg"], ans
    assert internal["secret"].requests == []


def test_shutdown_answers_in_flight_requests_and_503_to_new_ones(server, images):
    """Last: SIGTERM with a request in flight. It is answered; a request during the drain gets 503."""
    pid = server["proc"].pid
    workers = children(pid)
    assert workers
    first = {}
    t = threading.Thread(target=lambda: first.update(answer=_ocr(server, images["page"])))
    t.start()
    wait_busy(workers)  # a worker computes the page: it is in flight at the signal
    server["proc"].send_signal(signal.SIGTERM)
    status, ans = call(server["url"] + "/ocr", b"{}")
    assert status == 503 and "shutting down" in ans["errorMsg"]
    t.join(120)
    assert first["answer"][0] == 200, first
    # a clean drain exits 0
    assert server["proc"].wait(60) == 0, server["log"].read_text()[-3000:]
    assert "Finished server process" in server["log"].read_text()
    deadline = time.monotonic() + 30  # and no worker outlives the server
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [w for w in workers if _alive(w)]


def _alive(pid: int) -> bool:
    """A process that runs (a zombie waiting for its reaper has ended)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
