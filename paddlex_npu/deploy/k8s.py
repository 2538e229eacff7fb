"""Kubernetes manifests for ``paddlex-npu serve`` or ``triton-serve`` on Ascend nodes (``paddlex-npu k8s``).

:func:`manifests` returns plain objects (dicts): a ConfigMap holding the pipeline YAML (its ``model_dir`` paths
rewritten to where the model volume is mounted), a Deployment whose container asks the Ascend device plugin
for its NPU resource (``huawei.com/Ascend310P: 1`` by default), and a Service; optionally a
HorizontalPodAutoscaler. The pods probe liveness on ``/health`` (Triton: ``/v2/health/live``) and readiness on
``/ready`` (``/v2/health/ready``), wait in ``preStop`` for the endpoints to drop them, then drain within the
grace period, and carry Prometheus scrape annotations. :func:`to_yaml` and :func:`write` render them; nothing
here talks to a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from ..errors import ConfigError
from ..paddlex.pipelines import load_config

KINDS = ("serve", "triton")
HPA_METRICS = ("cpu", "in-flight")
# The per-pod series an in-flight HPA reads (served to the HPA by prometheus-adapter from the scraped metrics).
IN_FLIGHT_SERIES = {"serve": "paddlex_npu_requests_in_flight", "triton": "nv_inference_pending_request_count"}
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend310P"
CONFIG_DIR = "/etc/paddlex-npu"
CACHE_DIR = "/var/cache/paddlex-npu"  # PADDLEX_NPU_CACHE: Triton's backend files, the model repository
TRITON_EXIT_TIMEOUT = 30  # tritonserver's --exit-timeout-secs default: how long it waits for requests in flight
SERVE_DRAIN_TIMEOUT = 60  # ServeOptions.drain_timeout: the longest wait for requests in flight
# The device plugin's resources: whole NPUs (huawei.com/Ascend910, Ascend310P, Ascend310) and vNPUs cut by
# MindCluster from a 910 or 310P (e.g. huawei.com/Ascend310P-2c, Ascend910-4c, Ascend310P-4c.3cpu.ndvpp).
_RESOURCE = re.compile(r"^huawei\.com/Ascend(910|310P|310)(-[0-9]+c(\.[0-9]+cpu)?(\.[0-9]+g)?(\.n?dvpp)?)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")  # e.g. 500m, 2, 8Gi
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")


@dataclass
class K8sOptions:
    image: str
    name: str = "paddlex-npu"
    namespace: Optional[str] = None
    replicas: int = 1
    npu_resource: str = DEFAULT_NPU_RESOURCE
    npus: int = 1  # NPUs per pod: the server uses npu:0..npus-1 (logical ids inside the container)
    workers: int = 2  # serve: worker processes per NPU; triton: model instances per NPU
    models_root: Optional[Path] = None  # the local folder the model volume holds (default: the model_dirs' parent)
    models_host_path: Optional[str] = None  # the node's folder (hostPath); default models_root
    models_pvc: Optional[str] = None  # or a PersistentVolumeClaim holding the same tree
    models_mount: str = "/models"
    port: Optional[int] = None  # serve 8080; triton's HTTP port 8000 (gRPC 8001, metrics 8002)
    shutdown_grace: float = 5.0  # serve: seconds answering 503 after SIGTERM
    pre_stop_seconds: int = 5  # wait before SIGTERM while the endpoints controller drops the pod
    cpu: str = "2"
    memory: str = "8Gi"
    hpa_max_replicas: Optional[int] = None  # an HPA from replicas up to this many
    hpa_cpu_percent: int = 70
    hpa_metric: str = "cpu"  # or "in-flight": requests in flight per pod, through prometheus-adapter
    hpa_in_flight: Optional[int] = None  # the in-flight target per pod (default: workers x npus, one per worker)
    node_selector: Dict[str, str] = field(default_factory=dict)
    mount_driver: bool = False  # hostPath-mount the Ascend driver (clusters without the Ascend docker runtime)
    log_format: str = "json"


def npu_resource(name: str) -> str:
    """The device plugin's resource name: ``Ascend910`` / ``Ascend310P-2c`` / ``huawei.com/Ascend310`` ->
    ``huawei.com/...``, checked."""
    full = name if "/" in name else f"huawei.com/{name}"
    if not _RESOURCE.match(full):
        raise ConfigError(
            f"--npu-resource {name!r} is not a resource of the Ascend device plugin: give huawei.com/Ascend310P "
            "(the default), huawei.com/Ascend910, huawei.com/Ascend310, or a vNPU such as huawei.com/Ascend310P-2c"
        )
    return full


def _check(kind: str, options: K8sOptions) -> str:
    if kind not in KINDS:
        raise ConfigError(f"k8s {kind!r}: give serve or triton")
    if not _NAME.match(options.name):
        raise ConfigError(
            f"--name {options.name!r}: give a DNS label (lower-case letters, digits and '-', at most 52 characters)"
        )
    if not options.image or any(c.isspace() for c in options.image):
        raise ConfigError(
            f"--image {options.image!r}: give the image reference, e.g. registry.example.com/paddlex-npu:1"
        )
    resource = npu_resource(options.npu_resource)
    if resource.count("-") and options.npus != 1:
        raise ConfigError(f"--npus {options.npus} with the vNPU {resource}: a container takes one vNPU; give --npus 1")
    for what, value in (("--replicas", options.replicas), ("--npus", options.npus), ("--workers", options.workers)):
        if value < 1:
            raise ConfigError(f"{what} {value}: give 1 or more")
    if options.models_host_path and options.models_pvc:
        raise ConfigError("--models-host-path and --models-pvc both given: the model volume is one or the other")
    if options.hpa_max_replicas is not None and options.hpa_max_replicas < options.replicas:
        raise ConfigError(
            f"--hpa-max-replicas {options.hpa_max_replicas} is below --replicas {options.replicas}: give at least that"
        )
    for what, value, example in (("--cpu", options.cpu, "2 or 500m"), ("--memory", options.memory, "8Gi")):
        if not _QUANTITY.match(str(value)):
            raise ConfigError(f"{what} {value!r} is not a Kubernetes quantity: give e.g. {example}")
    if options.hpa_metric not in HPA_METRICS:
        raise ConfigError(f"--hpa-metric {options.hpa_metric!r}: give one of {', '.join(HPA_METRICS)}")
    if not PurePosixPath(options.models_mount).is_absolute():
        raise ConfigError(
            f"--models-mount {options.models_mount!r}: give an absolute path in the container, e.g. /models"
        )
    return resource


def _model_dirs(config: Any, where: str = "") -> List[Tuple[Dict[str, Any], str]]:
    """(the dict holding it, where) of every ``model_dir`` in a pipeline config (SubModules, SubPipelines)."""
    found = []
    if isinstance(config, dict):
        if isinstance(config.get("model_dir"), str):
            found.append((config, f"{where}.model_dir" if where else "model_dir"))
        for key, value in config.items():
            found += _model_dirs(value, f"{where}.{key}" if where else str(key))
    return found


def container_config(pipeline: Any, options: K8sOptions) -> Tuple[Dict[str, Any], Path]:
    """(the pipeline config with each model_dir under the mount, the local models root it was relative to)."""
    import os

    config = load_config(pipeline)
    holders = _model_dirs(config)
    if not holders:
        raise ConfigError("the pipeline config names no model_dir: give each SubModule the model_dir of its OM package")
    local = [Path(h["model_dir"]).expanduser().resolve() for h, _ in holders]
    root = Path(options.models_root).expanduser().resolve() if options.models_root else None
    if root is None:
        root = Path(os.path.commonpath([str(p) for p in local]))
        root = root.parent if root in local else root  # one model: the volume holds its parent folder
    for (holder, where), path in zip(holders, local):
        try:
            rel = path.relative_to(root)
        except ValueError:
            raise ConfigError(
                f"{where}: {path} is not under the models root {root}: give --models-root a folder holding every "
                "model_dir of the pipeline"
            ) from None
        holder["model_dir"] = str(PurePosixPath(options.models_mount) / rel.as_posix())
    return config, root


def _probe(path: str, port: str, period: int, failures: int, timeout: int = 5) -> Dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def manifests(kind: str, pipeline: Any, options: K8sOptions) -> List[Dict[str, Any]]:
    """The objects for ``kind`` (``serve`` or ``triton``) serving ``pipeline`` (a YAML path or config)."""
    resource = _check(kind, options)
    config, root = container_config(pipeline, options)
    name, devices = options.name, ",".join(str(i) for i in range(options.npus))
    labels = {"app.kubernetes.io/name": "paddlex-npu", "app.kubernetes.io/instance": name}
    meta = {"name": name, "labels": labels, **({"namespace": options.namespace} if options.namespace else {})}
    cfg_path = f"{CONFIG_DIR}/pipeline.yaml"
    if kind == "serve":
        port = options.port or 8080
        ports = [("http", port)]
        metrics_port, metrics_path = port, "/metrics"
        args = ["paddlex-npu", "serve", cfg_path, "--host", "0.0.0.0", "--port", str(port)]
        args += ["--workers", str(options.workers), "--device", f"npu:{devices}", "--runtime", "ais_bench"]
        args += ["--shutdown-grace", f"{options.shutdown_grace:g}", "--log-format", options.log_format]
        live, ready = "/health", "/ready"
        drain = options.shutdown_grace + SERVE_DRAIN_TIMEOUT
    else:
        port = options.port or 8000
        ports = [("http", port), ("grpc", port + 1), ("metrics", port + 2)]
        metrics_port, metrics_path = port + 2, "/metrics"
        repo = f"{CACHE_DIR}/repository"
        args = [
            "sh",
            "-c",
            f"paddlex-npu triton-repo {cfg_path} {repo} --device npu:{devices} --instances {options.workers} "
            f"--runtime ais_bench && exec paddlex-npu triton-serve {repo} --host 0.0.0.0 --http-port {port} "
            f"--grpc-port {port + 1} --metrics-port {port + 2}",
        ]
        live, ready = "/v2/health/live", "/v2/health/ready"
        drain = TRITON_EXIT_TIMEOUT
    grace = int(options.pre_stop_seconds + drain + 10)
    volumes: List[Dict[str, Any]] = [
        {"name": "pipeline", "configMap": {"name": f"{name}-pipeline"}},
        {"name": "cache", "emptyDir": {}},
    ]
    if options.models_pvc:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": options.models_pvc, "readOnly": True}})
    else:
        host = options.models_host_path or str(root)
        volumes.append({"name": "models", "hostPath": {"path": host, "type": "Directory"}})
    mounts = [
        {"name": "pipeline", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "cache", "mountPath": CACHE_DIR},
        {"name": "models", "mountPath": options.models_mount, "readOnly": True},
    ]
    if options.mount_driver:
        for vol, path in (("ascend-driver", "/usr/local/Ascend/driver"), ("npu-smi", "/usr/local/sbin/npu-smi")):
            volumes.append({"name": vol, "hostPath": {"path": path}})
            mounts.append({"name": vol, "mountPath": path, "readOnly": True})
    container = {
        "name": kind,
        "image": options.image,
        "args": args,
        "env": [
            {"name": "PADDLEX_NPU_RUNTIME", "value": "ais_bench"},
            {"name": "PADDLEX_NPU_CACHE", "value": CACHE_DIR},
        ],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports],
        "resources": {
            "requests": {"cpu": options.cpu, "memory": options.memory, resource: str(options.npus)},
            "limits": {"memory": options.memory, resource: str(options.npus)},
        },
        # loading and warming every gear can take minutes: the startup probe holds liveness off until then
        "startupProbe": _probe(live, "http", 10, 60),
        "livenessProbe": _probe(live, "http", 10, 3),
        "readinessProbe": _probe(ready, "http", 5, 1, timeout=3),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(options.pre_stop_seconds)]}}},
        "volumeMounts": mounts,
    }
    pod_spec: Dict[str, Any] = {
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "volumes": volumes,
    }
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(metrics_port),
        "prometheus.io/path": metrics_path,
    }
    objects: List[Dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "name": f"{name}-pipeline"},
            "data": {"pipeline.yaml": yaml.safe_dump(config, sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": options.replicas,
                "selector": {"matchLabels": labels},
                # one pod at a time: a new pod needs free NPUs on some node before an old one goes
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta, "annotations": annotations},
            "spec": {
                "selector": labels,
                "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ports],
            },
        },
    ]
    if options.hpa_max_replicas is not None:
        objects.append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": meta,
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": options.replicas,
                    "maxReplicas": options.hpa_max_replicas,
                    "metrics": [_hpa_metric(kind, options)],
                },
            }
        )
    return objects


def _hpa_metric(kind: str, options: K8sOptions) -> Dict[str, Any]:
    if options.hpa_metric == "cpu":
        target = {"type": "Utilization", "averageUtilization": options.hpa_cpu_percent}
        return {"type": "Resource", "resource": {"name": "cpu", "target": target}}
    per_pod = options.hpa_in_flight or options.workers * options.npus
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": IN_FLIGHT_SERIES[kind]},
            "target": {"type": "AverageValue", "averageValue": str(per_pod)},
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """No anchors or aliases (``&id001`` / ``*id001``) where one dict appears twice (the labels)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: Sequence[Dict[str, Any]]) -> str:
    """One multi-document YAML (``kubectl apply -f`` takes it)."""
    return yaml.dump_all(list(objects), Dumper=_PlainDumper, sort_keys=False)


def write(objects: Sequence[Dict[str, Any]], out_dir: Path) -> List[Path]:
    """One file per object in ``out_dir`` (``kubectl apply -f out_dir``): ``<kind>.yaml``, lower-case."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for obj in objects:
        path = out_dir / f"{obj['kind'].lower()}.yaml"
        path.write_text(yaml.dump(obj, Dumper=_PlainDumper, sort_keys=False), encoding="utf-8")
        written.append(path)
    return written


def validate(objects: Sequence[Dict[str, Any]], kubernetes_version: str = "1.37.0") -> str:
    """Check each object against the Kubernetes schemas (kubernetes-validate, offline, strict: unknown fields
    refused); raises ConfigError naming the object and the first line of what is wrong. Returns the version."""
    try:
        import kubernetes_validate
    except ImportError as exc:
        raise ConfigError(f"kubernetes-validate is not installed ({exc}): pip install kubernetes-validate") from exc
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: {first}") from None
    return kubernetes_version
