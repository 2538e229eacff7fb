"""paddlex-npu: run PaddleX models on Huawei Ascend NPUs through dynamic-shape OM models.

Usage::

    import paddlex_npu                      # installs the NPU route into PaddleX
    from paddlex import create_pipeline
    ocr = create_pipeline(pipeline="ocr.yaml", device="npu:0", use_hpip=True,
                          hpi_config={"backend": "om", "device_type": "npu", "device_id": 0})

Every model of the pipeline then runs through an ais_bench ``InferSession`` in ``dymshape`` mode (or the CPU
reference runtime with ``PADDLEX_NPU_RUNTIME=reference``). ``engine="om"`` selects the same route natively.
The route is installed when PaddleX is imported (at once if it already is); set ``PADDLEX_NPU_AUTO_INSTALL=0``
to import without patching, then call :func:`install` yourself. Without PaddleX the package still imports (its
runtime and OM layers need no PaddleX); :func:`install` then says what to install.

Layers (each imports only those before it; docs/architecture.md): the base modules (``errors``, ``envs``, ...)
→ ``kernels`` → ``om`` → ``run`` → ``executor`` → ``paddlex`` → ``build`` → ``samples`` → ``reports`` → ``serve``
→ ``deploy`` → ``perf`` → ``ray`` → ``cli``.

Many inputs, K worker processes per device, results in input order::

    for item in paddlex_npu.parallel(config, paths, devices=[0], workers_per_device=2):
        print(item.index, item.results if item.ok else item.error)
"""

from __future__ import annotations

import os
import sys

from . import envs
from .errors import (
    AclCallError,
    ConfigError,
    ConvertError,
    DeviceCallError,
    DeviceLostError,
    ExecutorError,
    IllegalPathError,
    InputMismatchError,
    InputShapeError,
    MismatchError,
    ModelFileError,
    NpuDeviceUnavailableError,
    PaddlexNpuError,
    PatchError,
    PoolClosedError,
    QueueFullError,
    RequestRefusedError,
    RequestTimeoutError,
    RuntimeUnavailableError,
    ShapeInferenceError,
    UnsupportedPaddlexError,
    UrlRefusedError,
    WorkerCrashedError,
    WorkerFailureError,
    WorkerStartError,
    http_status,
)
from .executor import ItemResult
from .paddlex.autoinstall import install_when_paddlex_loads
from .paddlex.fonts import use_system_font
from .paddlex.parallel import ParallelExecutor, parallel
from .paddlex.patcher import install, is_installed, uninstall
from .version import __version__

__all__ = [
    "AclCallError",
    "ConfigError",
    "ConvertError",
    "DeviceCallError",
    "DeviceLostError",
    "ExecutorError",
    "IllegalPathError",
    "MismatchError",
    "PatchError",
    "ShapeInferenceError",
    "ItemResult",
    "ParallelExecutor",
    "InputMismatchError",
    "InputShapeError",
    "ModelFileError",
    "NpuDeviceUnavailableError",
    "PaddlexNpuError",
    "RuntimeUnavailableError",
    "UrlRefusedError",
    "UnsupportedPaddlexError",
    "PoolClosedError",
    "QueueFullError",
    "RequestRefusedError",
    "RequestTimeoutError",
    "WorkerCrashedError",
    "WorkerFailureError",
    "WorkerStartError",
    "__version__",
    "http_status",
    "install",
    "is_installed",
    "parallel",
    "uninstall",
]


def _auto_install() -> bool:
    """Install on import, unless turned off or run as the ``paddlex-npu`` command (which installs only for the
    subcommands that run PaddleX)."""
    if not envs.auto_install():
        return False
    return os.path.basename(sys.argv[0] if sys.argv else "") != "paddlex-npu"


# Whether or not the route is installed (the `paddlex-npu` command installs it later, for the subcommands that run
# PaddleX, in processes whose argv[0] is `paddlex-npu`: serve's workers too): no connection nobody asked for.
envs.no_egress()  # the libraries' telemetry and connectivity checks off unless set (envs.EGRESS_DEFAULTS)
use_system_font()  # result images drawn with a font that is here, not downloaded (paddlex/fonts.py)
if _auto_install():
    install_when_paddlex_loads(install, is_installed)
