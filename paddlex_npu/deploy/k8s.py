"""Kubernetes manifests for ``paddlex-npu serve`` or ``triton-serve`` on Ascend nodes (``paddlex-npu k8s``).

:func:`manifests` returns plain objects (dicts) that a cluster enforcing Pod Security *restricted* admits: a
ConfigMap holding the pipeline YAML (its ``model_dir`` paths rewritten to where the model volume is mounted), a
Deployment whose container asks for its NPU resource (``huawei.com/Ascend310P: 1`` by default), a Service, a
NetworkPolicy (the listening ports in, nothing out: the server runs offline); with two replicas or more a
PodDisruptionBudget and spreading over nodes; optionally a HorizontalPodAutoscaler.

The pod runs as a non-root uid/gid (1000:1000 by default: the image's user and, on most Ascend hosts, the driver's
HwHiAiUser, whose group owns /dev/davinci*) that must own, or share the group of, the OM packages it mounts (ais_bench
refuses others); no privilege escalation, every capability dropped, seccomp ``RuntimeDefault``, a read-only root
file system with ``emptyDir``s for the cache and ``/tmp``, no service account token. The models come from a PVC
(default ``<name>-models``) or the image itself; a ``hostPath`` only when asked, and Pod Security *baseline*
refuses it. The startup probe waits for the load (``/ready``) with a deadline; readiness keeps a pod in the Service
while at least ``ready_min_workers`` of its workers are ready; one scrape path (the pod's annotations). What
checkov would flag and the project leaves to the user carries checkov's skip annotation with the reason
(:data:`CHECKOV_SKIPS`). :func:`to_yaml` and :func:`write` render them; nothing here talks to a cluster.

serve with HTTPS and bearer tokens (docs/threat-model.md): ``tls_secret`` names a ``kubernetes.io/tls`` Secret
(``tls.crt``, ``tls.key``) and ``token_secret`` an Opaque Secret holding ``api.tokens`` (and, with
``metrics_tokens``, ``metrics.tokens``), both created by the user and mounted read-only (mode 0400; the pod's
fsGroup, which is its gid, adds group read) outside the ConfigMap's folder; serve gets the matching options, the
port is named ``https`` and the probes use HTTPS (``/health`` and ``/ready`` need no token).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from ..errors import ConfigError
from ..paddlex.pipelines import MODEL_KEY, load_config, sub_modules

KINDS = ("serve", "triton")
HPA_METRICS = ("cpu", "in-flight")
# The per-pod series an in-flight HPA reads (served to the HPA by prometheus-adapter from the scraped metrics).
IN_FLIGHT_SERIES = {"serve": "paddlex_npu_requests_in_flight", "triton": "nv_inference_pending_request_count"}
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend310P"
CONFIG_DIR = "/etc/paddlex-npu"
CACHE_DIR = "/var/cache/paddlex-npu"  # PADDLEX_NPU_CACHE and HOME: Triton's backend files, the model repository
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"  # the image's font (deploy/Dockerfile's FONT)
TRITON_EXIT_TIMEOUT = 30  # tritonserver's --exit-timeout-secs default: how long it waits for requests in flight
SERVE_DRAIN_TIMEOUT = 60  # ServerSettings.drain_timeout: the longest wait for requests in flight
TLS_DIR = "/etc/paddlex-npu-tls"  # the TLS Secret's mount (not under CONFIG_DIR: that mount is read-only)
TOKENS_DIR = "/etc/paddlex-npu-tokens"  # the token Secret's mount
TLS_KEYS = ("tls.crt", "tls.key")  # a kubernetes.io/tls Secret's keys (kubectl create secret tls)
API_TOKENS_KEY, METRICS_TOKENS_KEY = "api.tokens", "metrics.tokens"  # serve's --token-file, --metrics-token-file
SECRET_MODE = 0o400  # read by the owner only; the pod's fsGroup (its own gid) adds group read
STARTUP_PERIOD = 10  # seconds between startup probes: the load deadline is counted in these
# --mount-driver (nodes without the Ascend docker runtime): what ACL and npu-smi need from the host, read-only
DRIVER_MOUNTS = (
    ("ascend-driver", "/usr/local/Ascend/driver", "Directory"),  # the driver's libraries ACL loads
    ("dcmi", "/usr/local/dcmi", "Directory"),  # the DCMI library npu-smi loads
    ("npu-smi", "/usr/local/sbin/npu-smi", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),  # where the driver is installed
)
# NPU resources: Ascend's device plugin (whole chips huawei.com/Ascend910 / Ascend310P / Ascend310 and MindCluster's
# static vNPUs such as Ascend310P-2c), MindCluster's huawei.com/npu (newer chips) and Volcano's dynamic vNPU
# huawei.com/npu-core, and HAMi's per-chip names (its ascend-device-configmap: Ascend910A, Ascend910B2, Ascend910B3,
# Ascend910B4, Ascend910B4-1, Ascend910C, Ascend310P), which take a -memory companion (MiB of device memory).
_DEVICE_PLUGIN = re.compile(r"^huawei\.com/Ascend(910|310P|310)(-[0-9]+c(\.[0-9]+cpu)?(\.[0-9]+g)?(\.n?dvpp)?)?$")
_MINDCLUSTER = re.compile(r"^huawei\.com/npu(-core)?$")
_HAMI = re.compile(r"^huawei\.com/Ascend(910A|910B2|910B3|910B4|910B4-1|910C|310P)$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")  # e.g. 500m, 2, 8Gi
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")
# a Secret's name: a DNS-1123 subdomain (at most 253 characters: checked apart)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# checkov checks these manifests do not pass by design, each with the reason written into the manifest
# (metadata.annotations "checkov.io/skip<N>": "<check>=<reason>"); docs/deployment.md lists them too.
CHECKOV_SKIPS = {
    "CKV_K8S_40": "the uid must be the owner of the OM packages and the driver's HwHiAiUser on the node (1000 on most "
    "Ascend hosts), not a high uid: give --run-as-user to change it",
    "CKV_K8S_43": "the image digest is the user's to pin: give --image REGISTRY/IMAGE@sha256:... and this skip goes",
    "CKV_K8S_21": "no --namespace given: kubectl applies to its context's namespace; give --namespace to pin it",
}


@dataclass
class K8sOptions:
    image: str
    name: str = "paddlex-npu"
    namespace: Optional[str] = None
    replicas: int = 1
    npu_resource: str = DEFAULT_NPU_RESOURCE
    npus: int = 1  # NPUs per pod: the server uses npu:0..npus-1 (logical ids inside the container)
    npu_memory: Optional[int] = None  # HAMi: MiB of device memory per NPU (the <resource>-memory companion)
    workers: int = 2  # serve: worker processes per NPU; triton: model instances per NPU
    ready_min_workers: int = 1  # serve: the pod stays ready while at least this many workers are
    load_timeout: int = 600  # seconds the startup probe waits for the load before the container is restarted
    models_root: Optional[Path] = None  # the local folder the model volume holds (default: the model_dirs' parent)
    models_pvc: Optional[str] = None  # the PersistentVolumeClaim holding that tree (default: <name>-models)
    models_host_path: Optional[str] = None  # or the node's folder (hostPath: Pod Security baseline refuses it)
    models_in_image: bool = False  # or no volume: the packages are baked into the image under models_mount
    models_mount: str = "/models"
    run_as_user: int = 1000  # the owner of the OM packages (ais_bench refuses others)
    run_as_group: int = 1000  # their group, and fsGroup of the emptyDirs
    device_group: int = 1000  # the group owning /dev/davinci* on the node (the driver's HwHiAiUser)
    port: Optional[int] = None  # serve 8080; triton's HTTP port 8000 (gRPC 8001, metrics 8002)
    shutdown_grace: float = 5.0  # serve: seconds answering 503 after SIGTERM
    pre_stop_seconds: int = 5  # wait before SIGTERM while the endpoints controller drops the pod
    cpu: str = "2"
    memory: str = "8Gi"
    shm_size: str = "1Gi"  # triton: /dev/shm, where its Python backend passes tensors (64 MiB in a pod otherwise)
    hpa_max_replicas: Optional[int] = None  # an HPA from replicas up to this many
    hpa_cpu_percent: int = 70
    hpa_metric: str = "cpu"  # or "in-flight": requests in flight per pod, through prometheus-adapter
    hpa_in_flight: Optional[int] = None  # the in-flight target per pod (default: workers x npus, one per worker)
    node_selector: Dict[str, str] = field(default_factory=dict)
    mount_driver: bool = False  # hostPath-mount the Ascend driver (clusters without the Ascend docker runtime)
    log_format: str = "json"
    tls_secret: Optional[str] = None  # serve: a kubernetes.io/tls Secret (tls.crt, tls.key): HTTPS
    token_secret: Optional[str] = None  # serve: an Opaque Secret holding api.tokens: bearer tokens
    metrics_tokens: bool = False  # serve: the token Secret also holds metrics.tokens (a scraper's tokens)


def npu_resource(name: str) -> str:
    """The NPU resource name: ``Ascend910`` / ``Ascend310P-2c`` / ``npu`` / ``huawei.com/Ascend910B3`` ->
    ``huawei.com/...``, checked."""
    full = name if "/" in name else f"huawei.com/{name}"
    if not any(r.match(full) for r in (_DEVICE_PLUGIN, _MINDCLUSTER, _HAMI)):
        raise ConfigError(
            f"--npu-resource {name!r} is not an NPU resource of Ascend's device plugin, MindCluster or HAMi: give "
            "huawei.com/Ascend310P (the default), Ascend910, Ascend310, a vNPU such as Ascend310P-2c, npu or "
            "npu-core (MindCluster, Volcano), or HAMi's Ascend910B3, Ascend910C, ..."
        )
    return full


def _check_resource(options: K8sOptions) -> str:
    resource = npu_resource(options.npu_resource)
    if (resource.count("-") or resource.endswith("npu-core")) and options.npus != 1:
        raise ConfigError(f"--npus {options.npus} with the vNPU {resource}: a container takes one vNPU; give --npus 1")
    if options.npu_memory is not None and not _HAMI.match(resource):
        raise ConfigError(
            f"--npu-memory with {resource}: only HAMi's resources (huawei.com/Ascend910B3, ...) have a -memory "
            "companion; drop --npu-memory or give HAMi's resource name"
        )
    return resource


def _check_secrets(kind: str, options: K8sOptions) -> None:
    secrets = (("--tls-secret", options.tls_secret), ("--token-secret", options.token_secret))
    given = [(option, name) for option, name in secrets if name is not None]  # "" too: an unset variable, refused
    for option, name in given:
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            raise ConfigError(
                f"{option} {name!r} is not a Secret name: give the name of an existing Secret, a DNS-1123 subdomain "
                "(lower-case letters, digits, '-' and '.', beginning and ending with a letter or digit, at most 253 "
                "characters), e.g. paddlex-npu-tls"
            )
    if given and kind != "serve":
        raise ConfigError(
            f"{given[0][0]} with triton: tritonserver's HTTP endpoint has no TLS or bearer tokens in this package; "
            "drop the option, or keep Triton's ports inside the cluster behind a gateway (docs/threat-model.md)"
        )
    if options.metrics_tokens and not options.token_secret:
        raise ConfigError(
            "--metrics-tokens without --token-secret: give --token-secret NAME, the Secret holding api.tokens and "
            "metrics.tokens"
        )


def _check(kind: str, options: K8sOptions) -> str:
    if kind not in KINDS:
        raise ConfigError(f"k8s {kind!r}: give serve or triton")
    _check_secrets(kind, options)
    if not _NAME.match(options.name):
        raise ConfigError(
            f"--name {options.name!r}: give a DNS label (lower-case letters, digits and '-', at most 52 characters)"
        )
    if not options.image or any(c.isspace() for c in options.image):
        raise ConfigError(
            f"--image {options.image!r}: give the image reference, e.g. registry.example.com/paddlex-npu:1"
        )
    resource = _check_resource(options)
    for what, value in (("--replicas", options.replicas), ("--npus", options.npus), ("--workers", options.workers)):
        if value < 1:
            raise ConfigError(f"{what} {value}: give 1 or more")
    if not 1 <= options.ready_min_workers <= options.workers * options.npus:
        raise ConfigError(
            f"--ready-min-workers {options.ready_min_workers}: give 1 to the pod's workers "
            f"({options.workers} per NPU x {options.npus} NPU(s) = {options.workers * options.npus})"
        )
    if sum(map(bool, (options.models_host_path, options.models_pvc, options.models_in_image))) > 1:
        raise ConfigError("--models-pvc, --models-host-path and --models-in-image: the model volume is one of them")
    if options.hpa_max_replicas is not None and options.hpa_max_replicas < options.replicas:
        raise ConfigError(
            f"--hpa-max-replicas {options.hpa_max_replicas} is below --replicas {options.replicas}: give at least that"
        )
    quantities = (("--cpu", options.cpu, "2 or 500m"), ("--memory", options.memory, "8Gi"))
    for what, value, example in quantities + (("--shm-size", options.shm_size, "1Gi"),):
        if not _QUANTITY.match(str(value)):
            raise ConfigError(f"{what} {value!r} is not a Kubernetes quantity: give e.g. {example}")
    if options.hpa_metric not in HPA_METRICS:
        raise ConfigError(f"--hpa-metric {options.hpa_metric!r}: give one of {', '.join(HPA_METRICS)}")
    if not PurePosixPath(options.models_mount).is_absolute():
        raise ConfigError(
            f"--models-mount {options.models_mount!r}: give an absolute path in the container, e.g. /models"
        )
    if min(options.run_as_user, options.run_as_group, options.device_group) < 1:
        raise ConfigError("--run-as-user, --run-as-group and --device-group: give ids above 0 (root is refused)")
    return resource


def _model_dirs(config: Dict[str, Any]) -> List[Tuple[Dict[str, Any], str]]:
    """(the dict holding it, where) of every ``model_dir`` in a pipeline config (its SubModules, SubPipelines
    recursed: :func:`~..paddlex.pipelines.sub_modules`), or of a model spec."""
    holders = [("", config)] if MODEL_KEY in config else sub_modules(config)
    return [
        (sub, f"{where}.{MODEL_KEY}" if where else MODEL_KEY)
        for where, sub in holders
        if isinstance(sub.get(MODEL_KEY), str)
    ]


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


@dataclass
class _Server:
    """What differs between serve and Triton: the command, the ports, the probe paths, the drain."""

    args: List[str]
    ports: List[Tuple[str, int]]
    metrics_port: int
    live: str  # liveness: the process answers
    ready: str  # readiness, and the startup probe: loaded (serve: at least ready_min_workers workers)
    drain: float  # seconds after SIGTERM until the server has answered what it holds


def _server(kind: str, options: K8sOptions) -> _Server:
    cfg_path, devices = f"{CONFIG_DIR}/pipeline.yaml", ",".join(str(i) for i in range(options.npus))
    if kind == "serve":
        port = options.port or 8080
        args = ["paddlex-npu", "serve", cfg_path, "--host", "0.0.0.0", "--port", str(port)]
        args += ["--workers", str(options.workers), "--device", f"npu:{devices}", "--runtime", "ais_bench"]
        args += ["--shutdown-grace", f"{options.shutdown_grace:g}", "--log-format", options.log_format]
        args += _access_args(options)
        ready = f"/ready?min-workers={options.ready_min_workers}"
        drain = options.shutdown_grace + SERVE_DRAIN_TIMEOUT
        return _Server(args, [(_scheme(options), port)], port, "/health", ready, drain)
    port = options.port or 8000
    repo = f"{CACHE_DIR}/repository"
    script = (
        f"paddlex-npu triton-repo {cfg_path} {repo} --device npu:{devices} --instances {options.workers} "
        f"--runtime ais_bench && exec paddlex-npu triton-serve {repo} --host 0.0.0.0 --http-port {port} "
        f"--grpc-port {port + 1} --metrics-port {port + 2}"
    )
    ports = [("http", port), ("grpc", port + 1), ("metrics", port + 2)]
    return _Server(["sh", "-c", script], ports, port + 2, "/v2/health/live", "/v2/health/ready", TRITON_EXIT_TIMEOUT)


def _scheme(options: K8sOptions) -> str:
    """``https`` with a TLS Secret, else ``http``: the port's name, and the probes' and the scrape's scheme."""
    return "https" if options.tls_secret else "http"


