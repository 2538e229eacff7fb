"""``paddlex-npu k8s``: the manifests for serve and Triton validate offline against the Kubernetes 1.37 schemas
(kubernetes-validate, strict), ask the Ascend device plugin for the NPU resource, probe /health and /ready, drain
within the grace period, mount the models and carry the scrape annotations; bad options are refused naming the
option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddlex_npu.deploy import k8s
from paddlex_npu.errors import ConfigError

pytest.importorskip("kubernetes_validate", reason="the manifests are checked with requirements/serving.txt")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A pipeline YAML whose models live under <tmp>/models (the folders need not hold packages: nothing loads)."""
    from paddlex_npu.samples import assets

    root = tmp_path_factory.mktemp("k8s")
    path = root / "ocr.yaml"
    path.write_text(yaml.safe_dump(assets.ocr_pipeline_config(root / "models")), encoding="utf-8")
    return path


def _by_kind(objects):
    return {o["kind"]: o for o in objects}


def test_serve_manifests_validate_and_ask_for_the_npu(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="registry.example.com/paddlex-npu:1"))
    k8s.validate(objects)
    kinds = _by_kind(objects)
    assert set(kinds) == {"ConfigMap", "Deployment", "Service"}
    pod = kinds["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["huawei.com/Ascend310P"] == "1"
    assert c["resources"]["requests"]["huawei.com/Ascend310P"] == "1"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health" and c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["args"][:3] == ["paddlex-npu", "serve", "/etc/paddlex-npu/pipeline.yaml"]
    assert "--log-format" in c["args"] and "npu:0" in c["args"]
    grace = float(c["args"][c["args"].index("--shutdown-grace") + 1])
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    # the pod may take the preStop wait, the 503 grace and the drain of requests in flight before it is killed
    assert pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop + grace + k8s.SERVE_DRAIN_TIMEOUT
    ann = pod["metadata"]["annotations"]
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    # the pipeline goes in the ConfigMap, its model_dirs under the model volume's mount
    config = yaml.safe_load(kinds["ConfigMap"]["data"]["pipeline.yaml"])
    dirs = [m["model_dir"] for m in config["SubModules"].values()]
    assert dirs == ["/models/PP-OCRv4_mobile_det", "/models/PP-OCRv4_mobile_rec"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["models"]["hostPath"]["path"] == str((pipeline.parent / "models").resolve())
    assert kinds["Service"]["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]


def test_triton_manifests_with_a_pvc_a_vnpu_and_an_hpa_validate(pipeline):
    options = k8s.K8sOptions(
        image="paddlex-npu:1",
        name="ocr-triton",
        namespace="ocr",
        npu_resource="Ascend310P-2c",
        models_pvc="om-packages",
        hpa_max_replicas=4,
        replicas=2,
    )
    objects = k8s.manifests("triton", pipeline, options)
    k8s.validate(objects)
    kinds = _by_kind(objects)
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"}
    pod = kinds["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["huawei.com/Ascend310P-2c"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert "triton-repo" in c["args"][2] and "exec paddlex-npu triton-serve" in c["args"][2]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8002"  # Triton's own metrics port
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "om-packages"
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 4)
    assert hpa["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
    assert all(o["metadata"]["namespace"] == "ocr" for o in objects)


@pytest.mark.parametrize(
    "kind, series", [("serve", "paddlex_npu_requests_in_flight"), ("triton", "nv_inference_pending_request_count")]
)
def test_an_hpa_on_requests_in_flight_validates(pipeline, kind, series):
    options = k8s.K8sOptions(image="paddlex-npu:1", workers=3, npus=2, hpa_max_replicas=5, hpa_metric="in-flight")
    objects = k8s.manifests(kind, pipeline, options)
    k8s.validate(objects)
    (metric,) = _by_kind(objects)["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == series
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "6"}  # one per worker


@pytest.mark.parametrize("resource", ["Ascend910", "huawei.com/Ascend310", "Ascend910-4c", "Ascend310P-4c.3cpu.ndvpp"])
def test_npu_resource_names(resource):
    assert k8s.npu_resource(resource).startswith("huawei.com/Ascend")


@pytest.mark.parametrize(
    "options, first, says",
    [
        ({"npu_resource": "nvidia.com/gpu"}, "--npu-resource", "'nvidia.com/gpu' is not a resource of the Ascend"),
        ({"npu_resource": "Ascend310P-2c", "npus": 2}, "--npus 2", "a container takes one vNPU; give --npus 1"),
        ({"name": "OCR_server"}, "--name", "'OCR_server': give a DNS label"),
        ({"models_root": "/nowhere"}, "SubModules.TextDetection.model_dir", "not under the models root /nowhere"),
        ({"hpa_max_replicas": 1, "replicas": 2}, "--hpa-max-replicas", "1 is below --replicas 2"),
        ({"image": "a b"}, "--image", "'a b': give the image reference"),
        ({"memory": "8 GB"}, "--memory", "'8 GB' is not a Kubernetes quantity: give e.g. 8Gi"),
        ({"cpu": "two"}, "--cpu", "'two' is not a Kubernetes quantity"),
    ],
    ids=["gpu", "vnpu-count", "name", "models-root", "hpa", "image", "memory", "cpu"],
)
def test_bad_options_are_refused_naming_the_option(pipeline, options, first, says):
    with pytest.raises(ConfigError) as err:
        k8s.manifests("serve", pipeline, k8s.K8sOptions(**{"image": "paddlex-npu:1", **options}))
    assert str(err.value).startswith(first) and says in str(err.value), str(err.value)


def test_to_yaml_reads_back_as_the_objects(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", hpa_max_replicas=2))
    text = k8s.to_yaml(objects)
    assert list(yaml.safe_load_all(text)) == objects and "*id" not in text


def test_validate_names_the_object_and_the_fault():
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": "http"}]}}
    with pytest.raises(ConfigError, match=r"^Service x: 'http' is not of type"):
        k8s.validate([bad])


def test_cli_writes_files_that_validate(pipeline, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "k8s", "serve", str(pipeline), "--image", "paddlex-npu:1"]
        + ["-o", str(tmp_path / "m"), "--npu-resource", "Ascend910", "--npus", "2", "--hpa-max-replicas", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert "&id" not in (tmp_path / "m" / "deployment.yaml").read_text()  # plain YAML, no anchors
    assert files == ["configmap.yaml", "deployment.yaml", "horizontalpodautoscaler.yaml", "service.yaml"]
    objects = [yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "m").iterdir())]
    k8s.validate(objects)
    (c,) = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["huawei.com/Ascend910"] == "2" and "npu:0,1" in c["args"]
    assert f"kubectl apply -f {tmp_path / 'm'}" in out.stdout
    assert "checked against the Kubernetes 1.37.0 schemas" in out.stdout


def test_cli_refuses_a_bad_resource_with_the_option_named(pipeline, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "k8s", "serve", str(pipeline), "--image", "x:1"]
        + ["-o", str(tmp_path / "m"), "--npu-resource", "gpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("paddlex-npu k8s: --npu-resource 'gpu' is not a resource of the Ascend device plugin")
