"""Install/uninstall: one flag, one adapter chosen by the PaddleX version and layout, one patch record."""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from types import ModuleType
from typing import List, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .adapters.patching import Patches
from .errors import UnsupportedPaddlexError
from .log import logger
from .package import SUPPORTED, SUPPORTED_TEXT, TESTED

_lock = threading.RLock()
_patches: Optional[Patches] = None
_adapter: Optional[str] = None


def paddlex_version() -> Optional[str]:
    try:
        return importlib.metadata.version("paddlex")
    except importlib.metadata.PackageNotFoundError:
        return None


def select_adapter(version: str) -> str:
    """The adapter module for a PaddleX version, or :class:`UnsupportedPaddlexError`."""
    parsed = Version(version)
    for name, spec in SUPPORTED.items():
        if parsed in SpecifierSet(spec):
            return name
    raise UnsupportedPaddlexError(
        f"paddlex-npu supports {SUPPORTED_TEXT}; the installed PaddleX is {version}. "
        f"Install a supported one, e.g. `pip install \"paddlex=={TESTED['paddlex_35']}\"`."
    )


def load_adapter(name: str) -> ModuleType:
    """Import an adapter and check that PaddleX has the layout it patches; refuse unknown layouts."""
    try:
        adapter = importlib.import_module(f"paddlex_npu.adapters.{name}")
    except ImportError as exc:
        raise UnsupportedPaddlexError(
            f"PaddleX {paddlex_version()} does not have the layout paddlex-npu's {name} adapter patches ({exc}); "
            f"unknown layout, not patched. Supported: {SUPPORTED_TEXT}"
        ) from exc
    missing = adapter.missing_hooks()
    if missing:
        raise UnsupportedPaddlexError(
            f"PaddleX {paddlex_version()} lacks {', '.join(missing)}: unknown layout, not patched. "
            f"Supported: {SUPPORTED_TEXT}"
        )
    return adapter


def install() -> bool:
    """Patch PaddleX for the OM route. Idempotent: a second call only warns. Returns whether it patched."""
    global _patches, _adapter
    with _lock:
        if _patches is not None:
            logger.warning("paddlex-npu is already installed; install() did nothing")
            return False
        version = paddlex_version()
        if version is None:
            raise UnsupportedPaddlexError(f"PaddleX is not installed: `pip install paddlex=={TESTED['paddlex_35']}`")
        name = select_adapter(version)
        adapter = load_adapter(name)
        if adapter.is_fork_patched():
            logger.info("this PaddleX carries paddlex-npu's fork patch: the OM route is in its source already")
            return False
        patches = Patches()
        try:
            adapter.apply(patches)
        except Exception:
            patches.revert()
            raise
        _patches, _adapter = patches, name
        logger.debug("installed for PaddleX %s (%s)", version, name)
        return True


def uninstall() -> bool:
    """Restore every patched PaddleX attribute to its original object. Idempotent."""
    global _patches, _adapter
    with _lock:
        if _patches is None:
            logger.warning("paddlex-npu is not installed; uninstall() did nothing")
            return False
        problems = _patches.revert()
        _patches, _adapter = None, None
        if problems:
            logger.warning("some patches were replaced by someone else and were left in place: %s", problems)
        return True


def is_installed() -> bool:
    return _patches is not None


def active_adapter() -> Optional[str]:
    """The adapter in use (``paddlex_34`` / ``paddlex_35``), or None when not installed."""
    return _adapter


def patched_attributes() -> List[Tuple[object, str, object, object]]:
    """(owner, name, original, replacement) of each attribute patched now; empty when not installed."""
    return _patches.attributes() if _patches is not None else []
