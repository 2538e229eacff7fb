"""paddlex-npu: run PaddleX models on Huawei Ascend NPUs through dynamic-shape OM models.

Usage::

    import paddlex_npu                      # installs the patches
    from paddlex import create_pipeline
    ocr = create_pipeline(config="ocr.yaml", device="npu:0", use_hpip=True,
                          hpi_config={"backend": "om", "device_type": "npu", "device_id": 0})

Every model of the pipeline then runs through an ais_bench ``InferSession`` in ``dymshape`` mode (or the CPU
reference runtime with ``PADDLEX_NPU_RUNTIME=reference``). ``engine="om"`` selects the same route natively.
Set ``PADDLEX_NPU_AUTO_INSTALL=0`` to import without patching, then call :func:`install` yourself.
"""

from __future__ import annotations

import os
import sys

from .errors import (
    ConfigError,
    InputMismatchError,
    ModelFileError,
    NpuDeviceUnavailableError,
    PaddlexNpuError,
    RuntimeUnavailableError,
    UnsupportedPaddlexError,
)
from .patcher import install, is_installed, uninstall
from .version import __version__

__all__ = [
    "ConfigError", "InputMismatchError", "ModelFileError", "NpuDeviceUnavailableError", "PaddlexNpuError",
    "RuntimeUnavailableError", "UnsupportedPaddlexError", "__version__", "install", "is_installed", "uninstall",
]  # fmt: skip

# The `paddlex-npu` command installs the patches itself, only for the subcommands that run PaddleX (so that
# `paddlex-npu patch` and `info` work on any PaddleX, even one the plugin would refuse).
_RUNNING_CLI = os.path.basename(sys.argv[0] if sys.argv else "") == "paddlex-npu"
if os.environ.get("PADDLEX_NPU_AUTO_INSTALL", "1") != "0" and not _RUNNING_CLI:
    install()
