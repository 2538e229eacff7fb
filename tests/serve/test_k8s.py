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


SECRETS = {"tls_secret": "ocr-tls", "token_secret": "ocr.tokens", "metrics_tokens": True}


def _pod(objects):
    return _by_kind(objects)["Deployment"]["spec"]["template"]


def test_tls_and_token_secrets_are_mounted_read_only_and_passed_to_serve(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", **SECRETS))
    k8s.validate(objects)
    pod = _pod(objects)
    (c,) = pod["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"] == {
        "name": "tls",
        "secret": {
            "secretName": "ocr-tls",
            "defaultMode": 0o400,
            "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
        },
    }
    assert volumes["tokens"] == {
        "name": "tokens",
        "secret": {
            "secretName": "ocr.tokens",
            "defaultMode": 0o400,
            "items": [{"key": "api.tokens", "path": "api.tokens"}, {"key": "metrics.tokens", "path": "metrics.tokens"}],
        },
    }
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/paddlex-npu-tls", "readOnly": True}
    assert mounts["tokens"] == {"name": "tokens", "mountPath": "/etc/paddlex-npu-tokens", "readOnly": True}
    # not under the read-only ConfigMap mount (the runtime could not make the mount point there)
    assert not any(m["mountPath"].startswith(k8s.CONFIG_DIR + "/") for m in c["volumeMounts"])
    # 0400 files are root's: the process reads them through the fsGroup the kubelet gives them, its own gid
    assert pod["spec"]["securityContext"]["fsGroup"] == c["securityContext"]["runAsGroup"]
    assert c["args"][-8:] == [
        "--tls-certfile",
        "/etc/paddlex-npu-tls/tls.crt",
        "--tls-keyfile",
        "/etc/paddlex-npu-tls/tls.key",
        "--token-file",
        "/etc/paddlex-npu-tokens/api.tokens",
        "--metrics-token-file",
        "/etc/paddlex-npu-tokens/metrics.tokens",
    ]
    assert c["ports"] == [{"name": "https", "containerPort": 8080, "protocol": "TCP"}]
    # the probes over HTTPS on the open paths (no token needed)
    assert [c[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")] == [
        {"path": "/ready?min-workers=1", "port": "https", "scheme": "HTTPS"},
        {"path": "/health", "port": "https", "scheme": "HTTPS"},
        {"path": "/ready?min-workers=1", "port": "https", "scheme": "HTTPS"},
    ]
    assert pod["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    assert _by_kind(objects)["Service"]["spec"]["ports"] == [
        {"name": "https", "port": 8080, "targetPort": "https", "protocol": "TCP", "appProtocol": "https"}
    ]
    policy = _by_kind(objects)["NetworkPolicy"]["spec"]
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}] and policy["egress"] == []


