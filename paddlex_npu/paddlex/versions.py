"""Supported PaddleX versions, as data: one PEP 440 range per adapter. ``setup.cfg`` requires only the lower bound
(:data:`INSTALL_REQUIREMENT`: the next PaddleOCR, which pins the next PaddleX, must stay installable); the route
checks the range when it installs and refuses a newer PaddleX unless ``PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX=1``."""

from __future__ import annotations

from typing import Optional

SUPPORTED = {
    # 3.0-3.4: BasePredictor.create_static_infer builds PaddleInfer/HPInfer (tested: 3.4.3).
    "paddlex_34": ">=3.0,<3.5",
    # 3.5+: create_predictor builds a runner through the engine registry (tested: 3.7.2).
    "paddlex_35": ">=3.5,<3.8",
}
TESTED = {"paddlex_34": "3.4.3", "paddlex_35": "3.7.2"}
REQUIREMENT = "paddlex>=3.0,<3.8"  # the union of SUPPORTED: the tested range the route checks at install()
INSTALL_REQUIREMENT = "paddlex>=3.0"  # setup.cfg's install_requires and extras: the lower bound only
NEWEST_ADAPTER = "paddlex_35"  # what an untested newer PaddleX is tried with, when allowed
SUPPORTED_TEXT = f"{REQUIREMENT} (3.0-3.4: create_static_infer layout; 3.5-3.7: runner/engine layout)"


def paddlex_version() -> Optional[str]:
    """The installed PaddleX's version (its distribution's), or None."""
    import importlib.metadata  # ~15 ms: loaded when asked, not by `import paddlex_npu`

    try:
        return importlib.metadata.version("paddlex")
    except importlib.metadata.PackageNotFoundError:
        return None
