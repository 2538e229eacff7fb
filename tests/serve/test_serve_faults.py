"""``paddlex-npu serve`` under faults and overload (issue 21), real servers on loopback with the reference runtime:
a killed worker is replaced and its request answered, readiness follows the workers, a full queue answers 503 +
Retry-After at once, abandoned requests never reach a worker, image bombs are refused before decoding, client
mistakes get a 4xx on a connection that stays usable, a broken package stops the server with its cause."""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import yaml

from tests.serve.conftest import free_ports, server_env, stop, wait_until

BOUND_S = 120  # every loop below ends within this


def _start(pipeline_yaml: Path, log: Path, *extra: str, wait: bool = True) -> Dict:
    (port,) = free_ports(1)
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline_yaml), "--port", str(port), *extra]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    server = {"port": port, "proc": proc, "log": log}
    if wait:
        why = wait_until(lambda: _get(server, "/ready")[0] == 200, proc, 240, log)
        assert why is None, why
    return server


def _conn(server: Dict, timeout: float = 120) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server["port"], timeout=timeout)


def _get(server: Dict, path: str) -> Tuple[int, Dict]:
    c = _conn(server, 5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


def _post(
    server: Dict, body: bytes, conn: Optional[http.client.HTTPConnection] = None, timeout: float = 120
) -> Tuple[int, Dict, Dict]:
    c = conn or _conn(server, timeout)
    try:
        c.request("POST", "/ocr", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read()), {k.lower(): v for k, v in r.getheaders()}
    finally:
        if conn is None:
            c.close()


def _ocr_body(path: Path, **extra) -> bytes:
    return json.dumps({"file": base64.b64encode(path.read_bytes()).decode(), "fileType": 1, **extra}).encode()


def _children(pid: int) -> List[int]:
    """Children of every thread of ``pid`` (replacement workers are started by the pool's supervisor thread)."""
    out: List[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _workers(server: Dict) -> List[int]:
    """The worker processes (spawned by multiprocessing; not its resource tracker)."""
    out = []
    for k in _children(server["proc"].pid):
        try:
            cmd = open(f"/proc/{k}/cmdline", "rb").read()
        except OSError:
            continue
        if b"spawn_main" in cmd:
            out.append(k)
    return out


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, MB."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _until(check, seconds: float, step: float = 0.1) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(step)
    return False


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def server(pipeline_yaml, tmp):
    """Two workers, a short queue, small pixel budgets (the bombs need no big files)."""
    s = _start(
        pipeline_yaml,
        tmp / "serve.log",
        "--workers",
        "2",
        "--max-queue",
        "4",
        "--max-image-pixels",
        "4000000",
        "--max-request-pixels",
        "8000000",
        "--max-body-mb",
        "4",
    )
    try:
        yield s
    finally:
        stop(s["proc"])


def test_a_killed_worker_is_replaced_and_no_request_goes_unanswered(server, images):
    """kill -9 one worker while 2 clients keep sending, until the replacement is ready and each client has had an
    answer after that: every request is answered (200, or 503 for the one in flight if its retry failed too),
    /ready turns 503 while the replacement loads, /health stays 200, and service recovers: the new worker
    answers."""
    body = _ocr_body(images["page"])
    victim = _workers(server)[0]
    answers: List[int] = []
    back = threading.Event()  # /ready is 200 again after the kill
    stop_at = time.monotonic() + BOUND_S

    def client(k: int) -> None:
        after = 0  # answers once the replacement is ready
        while time.monotonic() < stop_at and after < 1:
            ready = back.is_set()
            answers.append(_post(server, body)[0])
            after += ready

    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(client, k) for k in range(2)]
        assert _until(lambda: len(answers) >= 2, 60)
        os.kill(victim, signal.SIGKILL)
        saw_not_ready = _until(lambda: _get(server, "/ready")[0] == 503, 10, 0.05)
        assert _get(server, "/health")[0] == 200
        recovered = _until(lambda: _get(server, "/ready")[0] == 200, BOUND_S, 0.1)
        back.set()
        for j in jobs:
            j.result(BOUND_S)
    assert saw_not_ready
    assert recovered, server["log"].read_text()[-2000:]
    assert answers and set(answers) <= {200, 503}, answers
    assert answers.count(200) >= len(answers) - 1, answers
    assert victim not in _workers(server) and len(_workers(server)) == 2
    for _ in range(3):  # both workers answer, the new one included
        assert _post(server, body)[0] == 200


def test_a_full_queue_answers_503_with_retry_after_at_once(server, images):
    """2 workers + 4 queued: of 14 requests sent at once, those beyond get 503 + Retry-After within a fraction
    of a second; the rest are answered 200."""
    body = _ocr_body(images["page"])

    def one(_: int) -> Tuple[int, float, Dict]:
        t0 = time.monotonic()
        status, _, headers = _post(server, body)
        return status, time.monotonic() - t0, headers

    with ThreadPoolExecutor(14) as pool:
        got = list(pool.map(one, range(14)))
    refused = [g for g in got if g[0] == 503]
    assert refused and all(g[0] in (200, 503) for g in got), got
    assert all(h.get("retry-after") == "1" for _, _, h in refused)
    assert max(t for _, t, _ in refused) < min(t for s, t, _ in got if s == 200)
    assert sum(1 for g in got if g[0] == 200) >= 6


def test_requests_whose_client_left_never_reach_a_worker(server, images):
    """Clients that send and hang up while the workers are busy: their requests are dropped from the queue, so
    a request sent after them is answered in about the time of the work in flight, not of theirs too."""
    page = _ocr_body(images["page"])
    t0 = time.monotonic()
    assert _post(server, page)[0] == 200
    one = time.monotonic() - t0
    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(_post, server, page) for _ in range(2)]
        time.sleep(0.2)
        for _ in range(4):  # queued behind the busy workers, then abandoned
            s = socket.create_connection(("127.0.0.1", server["port"]))
            head = f"POST /ocr HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(page)}\r\n"
            s.sendall(head.encode() + b"\r\n" + page)
            time.sleep(0.05)
            s.close()
        t1 = time.monotonic()
        status = _post(server, page)[0]
        waited = time.monotonic() - t1
        assert all(b.result(BOUND_S)[0] == 200 for b in busy)
    assert status == 200
    assert waited < 3 * one + 1.0, (waited, one)  # 4 abandoned pages would be 2 more page times per worker


