"""Deployment commands: ``k8s`` (Kubernetes manifests for ``serve`` or Triton on Ascend nodes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Command, add_commands, fail, key_value, positive_int, seconds_or_zero


def run_k8s(args: argparse.Namespace) -> int:
    import dataclasses
    import importlib.util

    from ..deploy import k8s
    from ..errors import PaddlexNpuError

    try:
        fields = {f.name for f in dataclasses.fields(k8s.K8sOptions)}
        given = {k: v for k, v in vars(args).items() if k in fields and v is not None}
        options = k8s.K8sOptions(**{**given, "node_selector": dict(args.node_selector or [])})
        objects = k8s.manifests(args.kind, args.pipeline, options)
        paths = k8s.write(objects, args.output)
        checked = k8s.validate(objects) if importlib.util.find_spec("kubernetes_validate") else None
    except (PaddlexNpuError, OSError) as exc:
        return fail("k8s", exc)
    for path in paths:
        print(f"- {path}")
    if options.models_host_path or options.mount_driver:
        print("note: --models-host-path / --mount-driver write hostPath volumes, which Pod Security baseline refuses")
    for secret in filter(None, (options.tls_secret, options.token_secret)):
        print(f"note: the pods start once the Secret {secret} exists (kubectl get secret {secret})")
    if options.token_secret:
        print(
            "note: with tokens, /metrics answers 401 to a scrape without one: give the Prometheus job a token "
            "(authorization: credentials_file), else the prometheus.io/scrape annotation"
            + (" and --hpa-metric in-flight see" if options.hpa_metric == "in-flight" else " sees")
            + " no series (docs/kubernetes.md)"
        )
    print(
        f"checked against the Kubernetes {checked} schemas"
        if checked
        else "not checked: pip install kubernetes-validate"
    )
    print(f"apply them: kubectl apply -f {args.output}")
    return 0


def k8s_args(p: argparse.ArgumentParser) -> None:
    from ..deploy.k8s import DEFAULT_NPU_RESOURCE

    p.add_argument(
        "kind", choices=("serve", "triton"), help="paddlex-npu serve, or Triton (triton-repo + triton-serve)"
    )
    p.add_argument("pipeline", type=Path, help="PaddleX pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("--image", required=True, help="the container image (deploy/Dockerfile shows how to build one)")
    p.add_argument("-o", "--output", type=Path, default=Path("k8s"), help="folder for the manifests")
    p.add_argument("--name", default="paddlex-npu", help="name of the Deployment, Service, ConfigMap, HPA")
    p.add_argument("--namespace", help="metadata.namespace (default: kubectl's current namespace)")
    p.add_argument("--replicas", type=positive_int, default=1, help="pods (each with --npus NPUs)")
    p.add_argument(
        "--npu-resource",
        default=DEFAULT_NPU_RESOURCE,
        help="the NPU resource: Ascend's device plugin (huawei.com/Ascend310P, Ascend910, Ascend310, a vNPU such as "
        "Ascend310P-2c), MindCluster's npu or Volcano's npu-core, or HAMi's Ascend910B3, Ascend910C, ...",
    )
    p.add_argument("--npu-memory", type=positive_int, help="HAMi: MiB of device memory per NPU (<resource>-memory)")
    p.add_argument("--npus", type=positive_int, default=1, help="NPUs per pod (the server uses npu:0..N-1)")
    p.add_argument(
        "--workers", type=positive_int, default=2, help="serve: worker processes per NPU; triton: instances per NPU"
    )
    p.add_argument(
        "--ready-min-workers",
        type=positive_int,
        default=1,
        help="serve: the pod stays ready (in the Service) while at least this many of its workers are",
    )
    p.add_argument(
        "--load-timeout", type=positive_int, default=600, help="seconds the startup probe waits for the load"
    )
    _volume_args(p)
    _pod_args(p)
    _access_args(p)
    _scaling_args(p)


def _volume_args(p: argparse.ArgumentParser) -> None:
    volume = p.add_mutually_exclusive_group()
    volume.add_argument("--models-pvc", help="the PersistentVolumeClaim holding the OM packages (default: NAME-models)")
    volume.add_argument(
        "--models-host-path", help="the node folder holding them instead (hostPath: Pod Security baseline refuses it)"
    )
    volume.add_argument(
        "--models-in-image",
        action="store_true",
        help="no model volume: the packages are in the image at --models-mount",
    )
    p.add_argument(
        "--models-root",
        type=Path,
        help="the local folder whose tree the volume holds (default: the model_dirs' common parent)",
    )
    p.add_argument("--models-mount", default="/models", help="where the model volume is mounted in the container")


def _pod_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--port", type=int, help="serve's HTTP port, or Triton's (gRPC +1, metrics +2) (default: 8080 / 8000)"
    )
    p.add_argument(
        "--shutdown-grace", type=seconds_or_zero, default=5.0, help="serve: seconds answering 503 after SIGTERM"
    )
    p.add_argument("--pre-stop-seconds", type=positive_int, default=5, help="preStop wait before SIGTERM")
    p.add_argument("--run-as-user", type=positive_int, default=1000, help="the pod's uid: the OM packages' owner")
    p.add_argument("--run-as-group", type=positive_int, default=1000, help="the pod's gid (and fsGroup)")
    p.add_argument(
        "--device-group", type=positive_int, default=1000, help="the group of /dev/davinci* on the nodes (HwHiAiUser)"
    )
    p.add_argument("--cpu", default="2", help="CPU request and limit")
    p.add_argument("--shm-size", default="1Gi", help="triton: the size of /dev/shm (a memory emptyDir)")
    p.add_argument("--memory", default="8Gi", help="memory request and limit")


def _access_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tls-secret",
        metavar="NAME",
        help="serve: HTTPS with this existing kubernetes.io/tls Secret (tls.crt, tls.key; kubectl create secret tls), "
        "mounted read-only; the port is named https and the probes use HTTPS",
    )
    p.add_argument(
        "--token-secret",
        metavar="NAME",
        help="serve: bearer tokens from this existing Secret's api.tokens (one token a line; kubectl create secret "
        "generic NAME --from-file=api.tokens), mounted read-only; the probes need no token",
    )
    p.add_argument(
        "--metrics-tokens",
        action="store_true",
        help="serve: the --token-secret also holds metrics.tokens, the tokens that open /metrics only (a scraper's)",
    )


def _scaling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hpa-max-replicas", type=positive_int, help="add an HPA scaling up to this many pods")
    p.add_argument(
        "--hpa-metric",
        choices=("cpu", "in-flight"),
        default="cpu",
        help="what the HPA scales on: CPU utilisation, or requests in flight per pod (needs prometheus-adapter)",
    )
    p.add_argument("--hpa-cpu-percent", type=positive_int, default=70, help="the HPA's CPU utilisation target")
    p.add_argument(
        "--hpa-in-flight",
        type=positive_int,
        help="--hpa-metric in-flight: the target per pod (default: --workers x --npus, one request per worker)",
    )
    p.add_argument(
        "--node-selector", type=key_value, action="append", help="KEY=VALUE node label to require (repeatable)"
    )
    p.add_argument(
        "--mount-driver",
        action="store_true",
        help="hostPath-mount /usr/local/Ascend/driver, /usr/local/dcmi, npu-smi and /etc/ascend_install.info (nodes "
        "without the Ascend docker runtime; Pod Security baseline refuses hostPath)",
    )


COMMANDS = (
    Command(
        "k8s",
        "write Kubernetes manifests (Deployment, Service, NetworkPolicy, PDB, optional HPA) for serve or triton-serve",
        run_k8s,
        k8s_args,
        example="paddlex-npu k8s serve ocr.yaml --image REGISTRY/paddlex-npu:0.1.0 -o k8s",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
