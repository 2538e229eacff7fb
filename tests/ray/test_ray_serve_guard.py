"""``paddlex-npu ray-serve`` guarded as ``serve`` is (the real two-node local cluster, Serve's proxy on loopback):
a URL input from a host not allowed refused with nothing fetched, an over-long URL and a compressed reply 422 as in
``serve``, bearer tokens (401 without, 200 with, probes open, ``/metrics`` not served past the token), HTTPS from
a self-signed certificate made here."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys

import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("fastapi", reason="serving needs requirements/serving.txt (installed into .venv by setup.sh)")

from tests.helpers import ENGLISH, norm  # noqa: E402
from tests.http_client import call  # noqa: E402
from tests.serve.conftest import free_ports, stop, wait_until  # noqa: E402
from tests.serve.internal_host import InternalHost, self_signed  # noqa: E402

TOKEN = "ray-" + "0f1e2d3c" * 4


@pytest.fixture(scope="module")
def server(cluster, ocr_config, sim_env, tmp_path_factory):
    from ray import serve

    serve.shutdown()  # a Serve of an earlier module keeps its proxy's port: this server's would never answer
    folder = tmp_path_factory.mktemp("ray_serve_guard")
    pipeline = folder / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump({**ocr_config, "Serving": {"visualize": False}}), encoding="utf-8")
    cert, key = self_signed(folder / "tls")
    (folder / "tokens").write_text(TOKEN + "\n")
    context = ssl.create_default_context(cafile=str(cert))
    (port,) = free_ports(1)
    url = f"https://127.0.0.1:{port}"
    log = folder / "ray-serve.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-serve", str(pipeline), "--address", cluster.address]
    cmd += ["--port", str(port), "--proxy-location", "HeadOnly", "--name", "ocr-guard"]  # two nodes, one machine
    cmd += ["--token-file", str(folder / "tokens"), "--allow-url-host", "127.0.0.2"]  # not 127.0.0.1
    cmd += ["--tls-certfile", str(cert), "--tls-keyfile", str(key)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **sim_env}, stdout=out, stderr=subprocess.STDOUT)
    why = wait_until(lambda: call(url + "/health", context=context)[0] == 200, proc, 300, log)
    if why is not None:
        stop(proc)
    assert why is None, why
    try:
        yield {"url": url, "context": context}
    finally:
        stop(proc)


def test_tokens_tls_and_url_inputs_off_by_default(server, images):
    url, ctx = server["url"], server["context"]
    b64 = base64.b64encode(images["english"].read_bytes()).decode()
    body = json.dumps({"file": b64, "fileType": 1}).encode()
    status, ans = call(url + "/ocr", body, context=ctx)
    assert status == 401 and ans["errorMsg"] == "Unauthorized", ans
    assert call(url + "/ocr", body, context=ctx, token="x" * 32)[0] == 401
    status, ans = call(url + "/ocr", body, context=ctx, token=TOKEN)
    assert status == 200 and norm(ans["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]) == norm(ENGLISH)
    assert call(url + "/ready", context=ctx)[0] == 200
    with InternalHost({"english.png": images["english"].read_bytes()}) as internal:
        by_url = json.dumps({"file": internal.url + "/file/english.png", "fileType": 1}).encode()
        status, ans = call(url + "/ocr", by_url, context=ctx, token=TOKEN)
        assert status == 422 and "ray-serve --allow-url-host" in ans["errorMsg"], ans
        assert internal.requests == []


def test_a_malformed_url_and_a_compressed_bomb_are_422_as_in_serve(server, images):
    from tests.serve.internal_host import bombs

    url, ctx = server["url"], server["context"]
    with InternalHost(address="127.0.0.2") as allowed:
        allowed.encoded["br"] = bombs()["br"]
        for file, says in (
            ("http://127.0.0.2/" + "a" * 70_000, "over the 8192"),
            (allowed.url + "/encoded/br", "Content-Encoding"),
        ):
            body = json.dumps({"file": file, "fileType": 1}).encode()
            status, ans = call(url + "/ocr", body, context=ctx, token=TOKEN)
            assert status == 422 and says in ans["errorMsg"], ans