def test_clients_that_time_out_and_resend_leave_memory_bounded(server, images):
    """32 clients that give up after 1 s and resend, for 8 s: the queue stays bounded (--max-queue 4), so memory
    does too (bound: 200 MB over idle for the server and its workers), and a fresh request is answered within
    seconds after the storm."""
    body = _ocr_body(images["page"])
    before = _rss_mb(server["proc"].pid)
    peak = before
    end = time.monotonic() + 8
    sent: List[int] = []

    def client(_: int) -> None:
        while time.monotonic() < end:
            try:
                sent.append(_post(server, body, timeout=1.0)[0])
            except (OSError, http.client.HTTPException):
                sent.append(-1)  # gave up

    with ThreadPoolExecutor(32) as pool:
        jobs = [pool.submit(client, k) for k in range(32)]
        while not all(j.done() for j in jobs):
            peak = max(peak, _rss_mb(server["proc"].pid))
            time.sleep(0.05)
    t0 = time.monotonic()
    status = _post(server, body, timeout=60)[0]
    fresh = time.monotonic() - t0
    assert sent and status == 200
    assert fresh < 10, fresh
    assert peak - before < 200, (before, peak)


def _png_bomb(side: int) -> bytes:
    """A PNG of side x side white pixels, written by streaming rows (a few hundred KB for 30000)."""
    import zlib

    raw = zlib.compressobj(9)
    row = b"\x00" + b"\xff" * side
    data = b"".join(raw.compress(row) for _ in range(side)) + raw.flush()

    def chunk(kind: bytes, payload: bytes) -> bytes:
        import struct

        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    import struct

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def _huge_page_pdf(pages: int) -> bytes:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(14400, 14400)  # the largest PDF page (200 inches)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["png-30000", "pdf-3-huge-pages"])
def test_image_bombs_are_refused_before_decoding(server, images, kind):
    if kind == "png-30000":
        data, file_type, option = _png_bomb(30000), 1, "--max-image-pixels"
    else:
        data, file_type, option = _huge_page_pdf(3), 0, "--max-image-pixels"  # each page refused, not scaled down
    assert len(data) < 1_000_000
    body = json.dumps({"file": base64.b64encode(data).decode(), "fileType": file_type}).encode()
    before = _rss_mb(server["proc"].pid)
    peak = before
    with ThreadPoolExecutor(4) as pool:  # four at once cannot add up either
        jobs = [pool.submit(_post, server, body) for _ in range(4)]
        while not all(j.done() for j in jobs):
            peak = max(peak, _rss_mb(server["proc"].pid))
            time.sleep(0.02)
        got = [j.result(BOUND_S) for j in jobs]
    for status, ans, _ in got:
        assert status == 422 and option in ans["errorMsg"] and "refused before" in ans["errorMsg"], ans
    assert peak - before < 300, (before, peak)
    assert _post(server, _ocr_body(images["english"]))[0] == 200


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"textDetLimitType": "foo"}, "textDetLimitType"),
        ({"textRecScoreThresh": math.nan}, "textRecScoreThresh"),
        ({"textDetThresh": 7}, "textDetThresh"),
        ({"logId": 5}, "logId"),
        ({"useDocUnwarping": True}, "useDocUnwarping"),
    ],
    ids=["invalid-limit-type", "nan-threshold", "threshold-out-of-range", "non-string-logId", "module-missing"],
)
def test_client_mistakes_get_4xx_and_the_connection_stays_usable(server, images, extra, says):
    conn = _conn(server)
    try:
        status, ans, headers = _post(server, _ocr_body(images["english"], **extra), conn)
        assert 400 <= status < 500 and says in json.dumps(ans), ans
        assert headers.get("connection", "").lower() != "close"
        status, ans, _ = _post(server, _ocr_body(images["english"]), conn)  # the same keep-alive connection
        assert status == 200, ans
    finally:
        conn.close()


