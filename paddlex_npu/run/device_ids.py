"""Which NPU a device id names, and which chip it is.

CANN device ids are *logical*: with ``ASCEND_RT_VISIBLE_DEVICES`` set, the first chip it lists is device 0, the
second device 1, and so on; without it, device N is the chip whose ``npu-smi info -m`` "Chip Logic ID" is N.
Ray sets ``ASCEND_RT_VISIBLE_DEVICES`` for its NPU actors (``ray/_private/accelerators/npu.py``); Kubernetes'
Ascend device plugin and the Ascend docker runtime set ``ASCEND_VISIBLE_DEVICES`` instead, which decides the
``/dev/davinci*`` nodes mounted into the container (the chips there are again counted from 0). ``npu-smi`` ignores
both, and its ``info -l`` counts cards (NPU IDs; an Atlas 300I Duo card holds two chips), not chips.

CANN reads ``ASCEND_RT_VISIBLE_DEVICES`` as ids separated by commas, up to the first other character or invalid
id (CANN environment variable reference, ``ASCEND_RT_VISIBLE_DEVICES``, envref_07_0028: ``1, 2,3`` reads ``1``,
the space ends it; ``1,3,8`` on 8 chips reads ``1,3``; older ``1,2,-1,3`` reads ``1,2``), and supports only
ascending ids. :func:`parse_visible_devices` reads it the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional

VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"


_ID = re.compile(r"[0-9]+")


def parse_visible_devices(value: str, chips: Optional[int] = None) -> List[int]:
    """The chip ids CANN reads from an ``ASCEND_RT_VISIBLE_DEVICES`` value: comma-separated ids up to the first
    entry that is not one (another character such as a space, a sign, or an id ``>= chips`` when the number of
    chips is known). CANN envref ``ASCEND_RT_VISIBLE_DEVICES``: "if other characters or invalid device IDs are
    contained, only the device IDs before them are read"."""
    ids: List[int] = []
    for entry in value.split(","):
        if not _ID.fullmatch(entry) or (chips is not None and int(entry) >= chips):
            break
        ids.append(int(entry))
    return ids


def visible_devices(chips: Optional[int] = None) -> Optional[List[str]]:
    """The chip ids ``ASCEND_RT_VISIBLE_DEVICES`` makes visible as CANN reads it (None when it is not set)."""
    value = os.environ.get(VISIBLE_ENV)
    if value is None:
        return None
    return [str(i) for i in parse_visible_devices(value, chips)]


def check_visible_devices() -> None:
    """Refuse an ``ASCEND_RT_VISIBLE_DEVICES`` that CANN would read otherwise than written: entries past the first
    non-id (CANN ignores them) or ids not ascending (CANN supports only ascending ids)."""
    from ..errors import ConfigError

    value = os.environ.get(VISIBLE_ENV)
    if value is None:
        return
    ids = parse_visible_devices(value)
    written = [v for v in value.split(",") if v.strip()]
    if len(written) != len(ids):
        raise ConfigError(
            f"{VISIBLE_ENV}={value!r}: CANN reads ids only up to the first entry that is not a chip id (a space, "
            f"a sign, a letter), so it makes visible only {ids or 'no chip'}: write the ids separated by commas "
            f"alone, e.g. {VISIBLE_ENV}={','.join(v.strip() for v in written)}"
        )
    if ids != sorted(set(ids)):
        raise ConfigError(
            f"{VISIBLE_ENV}={value!r}: CANN supports only ascending, distinct chip ids here: write "
            f"{VISIBLE_ENV}={','.join(str(i) for i in sorted(set(ids)))} (device ids follow that order)"
        )


def physical_npu(device_id: int) -> int:
    """The physical NPU behind logical ``device_id``: the id-th chip ``$ASCEND_RT_VISIBLE_DEVICES`` makes visible
    when it is set (as Ray sets it: inside a Ray actor its one chip is device 0), else the id."""
    from ..errors import ConfigError

    visible = visible_devices()
    if visible is None:
        return device_id
    check_visible_devices()
    if not 0 <= device_id < len(visible):
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
    value = os.environ[VISIBLE_ENV]
    if not visible:
        return (
            f"{VISIBLE_ENV}={value!r} makes no chip visible (CANN reads comma-separated chip ids up to the first "
            f"entry that is not one): set it to Chip Logic IDs of `npu-smi info -m`, e.g. 0,1, or unset it"
        )
    return (
        f"device ids are logical, counted after {VISIBLE_ENV}={value!r}, which makes "
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
    """Refuse a device id that ``ASCEND_RT_VISIBLE_DEVICES`` (as CANN reads it) leaves no chip for, and a value CANN
    would read otherwise than written, before ACL is asked (ACL would only say "[-1][ACL: general failure]")."""
    visible = visible_devices()
    if visible is None:
        return
    check_visible_devices()
    if not 0 <= device_id < len(visible):
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
