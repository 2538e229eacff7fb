"""Which NPU a device id names, and which chip it is.

CANN device ids are *logical*: with ``ASCEND_RT_VISIBLE_DEVICES`` set, the first chip it lists is device 0, the
second device 1, and so on; without it, device N is the chip whose ``npu-smi info -m`` "Chip Logic ID" is N.
Ray sets ``ASCEND_RT_VISIBLE_DEVICES`` for its NPU actors (``ray/_private/accelerators/npu.py``); Kubernetes'
Ascend device plugin and the Ascend docker runtime set ``ASCEND_VISIBLE_DEVICES`` instead, which decides the
``/dev/davinci*`` nodes mounted into the container (the chips there are again counted from 0). ``npu-smi`` ignores
both, and its ``info -l`` counts cards (NPU IDs; an Atlas 300I Duo card holds two chips), not chips.

CANN reads ``ASCEND_RT_VISIBLE_DEVICES`` in its runtime (hicann/runtime @681ef761 ``src/runtime/core/src/runtime.cc``:
``SplitString`` ``:4725-4768``, ``GetVisibleDevices`` ``:4951-5068``): digits, separated by single commas, up to the
first other character (``"0,1 "`` is 0, 1; ``"0;1"`` is 0; a value not starting with a digit, or empty, is none);
then each id in turn until one is at or above the number of chips, or as many ids as chips were read. Ids out of
ascending order or repeated make every device fail, as a value that leaves no id does.
:func:`read_visible_devices` reads it the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Set, Tuple

VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"


_DAVINCI = re.compile(r"davinci[0-9]+")


@dataclass(frozen=True)
class VisibleDevices:
    """How CANN reads one ``ASCEND_RT_VISIBLE_DEVICES`` value: the chip ids it makes visible (device 0, 1, ...),
    why it makes every device fail (``error``; then ``ids`` is empty), and the written text it ignores."""

    ids: List[int]
    error: Optional[str] = None
    ignored: str = ""


def split_ids(value: str) -> Tuple[List[str], str]:
    """``SplitString`` (runtime.cc:4725-4768): the digit runs before the first character that is neither a digit
    nor a single comma, and the text after that point (ignored by CANN)."""
    if not value or not value[0].isdigit():
        return [], value
    tokens, digits, commas = [], "", 0
    for i, ch in enumerate(value):
        if ch.isdigit():
            digits, commas = digits + ch, 0
            continue
        if digits:
            tokens.append(digits)
            digits = ""
        commas += 1
        if ch != "," or commas > 1:
            return tokens, value[i:]
    return tokens + ([digits] if digits else []), ""


def read_visible_devices(value: str, chips: Optional[int] = None) -> VisibleDevices:
    """``GetVisibleDevices`` (runtime.cc:4951-5068) on ``value``, ``chips`` the number of chips when known."""
    tokens, ignored = split_ids(value)
    ids: List[int] = []
    for k, token in enumerate(tokens):
        chip = int(token)
        if chips is not None and chip > chips - 1:
            return VisibleDevices(ids, None, ",".join(tokens[k:]) + ignored) if ids else _none(chips)
        if ids and chip < ids[-1]:
            return VisibleDevices([], "its ids must be in ascending order")
        if chip in ids:
            return VisibleDevices([], "its ids must not repeat")
        ids.append(chip)
        if chips is not None and len(ids) >= chips:
            return VisibleDevices(ids, None, ",".join(tokens[k + 1 :]) + ignored)
    return VisibleDevices(ids, None, ignored) if ids else _none(chips)


def _none(chips: Optional[int]) -> VisibleDevices:
    below = f" below {chips}" if chips is not None else ""
    return VisibleDevices([], f"it names no chip id{below} before a character that is neither a digit nor a comma")


def parse_visible_devices(value: str, chips: Optional[int] = None) -> List[int]:
    """The chip ids CANN makes visible for ``value`` (none when it makes every device fail)."""
    return read_visible_devices(value, chips).ids


def chip_count() -> Optional[int]:
    """The number of chips this machine (or container) gives the driver, from its ``/dev/davinci<N>`` nodes
    (one per chip; what ``drvGetDevNum`` counts), or None where there are none (no NPU here)."""
    try:
        names = os.listdir("/dev")
    except OSError:
        return None
    count = sum(1 for name in names if _DAVINCI.fullmatch(name))
    return count or None


def visible_devices(chips: Optional[int] = None) -> Optional[List[str]]:
    """The chip ids ``ASCEND_RT_VISIBLE_DEVICES`` makes visible as CANN reads it (None when it is not set);
    ``chips``: the number of chips, else :func:`chip_count`."""
    value = os.environ.get(VISIBLE_ENV)
    if value is None:
        return None
    return [str(i) for i in parse_visible_devices(value, chips if chips is not None else chip_count())]


_WARNED: Set[str] = set()


def check_visible_devices(chips: Optional[int] = None) -> None:
    """Refuse an ``ASCEND_RT_VISIBLE_DEVICES`` with which CANN makes every device fail (ids not ascending,
    repeated, or none); warn once when CANN ignores written ids (after a character other than a digit or comma, or
    at or above the number of chips)."""
    from ..errors import ConfigError
    from ..log import logger

    value = os.environ.get(VISIBLE_ENV)
    if value is None:
        return
    reading = read_visible_devices(value, chips if chips is not None else chip_count())
    if reading.error:
        written = sorted({int(t) for t in re.findall(r"[0-9]+", value)})
        example = ",".join(str(i) for i in written) or "0"
        raise ConfigError(
            f"{VISIBLE_ENV}={value!r}: CANN makes every device fail with it ({reading.error}): write ascending, "
            f"distinct Chip Logic IDs of `npu-smi info -m` separated by commas, e.g. {VISIBLE_ENV}={example}, "
            "or unset it"
        )
    if re.search(r"[0-9]", reading.ignored) and value not in _WARNED:
        _WARNED.add(value)
        logger.warning(
            "%s=%r: CANN reads only %s and ignores %r (it stops at a character other than a digit or a single comma, "
            "and at an id past the chips): device ids 0..%d are those chips",
            VISIBLE_ENV,
            value,
            ",".join(map(str, reading.ids)),
            reading.ignored,
            len(reading.ids) - 1,
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
