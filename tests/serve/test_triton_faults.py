"""``paddlex-npu triton-serve`` under faults (issue 21), the real tritonserver on loopback with the reference runtime:
a killed Python stub is noticed and its model reloaded (the CLI says so), requests are answered throughout and
service recovers; a KServe batch is answered per element; an invalid option gets 422; an image bomb is refused
before decoding with the same limits as ``serve``; a PDF is rendered in a child process of the venv's Python,
a huge page or a cut PDF refused, a repeated-draw bomb stopped at ``--pdf-timeout``; a killed stub's model is not
ready until it is back; SIGTERM then exits 0."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Tuple

import pytest

from paddlex_npu.triton.repo import TritonOptions, build_triton_repo
from paddlex_npu.triton.watch import stubs_of
from tests.serve import pdfs
from tests.serve.conftest import children, free_ports, server_env, stop, wait_until
from tests.serve.test_serve_faults import _png_bomb
from tests.serve.test_serve_pdf import _renderers as serve_renderers

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
PDF_TIMEOUT_S = 10  # the repository's --pdf-timeout
BOMB_DRAWS = 2000  # PDFium takes minutes over it unbounded (tests/serve/test_serve_pdf.py)


def _infer(port: int, model: str, bodies: List[dict], timeout: float = 60) -> Tuple[int, List[dict]]:
    """A KServe v2 request over HTTP JSON with ``len(bodies)`` elements in its ``input`` tensor."""
    data = [json.dumps(b) for b in bodies]
    payload = {"inputs": [{"name": "input", "shape": [len(data), 1], "datatype": "BYTES", "data": data}]}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{model}/infer",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.loads(r.read())["outputs"][0]
            return r.status, [json.loads(x) for x in out["data"]]
    except urllib.error.HTTPError as e:
        return e.code, [json.loads(e.read() or b"{}")]


def _ready(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5) as r:
        return r.status == 200


def triton_serve(repo_root: Path, root: Path, *extra: str) -> Tuple[subprocess.Popen, int, Path]:
    """``paddlex-npu triton-serve`` on ``repo_root`` (loopback, free ports, its output in ``root/triton-serve.log``),
    started: the process, its HTTP port and the log (not yet waited for)."""
    http, grpc, metrics = free_ports(3)
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "triton-serve", str(repo_root), "--host", "127.0.0.1"]
    cmd += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    cmd += ["--workdir", str(root / "work"), *extra]
    log = root / "triton-serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    return proc, http, log


def _status(port: int, path: str) -> int:
    """The HTTP status of ``GET path`` (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@pytest.fixture(scope="module")
def triton(pipeline_yaml, tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-faults")
    options = TritonOptions(
        runtime="reference", max_image_pixels=4_000_000, max_request_pixels=8_000_000, pdf_timeout=PDF_TIMEOUT_S
    )
    repo = build_triton_repo(pipeline_yaml, root / "repo", options)
    proc, http, log = triton_serve(repo.root, root)
    why = wait_until(lambda: _ready(http), proc, 300, log)
    if why and "failed to load" not in why and "Traceback" not in why:
        stop(proc)
        pytest.skip(f"tritonserver cannot start on this machine: {why}")
    assert why is None, why
    try:
        yield {"port": http, "proc": proc, "log": log}
    finally:
        stop(proc)


def _ocr(images: Dict, key: str = "english", **extra) -> dict:
    return {"file": base64.b64encode(images[key].read_bytes()).decode(), "fileType": 1, **extra}


def _server_pid(triton: Dict) -> int:
    kids = open(f"/proc/{triton['proc'].pid}/task/{triton['proc'].pid}/children").read().split()
    return int(kids[0])


def test_a_kserve_batch_is_answered_per_element(triton, images):
    status, answers = _infer(triton["port"], "ocr", [_ocr(images, logId="a"), _ocr(images, "page", logId="b")])
    assert status == 200 and [a["logId"] for a in answers] == ["a", "b"], answers
    assert all(a["errorCode"] == 0 for a in answers)


@pytest.mark.parametrize(
    "extra, says", [({"textDetLimitType": "foo"}, "textDetLimitType"), ({"textDetThresh": 7}, "textDetThresh")]
)
def test_an_invalid_option_gets_422_naming_it(triton, images, extra, says):
    status, (answer,) = _infer(triton["port"], "ocr", [_ocr(images, **extra)])
    assert status == 200 and answer["errorCode"] == 422 and says in answer["errorMsg"], answer


def test_an_image_bomb_is_refused_before_decoding_with_serves_limit(triton):
    body = {"file": base64.b64encode(_png_bomb(30000)).decode(), "fileType": 1}
    status, (answer,) = _infer(triton["port"], "ocr", [body])
    assert answer["errorCode"] == 422 and "--max-image-pixels" in answer["errorMsg"], answer
    assert "before decoding" in answer["errorMsg"]


def _renderers(triton: Dict) -> List[int]:
    """The PDF renderers running: children of the OCR stub's forkserver (as serve's, test_serve_pdf.py)."""
    stubs = [s.pid for s in stubs_of(_server_pid(triton)).values() if s.model == "ocr"]
    return [pid for stub in stubs for pid in serve_renderers({"proc": SimpleNamespace(pid=stub)})]


def _pdf(raw: bytes) -> dict:
    return {"file": base64.b64encode(raw).decode(), "fileType": 0}


def test_a_pdf_is_rendered_in_a_child_of_the_venvs_python(triton):
    """A PDF within the limits is answered (2 pages); it was rendered by the forkserver the stub started with the
    venv's Python (sys.executable in the stub), not in the stub."""
    status, (answer,) = _infer(triton["port"], "ocr", [_pdf(pdfs.text_pages([(300, 200)] * 2))])
    assert status == 200 and answer["errorCode"] == 0, answer
    assert answer["result"]["dataInfo"]["numPages"] == 2 and len(answer["result"]["ocrResults"]) == 2
    (stub,) = [s.pid for s in stubs_of(_server_pid(triton)).values() if s.model == "ocr"]
    servers = [p for p in children(stub) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(servers) == 1, servers
    python = Path(f"/proc/{servers[0]}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert Path(python).parent == Path(sys.executable).parent, python  # the venv's bin (triton-serve's PATH)


def test_a_huge_page_pdf_and_a_cut_one_are_refused(triton):
    status, (answer,) = _infer(triton["port"], "ocr", [_pdf(pdfs.one_page(20_000, 20_000))])
    assert answer["errorCode"] == 422 and "--max-image-pixels" in answer["errorMsg"], answer
    status, (answer,) = _infer(triton["port"], "ocr", [_pdf(pdfs.truncated(pdfs.text_pages([(300, 200)])))])
    assert answer["errorCode"] == 422, answer


def test_a_repeated_draw_bomb_is_stopped_at_the_pdf_timeout(triton):
    """The bomb's renderer (a child process) is killed at --pdf-timeout: 504 naming it, its renderer gone, and
    the instance answers the next PDF."""
    t0 = time.monotonic()
    status, (answer,) = _infer(triton["port"], "ocr", [_pdf(pdfs.repeated_draw(BOMB_DRAWS))], timeout=120)
    took = time.monotonic() - t0
    assert answer["errorCode"] == 504 and "triton-repo --pdf-timeout" in answer["errorMsg"], answer
    assert PDF_TIMEOUT_S <= took < PDF_TIMEOUT_S + 30, took
    assert _renderers(triton) == []
    status, (answer,) = _infer(triton["port"], "ocr", [_pdf(pdfs.text_pages([(300, 200)]))])
    assert answer["errorCode"] == 0, answer


def test_a_killed_stub_is_reloaded_and_every_request_answered(triton, images):
    """kill -9 the OCR model's stub: the requests meanwhile are answered (errors while it reloads), the model's
    readiness fails while it is down (the watchdog unloads it before loading it again), the CLI says what
    happened, and the model answers again."""
    port = triton["port"]
    (victim,) = [s.pid for s in stubs_of(_server_pid(triton)).values() if s.model == "ocr"]
    assert _infer(port, "ocr", [_ocr(images)])[1][0]["errorCode"] == 0
    os.kill(victim, signal.SIGKILL)
    end = time.monotonic() + 30  # the watchdog looks every 0.5 s, then unloads the model before loading it again
    while time.monotonic() < end and _status(port, "/v2/models/ocr/ready") == 200:
        time.sleep(0.05)
    assert _status(port, "/v2/models/ocr/ready") == 400, triton["log"].read_text()[-3000:]  # not ready while it is down
    statuses, timings = [], []
    end = time.monotonic() + 180
    recovered = False
    while time.monotonic() < end and len(statuses) < 400:
        t0 = time.monotonic()
        status, answers = _infer(port, "ocr", [_ocr(images)], timeout=30)
        statuses.append(status)
        timings.append(round(time.monotonic() - t0, 2))
        if status == 200 and answers[0].get("errorCode") == 0 and "reloaded" in triton["log"].read_text():
            recovered = True
            break
        time.sleep(0.2)
    text = triton["log"].read_text()
    assert recovered, text[-3000:]
    assert "died; reloading 'ocr'" in text and "'ocr' reloaded" in text
    # every request got an answer: 500 "Stub process is not healthy" before the watchdog saw the death, 404
    # "unknown model" (or 400) while the model is unloaded for its reload
    assert set(statuses) <= {200, 400, 404, 500}, (statuses, timings)
    assert _status(port, "/v2/models/ocr/ready") == 200  # ready once back
    new = [s.pid for s in stubs_of(_server_pid(triton)).values() if s.model == "ocr"]
    assert new and victim not in new
    for _ in range(3):
        assert _infer(port, "ocr", [_ocr(images)])[1][0]["errorCode"] == 0


def test_sigterm_exits_0(triton):
    """Last: after the reload, a SIGTERM drains and tritonserver (and triton-serve) exit 0."""
    triton["proc"].send_signal(signal.SIGTERM)
    assert triton["proc"].wait(90) == 0, triton["log"].read_text()[-3000:]
