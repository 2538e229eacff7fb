"""Deployment commands: ``k8s`` (Kubernetes manifests for ``serve`` or Triton on Ascend nodes)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Command, add_commands, fail, key_value, positive_int, seconds_or_zero


def run_k8s(args: argparse.Namespace) -> int:
    import importlib.util

    from ..deploy import k8s
    from ..errors import PaddlexNpuError

    try:
        options = k8s.K8sOptions(
            image=args.image,
            name=args.name,
            namespace=args.namespace,
            replicas=args.replicas,
            npu_resource=args.npu_resource,
            npus=args.npus,
            workers=args.workers,
            models_root=args.models_root,
            models_host_path=args.models_host_path,
            models_pvc=args.models_pvc,
            models_mount=args.models_mount,
            port=args.port,
            shutdown_grace=args.shutdown_grace,
            pre_stop_seconds=args.pre_stop_seconds,
            cpu=args.cpu,
            memory=args.memory,
            hpa_max_replicas=args.hpa_max_replicas,
            hpa_cpu_percent=args.hpa_cpu_percent,
            hpa_metric=args.hpa_metric,
            hpa_in_flight=args.hpa_in_flight,
            node_selector=dict(args.node_selector or []),
            mount_driver=args.mount_driver,
        )
        objects = k8s.manifests(args.kind, args.pipeline, options)
        paths = k8s.write(objects, args.output)
        checked = k8s.validate(objects) if importlib.util.find_spec("kubernetes_validate") else None
    except (PaddlexNpuError, OSError) as exc:
        return fail("k8s", exc)
    for path in paths:
        print(f"- {path}")
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
        help="the Ascend device plugin's resource: huawei.com/Ascend310P, Ascend910, Ascend310, or a vNPU such as "
        "Ascend310P-2c",
    )
    p.add_argument("--npus", type=positive_int, default=1, help="NPUs per pod (the server uses npu:0..N-1)")
    p.add_argument(
        "--workers", type=positive_int, default=2, help="serve: worker processes per NPU; triton: instances per NPU"
    )
    volume = p.add_mutually_exclusive_group()
    volume.add_argument("--models-host-path", help="the node folder holding the OM packages (default: --models-root)")
    volume.add_argument("--models-pvc", help="a PersistentVolumeClaim holding the OM packages instead of a hostPath")
    p.add_argument(
        "--models-root",
        type=Path,
        help="the local folder whose tree the volume holds (default: the model_dirs' common parent)",
    )
    p.add_argument("--models-mount", default="/models", help="where the model volume is mounted in the container")
    p.add_argument(
        "--port", type=int, help="serve's HTTP port, or Triton's (gRPC +1, metrics +2) (default: 8080 / 8000)"
    )
    p.add_argument(
        "--shutdown-grace", type=seconds_or_zero, default=5.0, help="serve: seconds answering 503 after SIGTERM"
    )
    p.add_argument("--pre-stop-seconds", type=positive_int, default=5, help="preStop wait before SIGTERM")
    p.add_argument("--cpu", default="2", help="CPU request")
    p.add_argument("--memory", default="8Gi", help="memory request and limit")
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
        help="hostPath-mount /usr/local/Ascend/driver and npu-smi (nodes without the Ascend docker runtime)",
    )


COMMANDS = (
    Command(
        "k8s",
        "write Kubernetes manifests (Deployment, Service, optional HPA) for serve or triton-serve on Ascend nodes",
        run_k8s,
        k8s_args,
        example="paddlex-npu k8s serve ocr.yaml --image REGISTRY/paddlex-npu:0.1.0 -o k8s",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
