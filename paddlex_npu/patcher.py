"""Install/uninstall: one flag, one adapter chosen by the PaddleX version and layout, one patch record."""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .adapters.patching import Patches
from .errors import UnsupportedPaddlexError
from .log import logger
from .package import SUPPORTED, SUPPORTED_TEXT

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
    hint = (
        " PaddleX 3.0-3.4 (create_static_infer layout) is not supported by this release: upgrade PaddleX."
        if parsed < Version("3.5")
        else ""
    )
    raise UnsupportedPaddlexError(
        f"paddlex-npu supports {SUPPORTED_TEXT}; the installed PaddleX is {version}.{hint} "
        f"Install a supported one, e.g. `pip install \"paddlex{SUPPORTED['paddlex_35']}\"`."
    )


def _check_layout(name: str) -> None:
    if name == "paddlex_35":
        try:
            engines = importlib.import_module("paddlex.inference.models.engines")
            bindings = importlib.import_module("paddlex.inference.models.bindings")
            models = importlib.import_module("paddlex.inference.models")
        except ImportError as exc:
            raise UnsupportedPaddlexError(
                f"PaddleX {paddlex_version()} does not have the runner/engine layout paddlex-npu patches ({exc}); "
                f"supported: {SUPPORTED_TEXT}"
            ) from exc
        needed = [
            (engines, "RunnerEngine"), (engines, "InferenceEngine"), (bindings, "default_registry"),
            (models, "create_predictor"), (models, "_get_inference_engine"),
        ]  # fmt: skip
        missing = [f"{m.__name__}.{a}" for m, a in needed if not hasattr(m, a)]
        if not hasattr(getattr(bindings, "default_registry", None), "_registry"):
            missing.append("BindingRegistry._registry")
        if missing:
            raise UnsupportedPaddlexError(
                f"PaddleX {paddlex_version()} lacks {', '.join(missing)}: unknown layout, not patched. "
                f"Supported: {SUPPORTED_TEXT}"
            )


def install() -> bool:
    """Patch PaddleX for the OM route. Idempotent: a second call only warns. Returns whether it patched."""
    global _patches, _adapter
    with _lock:
        if _patches is not None:
            logger.warning("paddlex-npu is already installed; install() did nothing")
            return False
        version = paddlex_version()
        if version is None:
            raise UnsupportedPaddlexError(
                f"PaddleX is not installed: `pip install \"paddlex{SUPPORTED['paddlex_35']}\"`"
            )
        name = select_adapter(version)
        _check_layout(name)
        adapter = importlib.import_module(f"paddlex_npu.adapters.{name}")
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
