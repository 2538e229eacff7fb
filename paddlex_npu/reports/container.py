"""``doctor`` inside a container: what the NPU route needs mounted there, and how device ids read there.

A container sees the chips it was given as ``/dev/davinciN`` (N: the host's number) beside the shared devices
``/dev/davinci_manager``, ``/dev/devmm_svm`` and ``/dev/hisi_hdc``; the Ascend docker runtime (or the host paths
``paddlex-npu k8s --mount-driver`` adds) brings the driver's libraries (``/usr/local/Ascend/driver``), ``npu-smi``
with the DCMI library it loads (``/usr/local/dcmi``) and ``/etc/ascend_install.info`` (where the driver is). ACL
counts the chips mounted here from 0, while ``npu-smi`` prints the host's Chip Logic IDs, so comparing the two is
no check in a container: the device nodes are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Mapping, Optional

from .. import envs
from .checks import FAIL, OK, WARN, Check

SHARED_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
# (path, what needs it); a missing one is named with the mount that brings it
HOST_PATHS = (
    ("usr/local/Ascend/driver/lib64", "the driver's libraries ACL loads"),
    ("usr/local/dcmi", "the DCMI library npu-smi loads"),
    ("etc/ascend_install.info", "where the driver is installed, read by CANN's tools"),
)
MOUNT_FIX = (
    "run with the Ascend docker runtime (ASCEND_VISIBLE_DEVICES=<host chip ids>), or give the devices "
    "(--device /dev/davinciN --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc) and "
    "mount /usr/local/Ascend/driver, /usr/local/dcmi, /usr/local/sbin/npu-smi and /etc/ascend_install.info "
    "read-only (`paddlex-npu k8s --mount-driver` writes these mounts)"
)
_CGROUP_MARKS = re.compile(r"docker|kubepods|libpod|containerd|crio")


def container_kind(root: Path = Path("/"), environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """What runs this process in a container (podman, docker, Kubernetes, ...), None outside one."""
    environ = os.environ if environ is None else environ
    if environ.get(envs.KUBERNETES_HOST.name):
        return "a Kubernetes pod"
    if (root / "run" / ".containerenv").exists():
        return "a podman container"
    if (root / ".dockerenv").exists():
        return "a docker container"
    try:
        cgroup = (root / "proc" / "1" / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = _CGROUP_MARKS.search(cgroup)
    return f"a container ({found.group(0)})" if found else None


def chips_mounted(root: Path = Path("/")) -> List[int]:
    """The host numbers N of the ``/dev/davinciN`` devices here, ascending (ACL's device ids 0, 1, ... in order)."""
    numbers = [p.name[len("davinci") :] for p in (root / "dev").glob("davinci*")]
    return sorted(int(n) for n in numbers if n.isdigit())


def container_check(root: Path = Path("/"), environ: Optional[Mapping[str, str]] = None) -> Optional[Check]:
    """The devices and host paths the route needs in this container; None outside a container."""
    kind = container_kind(root, environ)
    if kind is None:
        return None
    chips = chips_mounted(root)
    missing = [f"/dev/{d}" for d in SHARED_DEVICES if not (root / "dev" / d).exists()]
    missing += [f"/{p} ({why})" for p, why in HOST_PATHS if not (root / p).exists()]
    if not chips:
        missing.insert(0, "/dev/davinciN (no NPU is mounted)")
    if chips:
        ids = ", ".join(f"/dev/davinci{n} is npu:{i}" for i, n in enumerate(chips))
        detail = f"in {kind}: {ids} (ACL counts the chips mounted here from 0; npu-smi shows host ids)"
    else:
        detail = f"in {kind}"
    if missing:
        return Check("container", FAIL, f"{detail}; missing: {', '.join(missing)}", MOUNT_FIX)
    return Check("container", OK, detail)


def npu_smi_ids_in_container(detail: str, unknown: List[str]) -> Check:
    """The npu-smi check when ASCEND_RT_VISIBLE_DEVICES names ids npu-smi does not list, inside a container: npu-smi
    prints the host's Chip Logic IDs there, so the mismatch may be no fault (advice, not a failure)."""
    return Check(
        "npu-smi",
        WARN,
        detail + f"; {', '.join(unknown)} is no Chip Logic ID npu-smi lists, but npu-smi shows host ids in a container",
        "check the container line instead: the /dev/davinciN mounted here, counted from 0, are the device ids "
        "ASCEND_RT_VISIBLE_DEVICES picks from",
        required=False,
    )
