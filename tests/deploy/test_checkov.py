"""checkov (an outside scanner, its own venv: scripts/ci-checkov.sh) passes every manifest ``paddlex-npu k8s``
writes for the option combinations the tests use, and deploy/Dockerfile, with no failed check; its skips are the
ones the manifests annotate with their reasons. A manifest stripped of its security settings fails, so the scan is
no formality."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddlex_npu.deploy import k8s
from paddlex_npu.samples import assets

REPO = Path(__file__).resolve().parents[2]
CHECKOV = shutil.which("checkov") or str(Path(sys.prefix).parent / ".venv-checkov" / "bin" / "checkov")
pytestmark = pytest.mark.skipif(
    not Path(CHECKOV).exists(), reason="checkov is not installed: bash scripts/ci-checkov.sh (its own venv)"
)
DIGEST = "registry.example.com/paddlex-npu@sha256:" + "0" * 64
# (kind, options): every combination tests/serve/test_k8s.py and tests/deploy/ generate
COMBINATIONS = [
    ("serve", {}),
    ("serve", {"run_as_user": 1001}),
    ("serve", {"device_group": 1005}),
    ("triton", {"name": "ocr-triton", "namespace": "ocr", "npu_resource": "Ascend310P-2c", "models_pvc": "om"}),
    ("triton", {"replicas": 2, "hpa_max_replicas": 4}),
    ("serve", {"workers": 3, "npus": 2, "hpa_max_replicas": 5, "hpa_metric": "in-flight"}),
    ("triton", {"workers": 3, "npus": 2, "hpa_max_replicas": 5, "hpa_metric": "in-flight"}),
    ("serve", {"npu_resource": "Ascend910", "npus": 2, "hpa_max_replicas": 3}),
    ("serve", {"models_host_path": "/data/om", "mount_driver": True, "replicas": 3}),
    ("serve", {"models_in_image": True}),
    ("serve", {"mount_driver": True}),
    ("serve", {"hpa_max_replicas": 2}),
    ("serve", {"npu_resource": "Ascend910B3", "npu_memory": 16384}),
    ("serve", {"workers": 2, "npus": 2, "ready_min_workers": 3, "load_timeout": 905}),
    ("serve", {"tls_secret": "ocr-tls", "token_secret": "ocr.tokens", "metrics_tokens": True}),  # Secret volumes
    ("serve", {"token_secret": "ocr-tokens"}),
    ("serve", {"tls_secret": "ocr-tls", "replicas": 2, "hpa_max_replicas": 3}),
    ("serve", {"tls_secret": "a." * 126 + "a"}),
    ("triton", {"image": DIGEST, "namespace": "ocr", "run_as_user": 10001, "run_as_group": 10001}),
]


def _scan(folder: Path) -> dict:
    out = subprocess.run(
        [CHECKOV, "-d", str(folder), "--framework", "kubernetes", "dockerfile", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode in (0, 1), out.stderr[-3000:]  # 1: some check failed
    reports = json.loads(out.stdout)
    return {r["check_type"]: r for r in (reports if isinstance(reports, list) else [reports])}


def _failed(report: dict) -> list:
    return [(c["check_id"], c["file_path"], c["resource"]) for c in report["results"]["failed_checks"]]


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """One checkov run over every combination, the Dockerfile, and one manifest stripped of its security."""
    root = tmp_path_factory.mktemp("checkov")
    (root / "ocr.yaml").write_text(yaml.safe_dump(assets.ocr_pipeline_config(root / "models")), encoding="utf-8")
    out = root / "scan"
    out.mkdir()
    for i, (kind, options) in enumerate(COMBINATIONS):
        objects = k8s.manifests(kind, root / "ocr.yaml", k8s.K8sOptions(**{"image": "paddlex-npu:1", **options}))
        k8s.validate(objects)
        (out / f"{i:02d}-{kind}.yaml").write_text(k8s.to_yaml(objects), encoding="utf-8")
    shutil.copy(REPO / "deploy" / "Dockerfile", out / "Dockerfile")
    bad = copy.deepcopy(k8s.manifests("serve", root / "ocr.yaml", k8s.K8sOptions(image="paddlex-npu:1")))
    for obj in bad:
        if obj["kind"] == "Deployment":
            spec = obj["spec"]["template"]["spec"]
            spec.pop("securityContext")
            spec.pop("automountServiceAccountToken")
            spec["containers"][0].pop("securityContext")
    (out / "stripped.yaml").write_text(k8s.to_yaml(bad), encoding="utf-8")
    return _scan(out)


def test_no_manifest_and_no_dockerfile_fails_a_check(scanned):
    failed = [f for f in _failed(scanned["kubernetes"]) if not f[1].endswith("stripped.yaml")]
    assert failed == [], failed
    assert _failed(scanned["dockerfile"]) == []
    assert scanned["kubernetes"]["summary"]["passed"] > 100 and scanned["dockerfile"]["summary"]["passed"] > 50


def test_the_stripped_manifest_fails(scanned):
    failed = {f[0] for f in _failed(scanned["kubernetes"]) if f[1].endswith("stripped.yaml")}
    # no privilege escalation, read-only root, non-root, capabilities dropped, seccomp, no SA token
    assert {"CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_37", "CKV_K8S_31", "CKV_K8S_38"} <= failed, failed


def test_every_skip_is_one_the_manifests_annotate_with_its_reason(scanned):
    skipped = scanned["kubernetes"]["results"]["skipped_checks"] + scanned["dockerfile"]["results"]["skipped_checks"]
    reasons = {**k8s.CHECKOV_SKIPS, "CKV_DOCKER_7": "the base is a build argument"}
    assert skipped, "no skip: the annotations were not read"
    for check in skipped:
        assert check["check_id"] in reasons, check["check_id"]
        comment = check["check_result"]["suppress_comment"]
        assert comment.startswith(reasons[check["check_id"]][:40]), (check["check_id"], comment)
    digest_run = [c for c in skipped if c["file_path"].endswith(f"{len(COMBINATIONS) - 1:02d}-triton.yaml")]
    assert digest_run == [], digest_run  # a digest, a namespace, a high uid: nothing left to skip
