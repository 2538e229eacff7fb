"""The Serve application deployed by config, as a platform deploys it: ``serve deploy`` of the KubeRay
RayService's ``serveConfigV2`` (``examples/ray/rayservice.yaml``, checked against KubeRay's CRD schema) through the
head's dashboard, on the real two-node local cluster (simulated NPUs); it answers ``/ocr`` as the in-process
pipeline does. Then a replica whose device is lost (the simulated device's fault) answers, fails Serve's health
check, is replaced, and the service answers again by itself."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("fastapi", reason="serving needs requirements/serving.txt (installed into .venv by setup.sh)")

from tests.helpers import REPO  # noqa: E402
from tests.ray.test_ray_serve import _ocr  # noqa: E402
from tests.serve.conftest import free_ports  # noqa: E402

EXAMPLE = REPO / "examples" / "ray" / "rayservice.yaml"
CRD_SCHEMA = REPO / "tests" / "data" / "kuberay" / "rayservice-v1.schema.json.gz"
APP = "paddlex-npu"


def _serve_config() -> dict:
    return yaml.safe_load(yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["spec"]["serveConfigV2"])


def test_the_rayservice_example_is_valid_for_kuberay_and_for_serve():
    import jsonschema
    from ray.serve.schema import ServeDeploySchema

    schema = json.loads(gzip.decompress(CRD_SCHEMA.read_bytes()))["openAPIV3Schema"]
    service = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    jsonschema.validate(service, schema)
    with pytest.raises(jsonschema.ValidationError):  # the schema does refuse a wrong field
        jsonschema.validate({**service, "spec": {**service["spec"], "serveConfigV2": {"applications": []}}}, schema)
    config = ServeDeploySchema.model_validate(_serve_config())
    (app,) = config.applications
    assert app.import_path == "paddlex_npu.ray.serving:app_builder" and app.args["pipeline"] == "/models/ocr.yaml"


def test_the_app_builder_names_a_bad_argument():
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.ray.serving import app_builder

    with pytest.raises(ConfigError, match="app_builder args: pipeline: Field required.*its fields: pipeline"):
        app_builder({"replicas": 2})


def test_the_app_builder_takes_the_url_policy_and_tokens(tmp_path):
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.ray.serving import AppArgs, guard_of

    tokens = tmp_path / "api.tokens"
    tokens.write_text("api-" + "a1b2c3d4" * 4 + "\n")
    args = {"pipeline": "/models/ocr.yaml", "allow_url_hosts": ["images.example.com"], "url_timeout": 5}
    guard = guard_of(AppArgs.model_validate({**args, "url_max_mb": 2, "token_file": str(tokens)}))
    assert guard["urls"].allow == ("images.example.com",) and guard["urls"].timeout == 5
    assert guard["urls"].max_bytes == 2 * 1024 * 1024 and guard["tokens"].api == ("api-" + "a1b2c3d4" * 4,)
    off = guard_of(AppArgs.model_validate({"pipeline": "/models/ocr.yaml"}))["urls"]
    assert not off.enabled and "app_builder args allow_url_hosts" in off.option  # URL inputs off by default
    with pytest.raises(ConfigError, match="app_builder args: .*allow_url_hosts"):
        guard_of(AppArgs.model_validate({**args, "allow_url_hosts": ["http://x"]}))
    with pytest.raises(ConfigError, match="token file .* cannot be read"):
        guard_of(AppArgs.model_validate({**args, "token_file": str(tmp_path / "none")}))


@pytest.fixture(scope="module")
def deployed(cluster, ocr_config, sim_env, tmp_path_factory):
    """serveConfigV2 of the example, its paths made this machine's, deployed with `serve deploy`."""
    from ray import serve

    folder = tmp_path_factory.mktemp("serve_deploy")
    pipeline = folder / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump({**ocr_config, "Serving": {"visualize": False}}), encoding="utf-8")
    config = _serve_config()
    (port,) = free_ports(1)
    config.update(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    (app,) = config["applications"]
    app["args"] = {"pipeline": str(pipeline), "num_replicas": 1, "health_check_period_s": 1}
    # the simulated device loses its context at the 12th device call of each replica process (det + rec of
    # the first requests answer), as a lost NPU context would
    app["runtime_env"] = {"env_vars": {**sim_env, "PADDLEX_NPU_SIM_DEVICE_LOST": "12"}}
    path = folder / "serve_config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    serve.shutdown()  # a Serve of an earlier module (its proxy options) is not this config's
    cmd = [str(Path(sys.executable).parent / "serve"), "deploy", str(path), "--address", cluster.dashboard_url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while serve.status().applications.get(APP) is None or serve.status().applications[APP].status != "RUNNING":
        assert time.monotonic() < deadline, serve.status()
        time.sleep(1)
    try:
        yield url
    finally:
        serve.delete(APP)


def test_serve_deploy_of_the_config_starts_the_app_and_it_answers(deployed, npu_pipeline, images):
    status, ans = _ocr(deployed, images["english"], logId="deployed")
    assert status == 200 and ans["logId"] == "deployed", ans
    (theirs,) = list(npu_pipeline.predict(str(images["english"])))
    assert ans["result"]["ocrResults"][0]["prunedResult"]["rec_texts"] == list(theirs["rec_texts"])


def test_the_replica_s_stage_and_device_series_reach_ray_s_metrics(deployed, images):
    """Scraped from the nodes' Ray metrics endpoints, as Ray's Prometheus would."""
    import ray
    from prometheus_client.parser import text_string_to_metric_families

    assert _ocr(deployed, images["english"])[0] == 200
    ports = [n["MetricsExportPort"] for n in ray.nodes() if n["Alive"]]
    deadline, found = time.monotonic() + 90, {}
    while time.monotonic() < deadline and not {"stage", "device"} <= set(found):
        for port in ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    text = r.read().decode()
            except OSError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "ray_paddlex_npu_stage_seconds_count" and sample.value > 0:
                        found.setdefault("stage", set()).add(sample.labels["stage"])
                    if sample.name.startswith("ray_paddlex_npu_device_calls") and sample.value > 0:
                        found.setdefault("device", set()).add(sample.labels["model"])
        time.sleep(2)
    assert {"pre", "model", "post", "device"} <= found.get("stage", set()), found
    assert found.get("device"), found


def test_a_replica_whose_device_is_lost_is_replaced_and_service_comes_back(deployed, images):
    from ray import serve

    def replica_ids():
        details = serve.status().applications[APP].deployments[APP]
        return details.replica_states

    lost = None
    for _ in range(20):  # bounded: the fault comes at the replica's 12th device call
        status, ans = _ocr(deployed, images["english"])
        if status != 200:
            lost = (status, ans)
            break
    assert lost is not None and lost[0] == 503 and "DeviceLostError" in lost[1]["errorMsg"], lost
    assert "acl.rt.get_last_error) is 507015" in lost[1]["errorMsg"], lost  # the call said "[-1]": run/ asked ACL
    deadline, back = time.monotonic() + 180, None
    while time.monotonic() < deadline:  # Serve's health check fails, the replica is replaced
        status, ans = _ocr(deployed, images["english"])
        if status == 200:
            back = ans
            break
        time.sleep(1)
    assert back is not None and back["result"]["ocrResults"][0]["prunedResult"]["rec_texts"], replica_ids()
