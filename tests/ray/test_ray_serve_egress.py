"""No outbound connection nobody asked for, from a Ray Serve replica: a one-node Ray cluster started here as an
operator would (``ray start --head`` on loopback, Ray's own usage report turned off as docs/scale-out.md says),
with the proxy variables pointing at a recorder and none of the libraries' other off switches set, then
``paddlex-npu ray-serve`` with result images drawn and a URL input from an allowed host; from start to stop the
recorder sees nothing but the head's own usage report (below). (The session's shared cluster cannot show it: its
raylets inherited this test process's environment, where ``import paddlex_npu`` already set the switches.)

Ray's head is the operator's, not paddlex-npu's: Ray 2.60's dashboard (``usage_stats_head.py``, ``run``) probes the
clouds' metadata addresses and reports "usage stats disabled" to usage-stats.ray.io even with
``RAY_USAGE_STATS_ENABLED=0``; docs/scale-out.md says so. Those connections are told apart by their host; the
cluster's own loopback traffic is kept off the proxy by ``NO_PROXY``, as an operator behind an egress proxy sets it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("fastapi", reason="serving needs requirements/serving.txt (installed into .venv by setup.sh)")

from paddlex_npu import envs  # noqa: E402
from paddlex_npu.samples import assets  # noqa: E402
from tests.http_client import ocr_body  # noqa: E402
from tests.ray.conftest import CHIP_TYPE  # noqa: E402
from tests.serve.conftest import free_ports, stop, wait_until  # noqa: E402
from tests.serve.internal_host import InternalHost  # noqa: E402
from tests.serve.proxy_recorder import ProxyRecorder  # noqa: E402
from tests.serve.test_egress import DIRECT, UNSET, _through  # noqa: E402

# What Ray's head opens by itself (ray/_common/usage/usage_lib.py: get_cloud_from_metadata_requests, the report URL)
RAY_HEAD_OWN = ("usage-stats.ray.io:443", "http://169.254.169.254/", "http://metadata.google.internal/")


def _post(url: str, body: bytes) -> tuple:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with DIRECT.open(req, timeout=120) as r:  # the test's own calls: never through the recorder
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _health(url: str) -> bool:
    with DIRECT.open(url + "/health", timeout=5) as r:
        return r.status == 200


def test_a_ray_serve_replica_opens_no_connection_of_its_own(asset_root, sim_env, images, tmp_path):
    pipeline = tmp_path / "ocr.yaml"  # PaddleX's serving defaults: result images drawn (the font PaddleX fetches)
    pipeline.write_text(yaml.safe_dump(assets.ocr_pipeline_config(asset_root / "om")), encoding="utf-8")
    gcs, port = free_ports(2)
    resources = json.dumps({"NPU": 1, f"accelerator_type:{CHIP_TYPE}": 1})
    files = {"english.png": images["english"].read_bytes()}
    with ProxyRecorder() as recorder, InternalHost(files, address="127.0.0.2") as allowed:
        env = _through(recorder, {**os.environ, **sim_env})
        assert not set(UNSET) & set(env)
        env.update({envs.RAY_USAGE.name: "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
        env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        ray = str(Path(sys.executable).parent / "ray")
        head_cmd = [ray, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs)]
        head_cmd += ["--num-cpus", "2", "--resources", resources, "--include-dashboard", "false"]
        head_log, serve_log = tmp_path / "head.log", tmp_path / "ray-serve.log"
        with open(head_log, "wb") as out:
            head = subprocess.Popen(head_cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-serve", str(pipeline), "--address", f"127.0.0.1:{gcs}"]
        cmd += [
            "--port",
            str(port),
            "--name",
            "ocr-egress",
            "--allow-url-host",
            "127.0.0.2",
            "--connect-timeout",
            "120",
        ]
        proc = None
        try:
            why = wait_until(lambda: _listening(gcs), head, 120, head_log)  # the head's GCS, before the driver
            assert why is None, why
            with open(serve_log, "wb") as out:
                proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
            why = wait_until(lambda: _health(url), proc, 300, serve_log)
            assert why is None, (why, head_log.read_text(errors="replace")[-2000:])
            for file in (images["english"], allowed.url + "/file/english.png"):
                status, answer = _post(url + "/ocr", ocr_body(file))
                assert status == 200, answer
                assert answer["result"]["ocrResults"][0]["ocrImage"], "no result image drawn"
        finally:
            if proc is not None:
                stop(proc)
            stop(head)  # the replica's exit (telemetry may flush then) comes before the check
        ours = [line for line in recorder.seen if not any(host in line for host in RAY_HEAD_OWN)]
        assert ours == [], (ours, serve_log.read_text(errors="replace")[-2000:])