def test_tokens_alone_keep_http_and_mount_only_the_api_tokens(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", token_secret="ocr-tokens"))
    k8s.validate(objects)
    pod = _pod(objects)
    (c,) = pod["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "tls" not in volumes
    assert volumes["tokens"]["secret"]["items"] == [{"key": "api.tokens", "path": "api.tokens"}]
    assert c["args"][-2:] == ["--token-file", "/etc/paddlex-npu-tokens/api.tokens"]
    assert not any(a.startswith(("--tls", "--metrics-token")) for a in c["args"])
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}  # plain HTTP: no scheme
    assert "prometheus.io/scheme" not in pod["metadata"]["annotations"]
    assert _by_kind(objects)["Service"]["spec"]["ports"][0]["name"] == "http"


def test_tls_alone_mounts_no_tokens(pipeline):
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", tls_secret="ocr-tls"))
    pod = _pod(objects)
    assert [v["name"] for v in pod["spec"]["volumes"]][-1] == "tls"
    assert not any(a.startswith("--token") or a.startswith("--metrics") for a in pod["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    "kind, options, says",
    [
        ("serve", {"tls_secret": "OCR_tls"}, "--tls-secret 'OCR_tls' is not a Secret name: give the name of an"),
        ("serve", {"token_secret": "-tokens"}, "--token-secret '-tokens' is not a Secret name"),
        ("serve", {"token_secret": "a." * 126 + "ab"}, "is not a Secret name"),  # 254 characters
        ("serve", {"tls_secret": ""}, "--tls-secret '' is not a Secret name"),  # an unset variable: not plain HTTP
        ("triton", {"tls_secret": "ocr-tls"}, "--tls-secret with triton: tritonserver's HTTP endpoint has no TLS"),
        ("triton", {"token_secret": "ocr-tokens"}, "--token-secret with triton"),
        ("serve", {"metrics_tokens": True}, "--metrics-tokens without --token-secret: give --token-secret NAME"),
    ],
    ids=["tls-name", "token-name", "too-long", "empty", "triton-tls", "triton-tokens", "metrics-alone"],
)
def test_bad_secret_options_are_refused_naming_the_cause_and_the_fix(pipeline, kind, options, says):
    with pytest.raises(ConfigError) as err:
        k8s.manifests(kind, pipeline, k8s.K8sOptions(image="paddlex-npu:1", **options))
    assert says in str(err.value), str(err.value)


def test_a_secret_name_of_253_characters_with_dots_is_taken(pipeline):
    name = "a." * 126 + "a"
    objects = k8s.manifests("serve", pipeline, k8s.K8sOptions(image="paddlex-npu:1", token_secret=name))
    assert {v["name"]: v for v in _pod(objects)["spec"]["volumes"]}["tokens"]["secret"]["secretName"] == name


def _local_args(args, dirs, port):
    """The container's args for a serve on this machine: the Secrets' and ConfigMap's folders moved to ``dirs``,
    loopback, ``port``, the reference runtime."""
    local = [sys.executable, "-m", "paddlex_npu.cli"] + args[1:]
    for mount, folder in dirs.items():
        local = [str(folder) + a[len(mount) :] if a.startswith(mount + "/") else a for a in local]
    for option, value in (("--host", "127.0.0.1"), ("--port", str(port)), ("--runtime", "reference")):
        local[local.index(option) + 1] = value
    return local


def test_serve_runs_with_the_generated_args_and_answers_its_probes_over_https(pipeline_yaml, asset_root, tmp_path):
    """The CLI's manifests, then serve started with the Deployment's args over files laid out as the ConfigMap and
    the Secrets would be: the probes answer 200 over HTTPS with no token, the API wants one, the metrics token
    opens /metrics."""
    import ssl
    import urllib.error
    import urllib.request

    from tests.serve.conftest import free_ports, server_env, stop, wait_until
    from tests.serve.internal_host import self_signed

    models = asset_root / "om"  # mounted where it is here: the ConfigMap's model_dirs are the local ones
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "k8s", "serve", str(pipeline_yaml), "--image", "paddlex-npu:1"]
        + ["-o", str(tmp_path / "m"), "--workers", "1", "--models-root", str(models), "--models-mount", str(models)]
        + ["--tls-secret", "ocr-tls", "--token-secret", "ocr-tokens", "--metrics-tokens"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "note: the pods start once the Secret ocr-tls exists" in out.stdout
    assert "note: with tokens, /metrics answers 401 to a scrape without one" in out.stdout
    objects = [yaml.safe_load(p.read_text()) for p in sorted((tmp_path / "m").iterdir())]
    k8s.validate(objects)
    (c,) = _pod(objects)["spec"]["containers"]
    dirs = {k8s.CONFIG_DIR: tmp_path / "config", k8s.TLS_DIR: tmp_path / "tls", k8s.TOKENS_DIR: tmp_path / "tokens"}
    for folder in dirs.values():
        folder.mkdir()
    (dirs[k8s.CONFIG_DIR] / "pipeline.yaml").write_text(_by_kind(objects)["ConfigMap"]["data"]["pipeline.yaml"])
    cert, key = self_signed(tmp_path / "made")
    api, scraper = "api-" + "0123abcd" * 4, "metrics-" + "4567efef" * 4
    files = {"tls/tls.crt": cert.read_bytes(), "tls/tls.key": key.read_bytes()}
    files.update({"tokens/api.tokens": api.encode(), "tokens/metrics.tokens": scraper.encode()})
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o400)
    (port,) = free_ports(1)
    log = tmp_path / "serve.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(_local_args(c["args"], dirs, port), env=server_env(), stdout=sink, stderr=sink)
    context = ssl.create_default_context(cafile=str(cert))

    def get(path, token=None, body=None):
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=body, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=context) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        ready = c["readinessProbe"]["httpGet"]
        why = wait_until(lambda: get(ready["path"]) == 200, proc, 240, log)
        assert why is None, why
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"]["scheme"] == "HTTPS" and get(c[probe]["httpGet"]["path"]) == 200, probe
        assert get("/ocr", body=b"{}") == 401 and get("/ocr", scraper, b"{}") == 401
        assert get("/ocr", api, b"{}") == 422  # past the token: the body is checked
        assert get("/metrics") == 401 and get("/metrics", scraper) == 200
    finally:
        stop(proc)


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
