"""No outbound connection nobody asked for: ``paddlex-npu serve`` started with the proxy variables pointing at a
recorder on loopback (tests/serve/proxy_recorder.py), none of the libraries' own off switches set in its
environment, answers OCR requests with result images drawn (PaddleX's default ``visualize``) and a URL input from
an allowed loopback host; from start to stop, the recorder sees nothing (no font download, no model hoster
check, no ONNX Runtime telemetry; the URL fetch goes direct, never through a proxy)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from paddlex_npu import envs
from paddlex_npu.samples import assets
from tests.serve.conftest import free_ports, server_env, stop, wait_until
from tests.serve.proxy_recorder import ProxyRecorder

# What the test leaves to serve: the off switches a user would not know to set.
UNSET = tuple(var.name for var, _ in envs.EGRESS_DEFAULTS) + (envs.PDX_FONT.name,)
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the test's own calls: no proxy


def _post(url: str, payload: dict) -> tuple:
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with DIRECT.open(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _ready(url: str) -> bool:
    with DIRECT.open(url + "/ready", timeout=5) as r:
        return r.status == 200


@pytest.fixture(scope="module")
def drawing_pipeline(asset_root, tmp_path_factory) -> Path:
    """The OCR pipeline with PaddleX's serving defaults (result images drawn)."""
    path = tmp_path_factory.mktemp("egress") / "ocr.yaml"
    path.write_text(yaml.safe_dump(assets.ocr_pipeline_config(asset_root / "om")), encoding="utf-8")
    return path


def _through(recorder: ProxyRecorder, env: dict) -> dict:
    """``env`` without the off switches left to paddlex-npu, its proxy variables pointing at ``recorder``."""
    env = {k: v for k, v in env.items() if k not in UNSET and not k.lower().endswith("_proxy")}
    return {**env, **recorder.environment()}


# The `paddlex-npu` console script as installed (its argv[0] is `paddlex-npu` when paddlex_npu is imported: the
# package then installs nothing at import), run from this worktree.
SCRIPT = "import sys; sys.argv[0] = 'paddlex-npu'; from paddlex_npu.cli import main; sys.exit(main())"


@pytest.mark.parametrize("launch", [["-m", "paddlex_npu.cli"], ["-c", SCRIPT]], ids=["python-m", "script"])
def test_serve_opens_no_connection_of_its_own(drawing_pipeline, internal, images, tmp_path, launch):
    (port,) = free_ports(1)
    url, log = f"http://127.0.0.1:{port}", tmp_path / "serve.log"
    with ProxyRecorder() as recorder:
        env = _through(recorder, server_env())
        cmd = [sys.executable, *launch, "serve", str(drawing_pipeline), "--port", str(port)]
        cmd += ["--workers", "1", "--allow-url-host", "127.0.0.2"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            why = wait_until(lambda: _ready(url), proc, 240, log)
            assert why is None, why
            b64 = base64.b64encode(images["english"].read_bytes()).decode()
            for file in (b64, internal["allowed"].url + "/file/english.png", b64):
                status, answer = _post(url + "/ocr", {"file": file, "fileType": 1})
                assert status == 200, answer
                assert answer["result"]["ocrResults"][0]["ocrImage"], "no result image drawn"
        finally:
            stop(proc)  # telemetry may flush at exit: checked after it
        assert recorder.seen == [], (recorder.seen, log.read_text(errors="replace")[-2000:])


def test_the_triton_server_opens_no_connection_of_its_own(drawing_pipeline, internal, images, tmp_path):
    pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
    httpclient = pytest.importorskip("tritonclient.http")
    import numpy as np

    from paddlex_npu.serve.fetch import UrlPolicy
    from paddlex_npu.triton.repo import TritonOptions, build_triton_repo
    from tests.serve.conftest import start_tritonserver, wait_for_tritonserver

    urls = UrlPolicy(("127.0.0.2",), option="triton-repo --allow-url-host")
    repo = build_triton_repo(drawing_pipeline, tmp_path / "repo", TritonOptions(runtime="reference", urls=urls))
    b64 = base64.b64encode(images["english"].read_bytes()).decode()
    with ProxyRecorder() as recorder:
        server = start_tritonserver(repo.root, tmp_path, lambda env: _through(recorder, env))
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}", network_timeout=120.0)
        try:
            wait_for_tritonserver(server, client)
            for file in (b64, internal["allowed"].url + "/file/english.png"):
                inp = httpclient.InferInput("input", [1, 1], "BYTES")
                inp.set_data_from_numpy(np.array([[json.dumps({"file": file, "fileType": 1}).encode()]], np.object_))
                answer = json.loads(client.infer("ocr", [inp]).as_numpy("output")[0, 0])
                assert answer["errorCode"] == 0 and answer["result"]["ocrResults"][0]["ocrImage"], answer
        finally:
            client.close()
            stop(server.proc)
        assert recorder.seen == [], (recorder.seen, server.log.read_text(errors="replace")[-2000:])