def _access_args(options: K8sOptions) -> List[str]:
    """serve's TLS and token options, reading the files where :func:`_secret_volumes` mounts the Secrets."""
    args: List[str] = []
    if options.tls_secret:
        args += ["--tls-certfile", f"{TLS_DIR}/{TLS_KEYS[0]}", "--tls-keyfile", f"{TLS_DIR}/{TLS_KEYS[1]}"]
    if options.token_secret:
        args += ["--token-file", f"{TOKENS_DIR}/{API_TOKENS_KEY}"]
    if options.metrics_tokens:
        args += ["--metrics-token-file", f"{TOKENS_DIR}/{METRICS_TOKENS_KEY}"]
    return args


def _secret_volumes(options: K8sOptions) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(volumes, volumeMounts) of the TLS and token Secrets: only the keys serve reads (a missing key stops the
    pod at the mount, naming it), read-only, mode 0400."""
    found: List[Tuple[str, str, str, Sequence[str]]] = []
    if options.tls_secret:
        found.append(("tls", options.tls_secret, TLS_DIR, TLS_KEYS))
    if options.token_secret:
        keys = (API_TOKENS_KEY, METRICS_TOKENS_KEY) if options.metrics_tokens else (API_TOKENS_KEY,)
        found.append(("tokens", options.token_secret, TOKENS_DIR, keys))
    volumes = [
        {
            "name": vol,
            "secret": {
                "secretName": secret,
                "defaultMode": SECRET_MODE,
                "items": [{"key": k, "path": k} for k in keys],
            },
        }
        for vol, secret, _, keys in found
    ]
    mounts = [{"name": vol, "mountPath": path, "readOnly": True} for vol, _, path, _ in found]
    return volumes, mounts


def _probe(path: str, period: int, failures: int, timeout: int = 5, scheme: str = "http") -> Dict[str, Any]:
    get: Dict[str, Any] = {"path": path, "port": scheme}  # the port's name is the scheme's
    if scheme == "https":  # the kubelet does not check the certificate
        get["scheme"] = "HTTPS"
    return {
        "httpGet": get,
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def _volumes(kind: str, options: K8sOptions, root: Path) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(volumes, volumeMounts): the pipeline, the writable emptyDirs, the models, Triton's /dev/shm, the driver."""
    volumes: List[Dict[str, Any]] = [
        {"name": "pipeline", "configMap": {"name": f"{options.name}-pipeline"}},
        {"name": "cache", "emptyDir": {"sizeLimit": "2Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    mounts = [
        {"name": "pipeline", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "cache", "mountPath": CACHE_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if options.models_host_path:  # Pod Security baseline refuses hostPath: only when asked
        volumes.append({"name": "models", "hostPath": {"path": options.models_host_path, "type": "Directory"}})
    elif not options.models_in_image:
        claim = options.models_pvc or f"{options.name}-models"
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
    if not options.models_in_image:
        mounts.append({"name": "models", "mountPath": options.models_mount, "readOnly": True})
    if kind == "triton":  # the Python backend's tensors go through /dev/shm (64 MiB in a pod without this)
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if options.mount_driver:
        for vol, path, host_type in DRIVER_MOUNTS:
            volumes.append({"name": vol, "hostPath": {"path": path, "type": host_type}})
            mounts.append({"name": vol, "mountPath": path, "readOnly": True})
    secret_volumes, secret_mounts = _secret_volumes(options)
    return volumes + secret_volumes, mounts + secret_mounts


def _resources(options: K8sOptions, resource: str) -> Dict[str, Any]:
    npu = {resource: str(options.npus)}
    if options.npu_memory is not None:
        npu[f"{resource}-memory"] = str(options.npu_memory)
    return {
        "requests": {"cpu": options.cpu, "memory": options.memory, **npu},
        "limits": {"cpu": options.cpu, "memory": options.memory, **npu},
    }


def _container(kind: str, options: K8sOptions, server: _Server, resource: str, mounts: List[Dict[str, Any]]) -> Dict:
    startup_failures = max(1, math.ceil(options.load_timeout / STARTUP_PERIOD))
    scheme = _scheme(options)
    env = {
        "PADDLEX_NPU_RUNTIME": "ais_bench",
        "PADDLEX_NPU_CACHE": CACHE_DIR,
        "HOME": CACHE_DIR,
        "PADDLE_PDX_CACHE_HOME": f"{CACHE_DIR}/paddlex",
        "PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK": "True",  # offline: no check of PaddleX's model hosters
        "PADDLE_PDX_LOCAL_FONT_FILE_PATH": FONT,  # offline: PaddleX draws results with the image's font
    }
    return {
        "name": kind,
        "image": options.image,
        "imagePullPolicy": "Always",
        "args": server.args,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in server.ports],
        "resources": _resources(options, resource),
        # the load (every gear warmed) may take minutes: the startup probe waits for readiness up to the deadline,
        # then liveness takes over; a load that hangs is restarted
        "startupProbe": _probe(server.ready, STARTUP_PERIOD, startup_failures, scheme=scheme),
        "livenessProbe": _probe(server.live, 10, 3, scheme=scheme),
        "readinessProbe": _probe(server.ready, 5, 1, timeout=3, scheme=scheme),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(options.pre_stop_seconds)]}}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": options.run_as_user,
            "runAsGroup": options.run_as_group,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }


def _pod_spec(kind: str, options: K8sOptions, server: _Server, resource: str, root: Path) -> Dict[str, Any]:
    volumes, mounts = _volumes(kind, options, root)
    security = {
        "runAsNonRoot": True,
        "runAsUser": options.run_as_user,
        "runAsGroup": options.run_as_group,
        "fsGroup": options.run_as_group,  # the emptyDirs writable by the group
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if options.device_group != options.run_as_group:
        security["supplementalGroups"] = [options.device_group]  # /dev/davinci* is HwHiAiUser's group
    spec: Dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": security,
        "terminationGracePeriodSeconds": int(options.pre_stop_seconds + server.drain + 10),
        "containers": [_container(kind, options, server, resource, mounts)],
        "volumes": volumes,
    }
    if options.node_selector:
        spec["nodeSelector"] = dict(options.node_selector)
    if options.replicas >= 2:  # one node's loss takes one replica, not all
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": _labels(options)},
            }
        ]
    return spec


def _labels(options: K8sOptions) -> Dict[str, str]:
    return {"app.kubernetes.io/name": "paddlex-npu", "app.kubernetes.io/instance": options.name}


def _meta(options: K8sOptions, name: Optional[str] = None, checks: Sequence[str] = ()) -> Dict[str, Any]:
    """Name, labels, namespace, and checkov's skip annotations (with their reasons) for those of ``checks`` that
    apply, and for the namespace when none is given."""
    meta: Dict[str, Any] = {"name": name or options.name, "labels": _labels(options)}
    if options.namespace:
        meta["namespace"] = options.namespace
    applies = {
        "CKV_K8S_21": not options.namespace,
        "CKV_K8S_40": "CKV_K8S_40" in checks and options.run_as_user <= 10000,
        "CKV_K8S_43": "CKV_K8S_43" in checks and not _DIGEST.search(options.image),
    }
    skips = [check for check, needed in applies.items() if needed]
    if skips:
        meta["annotations"] = {
            f"checkov.io/skip{i}": f"{check}={CHECKOV_SKIPS[check]}" for i, check in enumerate(skips, 1)
        }
    return meta


