"""The one parser of device strings (``npu``, ``npu:1``, ``npu:0,1``, ``cpu``, ``gpu:0``): the PaddleX adapters'
routing, PaddleX's multi-device pipelines and the servers all read a device through :func:`parse_device`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .errors import ConfigError


@dataclass(frozen=True)
class Device:
    """A parsed device string: its kind (lower case; None when no device was given) and the ids it names."""

    kind: Optional[str]
    ids: Tuple[int, ...] = ()

    @property
    def first(self) -> Optional[int]:
        return self.ids[0] if self.ids else None

    @property
    def is_npu(self) -> bool:
        return self.kind == "npu"


def parse_device(device: Optional[str]) -> Device:
    """``"npu:0,1"`` -> Device("npu", (0, 1)); ``"npu"`` -> Device("npu", ()); None or "" -> Device(None, ()).

    NPU ids must be distinct whole numbers >= 0 (:class:`ConfigError` naming the fix otherwise); the ids of
    other kinds are PaddleX's business and kept only where they are plain numbers."""
    if device is None or not str(device).strip():
        return Device(None)
    kind, _, ids = str(device).strip().partition(":")
    kind = kind.strip().lower()
    parts = [i.strip() for i in ids.split(",")] if ids.strip() else []
    if kind != "npu":
        return Device(kind, tuple(int(i) for i in parts if i.isdigit()))
    if not all(i.isdigit() for i in parts):
        raise ConfigError(f"device {device!r}: NPU ids are whole numbers >= 0: give npu, npu:0 or npu:0,1")
    out = tuple(int(i) for i in parts)
    if len(set(out)) != len(out):
        raise ConfigError(f"device {device!r} names an NPU twice: give distinct ids, e.g. npu:0,1")
    return Device(kind, out)


def npu_ids(device: Optional[str]) -> List[int]:
    """The NPU ids a device string names (empty for any other device, and for a bare ``npu``)."""
    parsed = parse_device(device)
    return list(parsed.ids) if parsed.is_npu else []
