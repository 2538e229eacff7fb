"""The session contract and the choice of runtime.

Two runtimes satisfy one :class:`Session` protocol (the part of ais_bench's ``InferSession`` the runner uses):

- ``ais_bench``: Ascend's ``ais_bench.infer.interface.InferSession`` on a real NPU (:mod:`.ais`);
- ``reference``: the CPU reference runtime, the same contract over ONNX Runtime (:mod:`.reference`);
- ``simulated``: the reference runtime's outputs replayed on a simulated device that holds the GIL for a
  modelled device time and is shared across processes (:mod:`.simulated`), for throughput work on a CPU.

The runtime is chosen by ``backend_config["runtime"]``, else the ``PADDLEX_NPU_RUNTIME`` environment
variable, else ``ais_bench``. There is no silent fallback from one to the other.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, List, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from .. import envs, runtimes
from ..config import SimulationConfig
from ..errors import ConfigError
from ..om.manifest import OMManifest
from ..om.package import OMPackage

RUNTIMES = runtimes.NAMES
DEFAULT_RUNTIME = runtimes.DEFAULT


class TensorDesc(Protocol):
    """``aclruntime.tensor_desc``: dynamic dims are -1; ``size`` is 0 when the OM does not know it."""

    name: str
    datatype: Any
    format: int
    shape: List[int]
    size: int
    realsize: int


@runtime_checkable
class Session(Protocol):
    """What the OM runner needs of an ``InferSession`` (both runtimes satisfy it)."""

    def get_inputs(self) -> Sequence[TensorDesc]: ...

    def get_outputs(self) -> Sequence[TensorDesc]: ...

    def infer(
        self,
        feeds: list,
        mode: str = "static",
        custom_sizes: Union[int, List[int], None] = 100000,
        out_array: bool = True,
    ) -> List[np.ndarray]: ...

    def set_custom_outsize(self, custom_sizes: List[int]) -> None: ...

    def free_resource(self) -> None: ...


def resolve_runtime_name(requested: Optional[str] = None) -> str:
    """The runtime to use: ``requested``, else ``$PADDLEX_NPU_RUNTIME``, else ``ais_bench``."""
    name = requested or envs.runtime() or DEFAULT_RUNTIME
    if name not in RUNTIMES:
        source = "backend_config['runtime']" if requested else envs.RUNTIME.name
        raise ConfigError(f"unknown runtime {name!r} in {source}: choose one of {', '.join(RUNTIMES)}")
    return name


@dataclass
class OpenedSession:
    """A session plus the guard to hold around each of its calls."""

    runtime: str
    session: Session
    call_guard: Callable[[], ContextManager[None]]

    def trim_logs(self) -> None:
        """Clear the timing logs that grow by one entry per execution for the life of the session: the session's
        ``summary().exec_time_list`` (``reset_summaryinfo``, ``reset_sumaryinfo`` before ait 2023-10) and, on the
        device, ais_bench's process-wide ``MemorySummary`` H2D/D2H lists. Nothing of paddlex-npu reads them;
        left alone they grow without bound in a long-running process."""
        for name in ("reset_summaryinfo", "reset_sumaryinfo"):
            reset = getattr(self.session, name, None)
            if callable(reset):
                reset()
                break
        if self.runtime == "ais_bench":
            from . import ais

            ais.reset_memory_summary()


def open_session(
    runtime: str,
    package: OMPackage,
    device_id: int,
    manifest: Optional[OMManifest],
    *,
    acl_json_path: Optional[str] = None,
    debug: bool = False,
    simulation: Optional[SimulationConfig] = None,
    task: Optional[str] = None,
) -> OpenedSession:
    """Open ``package`` on ``runtime``. ``manifest`` (resolved once by the runner) tells the reference runtime
    how the OM was built; the device reads that from the OM itself. ``simulation`` and ``task`` (the PaddleX
    predictor class, which picks the default cost model) are for the simulated device."""
    if runtime in runtimes.ONNX_NAMES:  # the CPU: ONNX Runtime on the ONNX the OM was built from
        from .reference import InferSession

        cls, extra = InferSession, {}
        if runtime == "simulated":
            from .simulated import SimulatedSession

            cls, extra = SimulatedSession, {"simulation": simulation, "task": task}
        session = cls(
            device_id,
            str(package.om_path),
            acl_json_path,
            debug,
            onnx_path=str(package.onnx_path) if package.onnx_path else None,
            manifest=manifest,
            **extra,
        )
        if runtime == "simulated":  # it fails as ais_bench does: ACL (its stand-in) is asked after a failure
            from .acl_errors import JudgedSession, LossJudge
            from .simulated import ACL

            session = JudgedSession(session, LossJudge(ACL, device_id))
        return OpenedSession(runtime, session, contextlib.nullcontext)
    from . import ais

    session = ais.open_session(str(package.om_path), device_id, acl_json_path=acl_json_path, debug=debug)
    return OpenedSession(runtime, session, ais.keep_acl_context)
