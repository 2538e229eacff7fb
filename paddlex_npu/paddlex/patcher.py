"""Install/uninstall: one adapter chosen by the PaddleX version and layout, applied with the route's speed-ups
(:mod:`.speedups`) as one patch (:class:`~.record.Applied`); on a fork-patched PaddleX, what its source does not do
itself, applied once into a record kept for the process (:func:`enable_fork`)."""

from __future__ import annotations

import importlib
import threading
from typing import List, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import envs
from ..errors import UnsupportedPaddlexError
from ..log import logger
from .adapter import Adapter
from .record import Applied, Patch, PatchRecord
from .versions import NEWEST_ADAPTER, REQUIREMENT, SUPPORTED, SUPPORTED_TEXT, TESTED, paddlex_version

_lock = threading.RLock()
_applied: Optional[Applied] = None  # the route, while installed
_adapter: Optional[Adapter] = None
_adapter_version: Optional[str] = None
_forked: Optional[PatchRecord] = None  # what the fork path applied in this process (kept: never reverted)


class Route(Patch):
    """The route: the adapter's hooks (its ``requires``), then the registry's speed-ups (each row this PaddleX
    lacks switched off alone, :func:`.speedups.apply`)."""

    def __init__(self, chosen: Adapter) -> None:
        self.adapter, self.name = chosen, chosen.name

    def requires(self) -> List[str]:
        return self.adapter.requires()

    def apply(self, record: PatchRecord) -> None:
        from . import speedups  # NumPy and the runner: loaded when the route installs, not by `import paddlex_npu`

        self.adapter.apply(record)
        speedups.apply(record)


def select_adapter(version: str) -> str:
    """The adapter module for a PaddleX version, or :class:`UnsupportedPaddlexError`."""
    parsed = Version(version)
    for name, spec in SUPPORTED.items():
        if parsed in SpecifierSet(spec):
            return name
    if _newer_than_tested(parsed) and envs.allow_untested_paddlex():
        logger.warning(
            "PaddleX %s is newer than the tested range (%s): trying the %s adapter because %s=1 (its layout is still "
            "checked); if something fails, install a tested one: %s",
            version,
            REQUIREMENT,
            NEWEST_ADAPTER,
            envs.ALLOW_UNTESTED_PADDLEX.name,
            _INSTALL_TESTED,
        )
        return NEWEST_ADAPTER
    raise UnsupportedPaddlexError(
        f"paddlex-npu supports {SUPPORTED_TEXT}; the installed PaddleX is {version}: {unsupported_fix(version)}."
    )


_INSTALL_TESTED = f'`pip install "paddlex=={TESTED[NEWEST_ADAPTER]}"`'


def _newer_than_tested(version: Version) -> bool:
    return all(version > Version(v) for v in TESTED.values())


def unsupported_fix(version: str) -> str:
    """What to do about a PaddleX outside the supported range: install a tested one, or (a newer one) allow it."""
    if _newer_than_tested(Version(version)):
        return (
            f"install a tested one, {_INSTALL_TESTED}, or set {envs.ALLOW_UNTESTED_PADDLEX.name}=1 to try this "
            "newer one at your own risk"
        )
    return f"install a supported one, {_INSTALL_TESTED}"


def load_adapter(name: str) -> Adapter:
    """Import an adapter and check that PaddleX has the layout it patches; refuse unknown layouts."""
    try:
        adapter: Adapter = importlib.import_module(f"paddlex_npu.paddlex.{name}").ADAPTER
    except ImportError as exc:
        raise UnsupportedPaddlexError(
            f"PaddleX {paddlex_version()} does not have the layout paddlex-npu's {name} adapter patches ({exc}); "
            f"unknown layout, not patched: install a tested PaddleX, {_INSTALL_TESTED}. Supported: {SUPPORTED_TEXT}"
        ) from exc
    missing = adapter.requires()
    if missing:
        raise UnsupportedPaddlexError(
            f"PaddleX {paddlex_version()} lacks {', '.join(missing)}: unknown layout, not patched: install a tested "
            f"PaddleX, {_INSTALL_TESTED}. Supported: {SUPPORTED_TEXT}"
        )
    return adapter


def adapter() -> Adapter:
    """The adapter of the installed PaddleX (loaded and checked once per version), installed or not."""
    global _adapter, _adapter_version
    with _lock:
        from .autoinstall import take_pending

        install_after = take_pending()
        version = paddlex_version()
        if version is None:
            raise UnsupportedPaddlexError(f"PaddleX is not installed: `pip install paddlex=={TESTED['paddlex_35']}`")
        if _adapter is None or _adapter_version != version:
            _adapter, _adapter_version = load_adapter(select_adapter(version)), version
        if install_after and _applied is None:
            install()
        return _adapter


def install() -> bool:
    """Patch PaddleX for the OM route. Idempotent: a second call only warns. Returns whether it patched."""
    global _applied
    with _lock:
        if _applied is not None:
            logger.warning("paddlex-npu is already installed; install() did nothing")
            return False
        chosen = adapter()
        if _applied is not None:  # the pending import hook installed it just now (adapter() imported PaddleX)
            return True
        if chosen.is_fork_patched():
            logger.info("this PaddleX carries paddlex-npu's fork patch: the OM route is in its source already")
            return False
        applied = Applied(Route(chosen), f"install a tested PaddleX, {_INSTALL_TESTED}. Supported: {SUPPORTED_TEXT}")
        applied.apply()
        _applied = applied
        logger.debug("installed for PaddleX %s (%s)", paddlex_version(), chosen.name)
        return True


def uninstall() -> bool:
    """Restore every patched PaddleX attribute to its original object. Idempotent."""
    global _applied
    with _lock:
        if _applied is None:
            logger.warning("paddlex-npu is not installed; uninstall() did nothing")
            return False
        problems = _applied.revert()
        _applied = None
        if problems:
            logger.warning("some patches were replaced by someone else and were left in place: %s", problems)
        return True


def is_installed() -> bool:
    return _applied is not None


def patched_attributes() -> List[Tuple[object, str, object, object]]:
    """(owner, name, original, replacement) of each attribute patched now; empty when not installed."""
    return _applied.attributes() if _applied is not None else []


def patched_items() -> List[Tuple[object, object, object, object]]:
    """(mapping, key, original, replacement) of each registry item set now (PaddleX 3.5+: the ``om`` engine and
    its bindings); empty when not installed."""
    record = _applied.record if _applied is not None else None
    return record.items() if record is not None else []


def enable_fork(chosen: Adapter) -> bool:
    """What a fork-patched PaddleX gets at run time beside the routing in its source: the adapter's part
    (:meth:`~.adapter.Adapter.fork`) and the route's speed-ups, applied once per process into a record kept for it
    (:func:`fork_record`); the fork hooks call it. Returns whether it applied now."""
    global _forked
    with _lock:
        if _forked is not None:
            return False
        from . import speedups

        record = PatchRecord()
        try:
            chosen.fork(record)
            speedups.apply(record)
        except BaseException:
            record.revert()
            raise
        _forked = record
        return True


def fork_record() -> Optional[PatchRecord]:
    """The record of what :func:`enable_fork` applied in this process (None before it ran)."""
    return _forked
