"""URL inputs of the Triton OCR model (real tritonserver on loopback, a local HTTP server as the internal host;
refused by default: test_triton.py): with ``triton-repo --allow-url-host``, an allowed URL answered, other hosts,
loopback names and redirects refused before fetching, a body over the limit refused with the model process's
memory bounded, a dripping sender cut at the total timeout."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from paddlex_npu.serve.fetch import UrlPolicy
from paddlex_npu.triton.repo import TritonOptions, build_triton_repo
from tests.helpers import ENGLISH, norm
from tests.serve.conftest import (
    children,
    rss_peak,
    start_tritonserver,
    stop,
    wait_for_tritonserver,
)

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
httpclient = pytest.importorskip("tritonclient.http")


def _tritonserver(pipeline_yaml, root: Path, urls: UrlPolicy):
    repo = build_triton_repo(pipeline_yaml, root / "repo", TritonOptions(runtime="reference", warmup=False, urls=urls))
    server = start_tritonserver(repo.root, root)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=60.0)
    wait_for_tritonserver(server, client)
    proc, log, metrics = server.proc, server.log, server.metrics
    return {"client": client, "proc": proc, "log": log, "repo": repo, "metrics_port": metrics}


@pytest.fixture(scope="module")
def triton(pipeline_yaml, tmp_path_factory):
    urls = UrlPolicy(
        ("127.0.0.2", "localhost"), max_bytes=8 * 1024 * 1024, timeout=3, option="triton-repo --allow-url-host"
    )
    server = _tritonserver(pipeline_yaml, tmp_path_factory.mktemp("triton-urls"), urls)
    try:
        yield server
    finally:
        server["client"].close()
        stop(server["proc"])


def _ask(server, file_url):
    inp = httpclient.InferInput("input", [1, 1], "BYTES")
    import numpy as np

    inp.set_data_from_numpy(np.array([[json.dumps({"file": file_url, "fileType": 1}).encode()]], dtype=np.object_))
    return json.loads(server["client"].infer("ocr", [inp]).as_numpy("output")[0, 0])


def test_an_allowed_url_is_answered(triton, internal):
    ans = _ask(triton, internal["allowed"].url + "/file/english.png")
    assert ans["errorCode"] == 0, ans
    assert norm(ans["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]) == norm(ENGLISH)


def test_other_hosts_loopback_names_and_redirects_are_refused_before_fetching(triton, internal):
    secret, allowed = internal["secret"], internal["allowed"]
    for url, says in {
        secret.url + "/file/english.png": "not on this server's URL allow-list",
        f"http://localhost:{secret.port}/file/english.png": "loopback, private",
        f"{allowed.url}/redirect?to=http://localhost:{secret.port}/x": "loopback, private",
    }.items():
        ans = _ask(triton, url)
        assert ans["errorCode"] == 422 and says in ans["errorMsg"], (url, ans)
    assert secret.requests == []


def _ocr_stub(server) -> int:
    """The pid of the OCR model's instance (Triton's Python backend stub process)."""
    for pid in children(server["proc"].pid):
        if "/ocr/" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " "):
            return pid
    raise AssertionError("no stub process of the ocr model")


def test_a_body_over_the_limit_is_refused_with_memory_bounded(triton, internal):
    pid = _ocr_stub(triton)
    before = rss_peak(pid)
    ans = _ask(triton, internal["allowed"].url + "/big?mb=1024")
    assert ans["errorCode"] == 422 and "refused while reading" in ans["errorMsg"], ans
    assert rss_peak(pid) - before < 64 * 1024 * 1024


def test_a_dripping_sender_ends_at_the_total_timeout(triton, internal):
    start = time.monotonic()
    ans = _ask(triton, internal["allowed"].url + "/drip?seconds=60")
    took = time.monotonic() - start
    assert ans["errorCode"] == 422 and "within 3 s" in ans["errorMsg"], ans
    assert 2.9 < took < 5.0, took


def test_fetch_outcomes_are_counted_on_tritons_metrics_port(triton, internal):
    from prometheus_client.parser import text_string_to_metric_families

    _ask(triton, internal["secret"].url + "/file/english.png")  # a host not allowed
    _ask(triton, internal["allowed"].url + "/file/english.png")
    with urllib.request.urlopen(f"http://127.0.0.1:{triton['metrics_port']}/metrics", timeout=30) as r:
        text = r.read().decode()
    counts = {
        s.labels.get("outcome"): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "paddlex_npu_url_fetches_total"
    }
    assert counts.get("host", 0) >= 1 and counts.get("ok", 0) >= 1, counts


def test_a_compressed_bomb_is_refused_undecoded_with_memory_bounded(triton, internal):
    from tests.serve.internal_host import bombs

    pid = _ocr_stub(triton)
    before = rss_peak(pid)
    for name in ("br", "gzip", "gzip-gzip"):
        internal["allowed"].encoded[name] = bombs()[name]
        ans = _ask(triton, f"{internal['allowed'].url}/encoded/{name}")
        assert ans["errorCode"] == 422 and "Content-Encoding" in ans["errorMsg"], ans
    assert rss_peak(pid) - before < 24 * 1024 * 1024  # the 8 MB limit and a small constant


def test_a_malformed_url_is_the_clients_mistake(triton):
    for url in ("http://127.0.0.2/" + "a" * 70_000, "http://127.0.0.2/a\x01b"):
        ans = _ask(triton, url)
        assert ans["errorCode"] == 422 and "URL" in ans["errorMsg"], ans


def test_a_batchs_urls_are_fetched_at_once_within_one_timeout(triton, internal):
    import numpy as np

    files = [internal["allowed"].url + f"/drip?seconds=60&n={i}" for i in range(3)]
    inp = httpclient.InferInput("input", [3, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[json.dumps({"file": f, "fileType": 1}).encode()] for f in files], np.object_))
    start = time.monotonic()
    out = triton["client"].infer("ocr", [inp]).as_numpy("output")
    took = time.monotonic() - start
    answers = [json.loads(row[0]) for row in out]
    assert all(a["errorCode"] == 422 and "within 3 s" in a["errorMsg"] for a in answers), answers
    assert took < 6.0, took  # one 3 s timeout for the batch, not 9 s one after another