def _deployment(kind: str, options: K8sOptions, resource: str, root: Path) -> Dict[str, Any]:
    server = _server(kind, options)
    scrape = {  # one scrape path: the pods (a Service annotation too would make common setups scrape them twice)
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(server.metrics_port),
        "prometheus.io/path": "/metrics",
    }
    if options.tls_secret:  # the common kubernetes-pods scrape job reads its scheme here
        scrape["prometheus.io/scheme"] = "https"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(options, checks=("CKV_K8S_40", "CKV_K8S_43")),
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": _labels(options)},
            # one pod at a time: a new pod needs free NPUs on some node before an old one goes
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": _labels(options), "annotations": scrape},
                "spec": _pod_spec(kind, options, server, resource, root),
            },
        },
    }


def _network_policy(kind: str, options: K8sOptions) -> Dict[str, Any]:
    """The listening ports open to the cluster; no egress (the server needs no network: offline)."""
    ports = [{"protocol": "TCP", "port": p} for _, p in _server(kind, options).ports]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(options),
        "spec": {
            "podSelector": {"matchLabels": _labels(options)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"ports": ports}],
            "egress": [],
        },
    }


def _service_port(name: str, port: int) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
    if name == "https":  # for ingress controllers and meshes: the backend speaks TLS
        entry["appProtocol"] = "https"
    return entry


