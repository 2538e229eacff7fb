"""``paddlex-npu ray-serve`` on the real two-node local cluster (simulated NPUs), Serve's HTTP proxy on loopback,
queried with a plain HTTP client: PaddleX's ``/ocr`` schema with the same answers as the in-process pipeline (as
``paddlex-npu serve`` answers), a bad request gets a 4xx with the message and the server keeps serving, the
autoscaling config reaches Serve as given, and Ctrl-C (SIGTERM) takes the application down."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("fastapi", reason="serving needs requirements/serving.txt (installed into .venv by setup.sh)")

from tests.http_client import call, ocr_body  # noqa: E402
from tests.serve.conftest import free_ports, stop, wait_until  # noqa: E402

AUTOSCALING = {"min_replicas": 1, "initial_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2}
NAME = "ocr-test"
NOT_AN_IMAGE = json.dumps({"file": base64.b64encode(b"no image").decode(), "fileType": 1})


def _ocr(url, path, **extra):
    return call(url + "/ocr", ocr_body(path, **extra))


def _health(url) -> bool:
    with urllib.request.urlopen(url + "/health", timeout=5) as r:
        return r.status == 200


@pytest.fixture(scope="module")
def server(cluster, ocr_config, sim_env, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ray_serve")
    pipeline = folder / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump({**ocr_config, "Serving": {"visualize": False}}), encoding="utf-8")
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    log = folder / "ray-serve.log"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-serve", str(pipeline), "--address", cluster.address]
    cmd += [
        "--port",
        str(port),
        "--proxy-location",
        "HeadOnly",
        "--name",
        NAME,
        "--autoscaling",
        json.dumps(AUTOSCALING),
        "--max-body-mb",
        "4",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, **sim_env}, stdout=out, stderr=subprocess.STDOUT)
    why = wait_until(lambda: _health(url), proc, 300, log)
    assert why is None, why
    try:
        yield {"url": url, "proc": proc, "log": log}
    finally:
        stop(proc)


def test_answers_equal_the_in_process_pipeline(server, npu_pipeline, images):
    for key in ("english", "page"):
        status, ans = _ocr(server["url"], images[key], logId=key)
        assert status == 200 and ans["errorCode"] == 0 and ans["logId"] == key, ans
        (theirs,) = list(npu_pipeline.predict(str(images[key])))
        got = ans["result"]["ocrResults"][0]["prunedResult"]
        assert got["rec_texts"] == list(theirs["rec_texts"])
        np.testing.assert_allclose(got["rec_scores"], theirs["rec_scores"], atol=1e-5)
        np.testing.assert_array_equal(got["rec_boxes"], np.asarray(theirs["rec_boxes"]))


@pytest.mark.parametrize(
    "body, ctype, status, says",
    [
        (NOT_AN_IMAGE, "application/json", 422, "Invalid"),
        (json.dumps({"fileType": 1}), "application/json", 422, "body.file"),
        ("file=x", "application/x-www-form-urlencoded", 415, "Content-Type must be application/json"),
        (json.dumps({"file": "x" * (5 << 20), "fileType": 1}), "application/json", 413, "--max-body-mb"),
    ],
    ids=["not-an-image", "no-file", "not-json", "too-large"],
)
def test_a_bad_request_gets_a_4xx_with_the_message_and_the_server_keeps_serving(
    server, images, body, ctype, status, says
):
    got, ans = call(server["url"] + "/ocr", body.encode(), ctype=ctype)
    assert got == status and says in ans["errorMsg"], ans
    ok, again = _ocr(server["url"], images["english"])
    assert ok == 200 and again["result"]["ocrResults"][0]["prunedResult"]["rec_texts"], again


def test_the_autoscaling_config_reaches_serve(server):
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()  # what `serve status` and the dashboard show
    (deployment,) = details["applications"][NAME]["deployments"].values()
    config = deployment["deployment_config"]
    assert {k: config["autoscaling_config"][k] for k in AUTOSCALING} == AUTOSCALING
    assert config["ray_actor_options"]["resources"] == {"NPU": 1.0}


def test_sigterm_takes_the_application_down(server):
    from ray import serve

    server["proc"].send_signal(signal.SIGTERM)
    assert server["proc"].wait(60) == 0, server["log"].read_text(errors="replace")[-3000:]
    assert "stopped" in server["log"].read_text(errors="replace")
    assert NAME not in serve.status().applications
