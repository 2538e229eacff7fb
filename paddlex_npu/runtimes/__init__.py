"""Session runtimes behind one ``InferSession`` contract.

- ``ais_bench``: Ascend's ``ais_bench.infer.interface.InferSession`` on a real NPU (:mod:`.ais`);
- ``reference``: the CPU reference runtime, the same contract over ONNX Runtime (:mod:`.reference`).

The runtime is chosen by ``backend_config["runtime"]``, else the ``PADDLEX_NPU_RUNTIME`` environment
variable, else ``ais_bench``. There is no silent fallback from one to the other.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional

from ..errors import ConfigError
from ..model_files import OMPackage

RUNTIME_ENV = "PADDLEX_NPU_RUNTIME"
RUNTIMES = ("ais_bench", "reference")
DEFAULT_RUNTIME = "ais_bench"


def resolve_runtime_name(requested: Optional[str] = None) -> str:
    name = requested or os.environ.get(RUNTIME_ENV) or DEFAULT_RUNTIME
    if name not in RUNTIMES:
        source = "backend_config['runtime']" if requested else RUNTIME_ENV
        raise ConfigError(f"unknown runtime {name!r} in {source}: choose one of {', '.join(RUNTIMES)}")
    return name


@dataclass
class OpenedSession:
    """A session plus the guard to hold around each of its calls."""

    runtime: str
    session: Any
    call_guard: Callable[[], ContextManager[None]]


def open_session(
    runtime: str,
    package: OMPackage,
    device_id: int,
    *,
    acl_json_path: Optional[str] = None,
    debug: bool = False,
    manifest: Any = None,
) -> OpenedSession:
    """Open ``package`` on ``runtime``; ``manifest`` tells the reference runtime how the OM was built."""
    if runtime == "reference":
        from .reference import InferSession

        session = InferSession(
            device_id, str(package.om_path), acl_json_path, debug,
            onnx_path=str(package.onnx_path) if package.onnx_path else None, manifest=manifest,
        )  # fmt: skip
        return OpenedSession(runtime, session, contextlib.nullcontext)
    from . import ais

    session = ais.open_session(str(package.om_path), device_id, acl_json_path=acl_json_path, debug=debug)
    return OpenedSession(runtime, session, ais.keep_acl_context)
