"""What a PDF can cost ``paddlex-npu serve`` (issue 54), against a real server on loopback (the OCR pipeline on
the reference runtime) with PDFs written in the test: a 441-byte PDF of one 20,000 pt page and a 5,000-page PDF
refused in milliseconds naming the option, a cut one refused, a repeated-draw bomb stopped at
``--request-timeout`` (504) while a valid PDF posted beside it is answered and ``/health`` answers at once, the
bomb's renderer killed when its client goes."""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from tests.serve import pdfs
from tests.serve.conftest import children, free_ports, server_env, stop, wait_until

TIMEOUT_S = 20  # the server's --request-timeout
BOMB_DRAWS = 2000  # PDFium takes minutes over it unbounded


def _start(pipeline_yaml: Path, log: Path) -> Dict:
    import subprocess
    import sys

    (port,) = free_ports(1)
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline_yaml), "--port", str(port)]
    cmd += ["--request-timeout", str(TIMEOUT_S)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    server = {"port": port, "proc": proc, "log": log}
    why = wait_until(lambda: _get(server, "/ready")[0] == 200, proc, 240, log)
    assert why is None, why
    return server


@pytest.fixture(scope="module")
def server(pipeline_yaml, tmp_path_factory):
    s = _start(pipeline_yaml, tmp_path_factory.mktemp("pdf") / "serve.log")
    try:
        yield s
    finally:
        stop(s["proc"])


def _get(server: Dict, path: str) -> Tuple[int, float]:
    started = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status, time.monotonic() - started
    except OSError:
        return 0, time.monotonic() - started
    finally:
        c.close()


def _body(raw: bytes) -> bytes:
    return json.dumps({"file": base64.b64encode(raw).decode(), "fileType": 0}).encode()


def _post(server: Dict, raw: bytes, conn: Optional[http.client.HTTPConnection] = None) -> Tuple[int, Dict, float]:
    started = time.monotonic()
    c = conn or http.client.HTTPConnection("127.0.0.1", server["port"], timeout=120)
    try:
        c.request("POST", "/ocr", body=_body(raw), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read()), time.monotonic() - started
    finally:
        c.close()


def _renderers(server: Dict) -> List[int]:
    """The PDF renderers running: children of the server's forkserver (whose command line says so)."""
    found = []
    for pid in children(server["proc"].pid):
        try:
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found += children(pid)
        except OSError:
            pass
    return found


def _until(check, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_441_byte_pdf_of_one_huge_page_is_refused_naming_the_page_and_the_option(server):
    raw = pdfs.one_page(20_000, 20_000)
    assert len(raw) == 441
    status, ans, _ = _post(server, raw)
    assert status == 422, ans
    assert "Page 1 of the PDF is 20000 x 20000 pt" in ans["errorMsg"] and "--max-image-pixels" in ans["errorMsg"]


def test_a_5000_page_pdf_is_refused_naming_the_page_limit(server):
    status, ans, _ = _post(server, pdfs.many_pages(5000))
    assert status == 422, ans
    assert "the PDF has 5000 pages, over the 10 pages" in ans["errorMsg"], ans
    assert "max_num_input_imgs" in ans["errorMsg"]


def test_a_cut_pdf_is_refused(server):
    status, ans, _ = _post(server, pdfs.truncated(pdfs.text_pages([(300, 200)] * 3)))
    assert status == 422, ans


def test_a_pdf_within_the_limits_is_answered(server):
    status, ans, _ = _post(server, pdfs.text_pages([(300, 200)] * 2))
    assert status == 200, ans
    assert ans["result"]["dataInfo"]["numPages"] == 2


def test_a_repeated_draw_bomb_is_stopped_at_the_timeout_while_others_are_answered(server):
    """The bomb is posted; while its renderer runs, a valid PDF is answered 200 and /health answers within 0.5 s;
    the bomb gets 504 naming --request-timeout, within it (plus the time to answer), and its renderer is gone."""
    got: List[Tuple[int, Dict, float]] = []
    bomb = threading.Thread(target=lambda: got.append(_post(server, pdfs.repeated_draw(BOMB_DRAWS))))
    bomb.start()
    try:
        assert _until(lambda: _renderers(server), 30), "the bomb's renderer did not start"
        health = [_get(server, "/health") for _ in range(5)]
        status, ans, _ = _post(server, pdfs.text_pages([(300, 200)]))
        assert status == 200, ans
        assert bomb.is_alive()  # answered while the bomb renders
        assert all(s == 200 and t < 0.5 for s, t in health), health
    finally:
        bomb.join(TIMEOUT_S + 60)
    ((status, ans, took),) = got
    assert status == 504 and "--request-timeout" in ans["errorMsg"], ans
    assert took < TIMEOUT_S + 10, took
    assert _until(lambda: not _renderers(server), 10)


def test_a_bomb_whose_client_goes_has_its_renderer_killed(server):
    conn = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=120)
    conn.request(
        "POST", "/ocr", body=_body(pdfs.repeated_draw(BOMB_DRAWS)), headers={"Content-Type": "application/json"}
    )
    assert _until(lambda: _renderers(server), 30), "the bomb's renderer did not start"
    gone_at = time.monotonic()
    conn.close()  # the client goes
    assert _until(lambda: not _renderers(server), TIMEOUT_S / 2), "the renderer ran on after its client went"
    assert time.monotonic() - gone_at < TIMEOUT_S / 2
    assert _post(server, pdfs.text_pages([(300, 200)]))[0] == 200
