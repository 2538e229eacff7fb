"""What a client can make ``paddlex-npu serve`` do, on real servers on loopback with a local HTTP server as the
"internal host" (URL inputs refused by default: test_serve.py): with an allow-list, an allowed URL answered,
other hosts, loopback names and redirects to them refused before any byte is fetched, a body over the limit
refused with the server's memory bounded, a dripping sender cut at the total timeout; bearer tokens (401 without,
probes open, /metrics separately); HTTPS with a self-signed certificate made here."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import ENGLISH, norm
from tests.http_client import call
from tests.serve.conftest import free_ports, rss_peak, server_env, stop, wait_until
from tests.serve.internal_host import self_signed

API_TOKEN = "api-" + "a1b2c3d4" * 4
METRICS_TOKEN = "metrics-" + "e5f6a7b8" * 4


def _ocr_url(server, file_url, **extra):
    body = json.dumps({"file": file_url, "fileType": 1, **extra}).encode()
    return call(server["url"] + "/ocr", body, token=server.get("token"), context=server.get("context"), timeout=60)


def _start(tmp: Path, extra, context=None):
    (port,) = free_ports(1)
    scheme = "https" if context is not None else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    log = tmp / "serve.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(extra[0]), "--port", str(port), *extra[1:]]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server_env(), stdout=out, stderr=subprocess.STDOUT)
    why = wait_until(lambda: call(url + "/ready", context=context, timeout=5)[0] == 200, proc, 240, log)
    if why is not None:
        stop(proc)
    assert why is None, why
    return {"url": url, "proc": proc, "log": log, "context": context}


@pytest.fixture(scope="module")
def guarded(pipeline_yaml, tmp_path_factory):
    """URLs from 127.0.0.2 and localhost allowed (8 MB, 3 s), tokens, HTTPS."""
    tmp = tmp_path_factory.mktemp("serve-guarded")
    cert, key = self_signed(tmp / "tls")
    (tmp / "api.tokens").write_text(f"# the OCR clients\n{API_TOKEN}\n")
    (tmp / "metrics.tokens").write_text(METRICS_TOKEN + "\n")
    context = ssl.create_default_context(cafile=str(cert))
    extra = [pipeline_yaml, "--workers", "1", "--max-body-mb", "8", "--url-timeout", "3"]
    extra += ["--allow-url-host", "127.0.0.2", "--allow-url-host", "localhost"]
    extra += ["--token-file", str(tmp / "api.tokens"), "--metrics-token-file", str(tmp / "metrics.tokens")]
    extra += ["--tls-certfile", str(cert), "--tls-keyfile", str(key)]
    server = _start(tmp, extra, context)
    server["token"] = API_TOKEN
    try:
        yield server
    finally:
        stop(server["proc"])


def test_an_allowed_url_is_answered_like_its_bytes(guarded, internal, images):
    status, by_url = _ocr_url(guarded, internal["allowed"].url + "/file/english.png", logId="by-url")
    assert status == 200, by_url
    b64 = base64.b64encode(images["english"].read_bytes()).decode()
    status, by_bytes = _ocr_url(guarded, b64)
    assert status == 200, by_bytes
    texts = by_url["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
    assert texts == by_bytes["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
    assert norm(texts) == norm(ENGLISH)


def test_other_hosts_loopback_names_and_redirects_to_them_are_refused_before_fetching(guarded, internal):
    secret, allowed = internal["secret"], internal["allowed"]
    cases = {
        secret.url + "/file/english.png": "not on this server's URL allow-list",  # a host not allowed
        "http://10.1.2.3/file/english.png": "not on this server's URL allow-list",
        f"http://localhost:{secret.port}/file/english.png": "loopback, private",  # a name resolving to loopback
        f"{allowed.url}/redirect?to=http://localhost:{secret.port}/file/english.png": "loopback, private",
        f"{allowed.url}/redirect?to={secret.url}/file/english.png": "not on this server's URL allow-list",
    }
    for url, says in cases.items():
        status, ans = _ocr_url(guarded, url)
        assert status == 422 and says in ans["errorMsg"], (url, ans)
    assert secret.requests == []


def test_a_body_over_the_limit_is_refused_with_memory_bounded(guarded, internal):
    allowed, pid = internal["allowed"], guarded["proc"].pid
    before = rss_peak(pid)
    status, ans = _ocr_url(guarded, allowed.url + "/big?mb=1024")  # 1 GiB, no declared length
    assert status == 422 and "refused while reading" in ans["errorMsg"] and "--url-max-mb" in ans["errorMsg"], ans
    assert rss_peak(pid) - before < 64 * 1024 * 1024
    status, ans = _ocr_url(guarded, allowed.url + "/big?mb=1024&declared=1")
    assert status == 422 and "1073741824 bytes" in ans["errorMsg"], ans


def test_a_dripping_sender_ends_at_the_total_timeout(guarded, internal):
    start = time.monotonic()
    status, ans = _ocr_url(guarded, internal["allowed"].url + "/drip?seconds=60")
    took = time.monotonic() - start
    assert status == 422 and "within 3 s" in ans["errorMsg"], ans
    assert 2.9 < took < 5.0, took


def test_tokens_guard_the_api_and_metrics_and_probes_stay_open(guarded, images):
    url, ctx = guarded["url"], guarded["context"]
    b64 = base64.b64encode(images["english"].read_bytes()).decode()
    body = json.dumps({"file": b64, "fileType": 1}).encode()
    for token in (None, "wrong-" + "0" * 20, METRICS_TOKEN):
        status, ans = call(url + "/ocr", body, token=token, context=ctx)
        assert status == 401 and ans["errorMsg"] == "Unauthorized", ans
    assert call(url + "/ocr", body, token=API_TOKEN, context=ctx)[0] == 200
    assert call(url + "/metrics", context=ctx)[0] == 401
    for path in ("/health", "/ready"):
        assert call(url + path, context=ctx)[0] == 200
    from prometheus_client.parser import text_string_to_metric_families

    for token in (METRICS_TOKEN, API_TOKEN):
        status, text = call(url + "/metrics", token=token, context=ctx)
        assert status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("paddlex_npu_unauthorized_total", (("scope", "api"),))] >= 3
    assert samples[("paddlex_npu_unauthorized_total", (("scope", "metrics"),))] >= 1


def test_fetch_outcomes_are_counted(guarded, internal):
    _ocr_url(guarded, internal["secret"].url + "/file/english.png")
    status, text = call(guarded["url"] + "/metrics", token=METRICS_TOKEN, context=guarded["context"])
    assert status == 200 and 'paddlex_npu_url_fetches_total{outcome="host"}' in text, text[-2000:]


def test_plain_http_is_refused_on_the_tls_port(guarded):
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(guarded["url"].replace("https", "http") + "/health", timeout=10).read()
