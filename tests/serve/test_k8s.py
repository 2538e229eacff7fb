"""``paddlex-npu k8s``: the manifests for serve and Triton validate offline against the Kubernetes 1.37 schemas
(kubernetes-validate, strict) and pass checkov with no failed check (every option combination below), run non-root
and read-only as Pod Security *restricted* asks, ask for the NPU resource by its real names, wait for the load in
the startup probe, keep a pod ready while enough workers are, drain within the grace period, mount the models
from a PVC (a hostPath only when asked) and carry one scrape path; bad options are refused naming the option."""

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
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "NetworkPolicy"}  # one replica: no PDB
    pod = kinds["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["huawei.com/Ascend310P"] == "1"
    assert c["resources"]["requests"]["huawei.com/Ascend310P"] == "1"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    # the startup probe waits for the load (readiness), up to the load deadline; readiness needs 1 worker
    assert c["startupProbe"]["httpGet"]["path"] == c["readinessProbe"]["httpGet"]["path"] == "/ready?min-workers=1"
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600
    assert c["args"][:3] == ["paddlex-npu", "serve", "/etc/paddlex-npu/pipeline.yaml"]
    assert "--log-format" in c["args"] and "npu:0" in c["args"]
    grace = float(c["args"][c["args"].index("--shutdown-grace") + 1])
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    # the pod may take the preStop wait, the 503 grace and the drain of requests in flight before it is killed
    assert pod["spec"]["terminationGracePeriodSeconds"] >= pre_stop + grace + k8s.SERVE_DRAIN_TIMEOUT
    # one scrape path: the pods, not the Service too
    ann = pod["metadata"]["annotations"]
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    assert not any(k.startswith("prometheus.io") for k in kinds["Service"]["metadata"].get("annotations", {}))
    # the pipeline goes in the ConfigMap, its model_dirs under the model volume's mount
    config = yaml.safe_load(kinds["ConfigMap"]["data"]["pipeline.yaml"])
    dirs = [m["model_dir"] for m in config["SubModules"].values()]
    assert dirs == ["/models/PP-OCRv4_mobile_det", "/models/PP-OCRv4_mobile_rec"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["models"] == {
        "name": "models",
        "persistentVolumeClaim": {"claimName": "paddlex-npu-models", "readOnly": True},
    }
    assert not any("hostPath" in v for v in volumes.values())  # Pod Security baseline refuses hostPath
    assert kinds["Service"]["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    assert kinds["NetworkPolicy"]["spec"]["egress"] == []  # offline: nothing out


def test_the_pod_is_what_pod_security_restricted_admits(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", run_as_user=1001))
    spec = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["fsGroup"] == 1000 and "supplementalGroups" not in spec["securityContext"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == 1001
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for writable in (k8s.CACHE_DIR, "/tmp"):  # the writable folders of a read-only root: emptyDirs
        assert not mounts[writable].get("readOnly") and "emptyDir" in volumes[mounts[writable]["name"]]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK"] == "True"
    assert env["PADDLE_PDX_LOCAL_FONT_FILE_PATH"] == k8s.FONT and env["HOME"] == k8s.CACHE_DIR
    other = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", device_group=1005))
    spec = _by_kind(other)["Deployment"]["spec"]["template"]["spec"]
    assert spec["securityContext"]["supplementalGroups"] == [1005]  # /dev/davinci*'s group


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
    assert set(kinds) == {
        "ConfigMap",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    }
    pod = kinds["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"]["huawei.com/Ascend310P-2c"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert "triton-repo" in c["args"][2] and "exec paddlex-npu triton-serve" in c["args"][2]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8002"  # Triton's own metrics port
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "om-packages"
    # the Python backend's shared memory: a sized memory emptyDir on /dev/shm
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    # two replicas or more: one at a time through a drain, spread over nodes
    assert kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 4)
    assert hpa["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
    assert all(o["metadata"]["namespace"] == "ocr" for o in objects)


@pytest.mark.parametrize(
    "options, volume",
    [
        ({"models_host_path": "/data/om"}, {"hostPath": {"path": "/data/om", "type": "Directory"}}),
        ({"models_in_image": True}, None),
    ],
    ids=["host-path", "in-image"],
)
def test_the_model_volume_by_option(pipeline, options, volume):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", **options))
    k8s.validate(objects)
    spec = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"] for m in spec["containers"][0]["volumeMounts"]}
    if volume is None:  # the packages are in the image: no volume, no mount, the model_dirs still under /models
        assert "models" not in volumes and "models" not in mounts
    else:
        assert {k: v for k, v in volumes["models"].items() if k != "name"} == volume and "models" in mounts


def test_readiness_threshold_and_load_deadline(pipeline):
    options = k8s.K8sOptions(image="paddlex-npu:1", workers=2, npus=2, ready_min_workers=3, load_timeout=905)
    (c,) = _by_kind(k8s.manifests("serve", pipeline, options))["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready?min-workers=3"
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 905


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


@pytest.mark.parametrize(
    "resource",
    [
        "Ascend910",
        "huawei.com/Ascend310",
        "Ascend910-4c",
        "Ascend310P-4c.3cpu.ndvpp",
        "npu",  # MindCluster, newer chips
        "huawei.com/npu-core",  # Volcano's dynamic vNPU
        "Ascend910B3",  # HAMi
        "Ascend910C",
        "Ascend910B4-1",
    ],
)
def test_npu_resource_names(resource):
    assert k8s.npu_resource(resource) == (resource if "/" in resource else f"huawei.com/{resource}")


def test_hami_s_memory_companion(pipeline):
    options = k8s.K8sOptions(image="paddlex-npu:1", npu_resource="Ascend910B3", npu_memory=16384)
    objects = k8s.manifests("serve", pipeline, options)
    k8s.validate(objects)
    (c,) = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"] == {
        "cpu": "2",
        "memory": "8Gi",
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "16384",
    }


@pytest.mark.parametrize(
    "options, first, says",
    [
        ({"npu_resource": "nvidia.com/gpu"}, "--npu-resource", "'nvidia.com/gpu' is not an NPU resource of Ascend"),
        ({"npu_resource": "Ascend910B9"}, "--npu-resource", "'Ascend910B9' is not an NPU resource"),
        ({"npu_resource": "npu-core", "npus": 2}, "--npus 2", "a container takes one vNPU; give --npus 1"),
        (
            {"npu_resource": "Ascend910", "npu_memory": 4096},
            "--npu-memory",
            "only HAMi's resources (huawei.com/Ascend910B3, ...) have a -memory",
        ),
        ({"ready_min_workers": 3}, "--ready-min-workers 3", "give 1 to the pod's workers (2 per NPU x 1 NPU(s) = 2)"),
        ({"models_pvc": "x", "models_in_image": True}, "--models-pvc", "the model volume is one of them"),
        ({"run_as_user": 0}, "--run-as-user", "root is refused"),
        ({"shm_size": "1 GB"}, "--shm-size", "'1 GB' is not a Kubernetes quantity"),
        ({"npu_resource": "Ascend310P-2c", "npus": 2}, "--npus 2", "a container takes one vNPU; give --npus 1"),
        ({"name": "OCR_server"}, "--name", "'OCR_server': give a DNS label"),
        ({"models_root": "/nowhere"}, "SubModules.TextDetection.model_dir", "not under the models root /nowhere"),
        ({"hpa_max_replicas": 1, "replicas": 2}, "--hpa-max-replicas", "1 is below --replicas 2"),
        ({"image": "a b"}, "--image", "'a b': give the image reference"),
        ({"memory": "8 GB"}, "--memory", "'8 GB' is not a Kubernetes quantity: give e.g. 8Gi"),
        ({"cpu": "two"}, "--cpu", "'two' is not a Kubernetes quantity"),
    ],
    ids=[
        "gpu",
        "unknown-chip",
        "npu-core-count",
        "memory-without-hami",
        "min-workers",
        "two-volumes",
        "root",
        "shm",
        "vnpu-count",
        "name",
        "models-root",
        "hpa",
        "image",
        "memory",
        "cpu",
    ],
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
    assert files == [
        "configmap.yaml",
        "deployment.yaml",
        "horizontalpodautoscaler.yaml",
        "networkpolicy.yaml",
        "service.yaml",
    ]
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
    assert out.stderr.startswith("paddlex-npu k8s: --npu-resource 'gpu' is not an NPU resource of Ascend's device")