def test_a_chunked_body_over_the_limit_gets_413(server, images):
    conn = _conn(server)
    try:
        conn.putrequest("POST", "/ocr")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        piece = b"x" * (1024 * 1024)
        try:
            for _ in range(6):  # 6 MB against a 4 MB limit
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:  # the server may close after answering
            pass
        r = conn.getresponse()
        ans = json.loads(r.read())
        assert r.status == 413 and "--max-body-mb" in ans["errorMsg"], ans
    finally:
        conn.close()
    assert _post(server, _ocr_body(images["english"]))[0] == 200


def test_a_request_over_the_timeout_gets_504_and_its_worker_is_replaced(pipeline_yaml, tmp, images):
    """--request-timeout below the time of one page: 504, the worker killed and replaced; then ready again."""
    s = _start(pipeline_yaml, tmp / "timeout.log", "--request-timeout", "0.05")
    try:
        workers = _workers(s)
        status, ans, _ = _post(s, _ocr_body(images["page"]))
        assert status == 504 and "--request-timeout" in ans["errorMsg"], ans
        assert _until(lambda: _workers(s) and _workers(s) != workers, 10)
        assert _until(lambda: _get(s, "/ready")[0] == 200, BOUND_S, 0.5)
    finally:
        assert stop(s["proc"]) == 0


def test_a_worker_that_cannot_load_stops_the_server_naming_its_error(pipeline_yaml, tmp):
    config = yaml.safe_load(pipeline_yaml.read_text())
    broken = tmp / "broken-model"
    broken.mkdir()
    config["SubModules"]["TextDetection"]["model_dir"] = str(broken)
    path = tmp / "broken.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / "broken.log"
    s = _start(path, log, wait=False)
    code = s["proc"].wait(BOUND_S)
    text = log.read_text().strip()
    assert code != 0, text
    last = text.splitlines()[-1]
    assert "broken-model" in last or "inference.yml" in last or "Error" in last, text[-2000:]
    assert "BrokenProcessPool" not in text


def test_ready_follows_start_up_and_drain_and_sigterm_exits_0_without_leaks(pipeline_yaml, tmp, images):
    """The port opens while the workers load: /health 200 and /ready 503 (requests 503 + Retry-After), then
    /ready 200; after SIGTERM, with a request in flight, /ready 503 until the server exits 0."""
    s = _start(pipeline_yaml, tmp / "drain.log", "--workers", "2", "--shutdown-grace", "2", wait=False)
    seen = []

    def probe() -> bool:
        try:
            seen.append((_get(s, "/health")[0], _get(s, "/ready")[0]))
        except OSError:  # the port is not open yet
            return False
        return seen[-1] == (200, 200)

    assert _until(probe, 240, 0.05), (seen[-5:], s["log"].read_text()[-2000:])
    assert (200, 503) in seen, seen[:5]  # alive, not ready, while loading
    with ThreadPoolExecutor(1) as pool:
        inflight = pool.submit(_post, s, _ocr_body(images["page"]))
        time.sleep(0.2)
        s["proc"].send_signal(signal.SIGTERM)
        assert _until(lambda: _get(s, "/ready")[0] == 503, 5, 0.05)
        assert inflight.result(BOUND_S)[0] == 200
    assert s["proc"].wait(60) == 0
    text = s["log"].read_text()
    assert "leaked semaphore" not in text and "Traceback" not in text, text[-2000:]
    np.testing.assert_equal(_until(lambda: not [w for w in _workers_gone(s)], 10), True)


def _workers_gone(s: Dict) -> List[int]:
    try:
        return _children(s["proc"].pid)
    except OSError:
        return []