def manifests(kind: str, pipeline: Any, options: K8sOptions) -> List[Dict[str, Any]]:
    """The objects for ``kind`` (``serve`` or ``triton``) serving ``pipeline`` (a YAML path or config)."""
    resource = _check(kind, options)
    config, root = container_config(pipeline, options)
    ports = _server(kind, options).ports
    objects: List[Dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(options, f"{options.name}-pipeline"),
            "data": {"pipeline.yaml": yaml.safe_dump(config, sort_keys=False)},
        },
        _deployment(kind, options, resource, root),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(options),
            "spec": {
                "selector": _labels(options),
                "ports": [_service_port(n, p) for n, p in ports],
            },
        },
        _network_policy(kind, options),
    ]
    if options.replicas >= 2:  # a drain of nodes takes one replica at a time
        spec = {"maxUnavailable": 1, "selector": {"matchLabels": _labels(options)}}
        objects.append(
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(options), "spec": spec}
        )
    if options.hpa_max_replicas is not None:
        objects.append(_hpa(kind, options))
    return objects


def _hpa(kind: str, options: K8sOptions) -> Dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(options),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.name},
            "minReplicas": options.replicas,
            "maxReplicas": options.hpa_max_replicas,
            "metrics": [_hpa_metric(kind, options)],
        },
    }


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
