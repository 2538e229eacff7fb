"""``doctor`` in a container: the devices and host paths the route needs there, named with the mounts that bring
them; device ids read from the mounted /dev/davinciN (counted from 0), not compared with npu-smi's host ids; and
``k8s --mount-driver`` mounts what the check looks for."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from paddlex_npu.reports import doctor
from paddlex_npu.reports.container import HOST_PATHS, SHARED_DEVICES, container_check, container_kind


def _tree(root: Path, chips=(3, 5), shared=SHARED_DEVICES, host=tuple(p for p, _ in HOST_PATHS)) -> Path:
    """A file tree laid out as a container with the Ascend mounts (plain files stand in for device nodes)."""
    (root / "dev").mkdir(parents=True)
    (root / "run").mkdir()
    (root / "run" / ".containerenv").write_text("engine=podman\n")
    for name in [f"davinci{n}" for n in chips] + list(shared):
        (root / "dev" / name).touch()
    for rel in host:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if not rel.endswith(".info") else path.write_text("Driver_Install_Path_Param=/usr/local/Ascend\n")
    return root


def test_outside_a_container_there_is_no_check(tmp_path):
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("0::/init.scope\n")
    assert container_kind(tmp_path, environ={}) is None and container_check(tmp_path, environ={}) is None


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda r: (r / ".dockerenv").touch(), "a docker container"),
        (lambda r: (r / "run").mkdir() or (r / "run" / ".containerenv").touch(), "a podman container"),
        (lambda r: (r / "proc/1").mkdir(parents=True) or (r / "proc/1/cgroup").write_text("0::/kubepods/x\n"), None),
    ],
    ids=["docker", "podman", "cgroup"],
)
def test_the_container_is_recognised(tmp_path, make, kind):
    make(tmp_path)
    assert container_kind(tmp_path, environ={}) == (kind or "a container (kubepods)")
    assert container_kind(tmp_path, environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "a Kubernetes pod"


def test_mounted_chips_are_counted_from_0_in_host_order(tmp_path):
    check = container_check(_tree(tmp_path, chips=(5, 3, 12)), environ={})
    assert check.status == doctor.OK, check
    assert "/dev/davinci3 is npu:0, /dev/davinci5 is npu:1, /dev/davinci12 is npu:2" in check.detail


@pytest.mark.parametrize(
    "tree, says",
    [
        ({"chips": ()}, "/dev/davinciN (no NPU is mounted)"),
        ({"shared": ("davinci_manager", "hisi_hdc")}, "/dev/devmm_svm"),
        ({"host": ("usr/local/Ascend/driver/lib64", "etc/ascend_install.info")}, "/usr/local/dcmi (the DCMI library"),
        ({"host": ("usr/local/Ascend/driver/lib64", "usr/local/dcmi")}, "/etc/ascend_install.info"),
    ],
    ids=["no-chip", "shared-device", "dcmi", "install-info"],
)
def test_what_is_missing_is_named_with_the_mount_that_brings_it(tmp_path, tree, says):
    check = container_check(_tree(tmp_path, **tree), environ={})
    assert check.status == doctor.FAIL and says in check.detail, check
    assert "--mount-driver" in check.fix and "/usr/local/dcmi" in check.fix


def test_npu_smi_s_host_ids_are_no_failure_in_a_container(tmp_path, monkeypatch):
    """ASCEND_RT_VISIBLE_DEVICES=0 while npu-smi lists host chip 3: FAIL on a host, advice in a container."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "npu-smi"  # prints what npu-smi info -m prints on a host with chip 3 (one 310P3)
    fake.write_text(
        "#!/bin/sh\ncat <<'EOF'\n        NPU ID    Chip ID    Chip Logic ID    Chip Name\n"
        "        3         0          3                Ascend 310P3\n"
        "        3         1          -                Mcu\nEOF\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0")
    where = {"kind": None}  # this machine may itself be a container: doctor is asked both ways
    monkeypatch.setattr("paddlex_npu.reports.container.container_kind", lambda *a, **k: where["kind"])
    host = doctor._npu_smi()
    assert host.status == doctor.FAIL and "0 is no Chip Logic ID here" in host.detail, host
    where["kind"] = "a Kubernetes pod"
    inside = doctor._npu_smi()
    assert inside.status == doctor.WARN and not inside.required, inside
    assert "npu-smi shows host ids in a container" in inside.detail and "/dev/davinciN" in inside.fix


def test_mount_driver_mounts_what_the_check_looks_for(tmp_path):
    import yaml

    from paddlex_npu.deploy import k8s
    from paddlex_npu.samples import assets

    (tmp_path / "ocr.yaml").write_text(yaml.safe_dump(assets.ocr_pipeline_config(tmp_path / "models")))
    options = k8s.K8sOptions(image="paddlex-npu:1", mount_driver=True)
    (deployment,) = [o for o in k8s.manifests("serve", tmp_path / "ocr.yaml", options) if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    wanted = {"/" + p.rsplit("/lib64", 1)[0] for p, _ in HOST_PATHS} | {"/usr/local/sbin/npu-smi"}
    assert wanted <= mounted, wanted - mounted
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["mountPath"] in wanted)


def test_doctor_prints_the_container_line():
    """The CLI in this process's real surroundings: a container line exactly when doctor runs in one."""
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert ("] container: in " in out.stdout) == (container_kind() is not None), out.stdout
