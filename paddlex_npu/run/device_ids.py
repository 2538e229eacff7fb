"""Which NPU a device id names, and which chip it is.

CANN device ids are *logical*: with ``ASCEND_RT_VISIBLE_DEVICES`` set (Ray, Kubernetes' Ascend device plugin and
the Ascend docker runtime set it), the first chip it lists is device 0, the second device 1, and so on; without it,
device N is the chip whose ``npu-smi info -m`` "Chip Logic ID" is N. ``npu-smi`` ignores the variable, and its
``info -l`` counts cards (NPU IDs; an Atlas 300I Duo card holds two chips), not chips.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional

VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"


def visible_devices() -> Optional[List[str]]:
    """The entries of ``ASCEND_RT_VISIBLE_DEVICES`` (None when it is not set)."""
    value = os.environ.get(VISIBLE_ENV)
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def physical_npu(device_id: int) -> int:
    """The physical NPU behind logical ``device_id``: the id-th entry of ``$ASCEND_RT_VISIBLE_DEVICES`` when it
    is set (as Ray and container runtimes set it: inside a Ray actor its one chip is device 0), else the id."""
    from ..errors import ConfigError

    visible = visible_devices()
    if not visible:
        return device_id
    if not 0 <= device_id < len(visible) or not visible[device_id].isdigit():
        raise ConfigError(
            f"npu:{device_id} is not among the devices {VISIBLE_ENV}={os.environ[VISIBLE_ENV]} makes visible: "
            f"give a device id below {len(visible)} (ids are logical after {VISIBLE_ENV}), or unset it"
        )
    return int(visible[device_id])


def device_hint(device_id: int) -> str:
    """Why ``device_id`` may name no chip here, and the ids that do."""
    visible = visible_devices()
    if visible is None:
        return (
            f"device {device_id} is a logical id: 0 .. chips - 1, the Chip Logic ID of `npu-smi info -m` "
            f"({VISIBLE_ENV} is not set)"
        )
    return (
        f"device ids are logical, counted after {VISIBLE_ENV}={os.environ[VISIBLE_ENV]!r}, which makes "
        f"{len(visible)} chip(s) visible (ids 0..{len(visible) - 1}): use a device id in 0..{len(visible) - 1}, "
        f"or widen {VISIBLE_ENV}"
    )


@dataclass
class Chip:
    """One row of ``npu-smi info -m``."""

    npu_id: int
    chip_id: int
    logic_id: Optional[int]  # None for rows that are no AI chip (the MCU: "-")
    name: str

    @property
    def soc_version(self) -> str:
        """ATC's ``--soc_version`` spelling of the chip name (``Ascend 310P3`` -> ``Ascend310P3``)."""
        return self.name.replace(" ", "")


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+|-)\s+(\S.*?)\s*$")


def parse_npu_smi_chips(text: str) -> List[Chip]:
    """The chips of ``npu-smi info -m`` (columns NPU ID, Chip ID, Chip Logic ID, Chip Name), AI chips only."""
    chips = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group(3) != "-":
            chips.append(Chip(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)))
    return chips


def soc_name() -> Optional[str]:
    """This machine's chip as ``acl.get_soc_name()`` says (no ``aclInit`` needed), or None without pyACL/a chip."""
    try:
        import acl  # type: ignore[import-not-found]
    except ImportError:
        return None
    get = getattr(acl, "get_soc_name", None)
    name = get() if callable(get) else None
    return name or None


def soc_matches(built_for: str, device: str) -> bool:
    """An OM runs on the chip it was built for; a vNPU (``Ascend310P3vir02``) counts as its chip (``Ascend310P3``)."""

    def chip(soc: str) -> str:
        return soc.split("vir", 1)[0]

    return bool(built_for) and chip(built_for) == chip(device)


def check_device_id(device_id: int) -> None:
    """Refuse a device id that ``ASCEND_RT_VISIBLE_DEVICES`` leaves no chip for, before ACL is asked (ACL would
    only say "[-1][ACL: general failure]" at load)."""
    visible = visible_devices()
    if visible is not None and not 0 <= device_id < len(visible):
        from ..errors import NpuDeviceUnavailableError

        raise NpuDeviceUnavailableError(f"device id {device_id} names no visible chip: {device_hint(device_id)}")


def check_om_soc(built_for: Optional[str], om: str) -> None:
    """Refuse an OM built for another chip than this machine's (``aclmdlLoadFromFile`` would fail with a generic
    error); nothing to check without pyACL or without the manifest's ``soc_version``."""
    device = soc_name() if built_for else None
    if built_for and device and not soc_matches(built_for, device):
        from ..errors import ConfigError

        raise ConfigError(
            f"{om} was built for {built_for}, but this machine's chip is {device} (acl.get_soc_name()): an OM runs "
            f"only on the chip ATC built it for. Rebuild it: `paddlex-npu convert MODEL_DIR -o OUT --soc-version "
            f"{device}`"
        )
