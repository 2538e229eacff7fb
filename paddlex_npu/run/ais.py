"""The real Ascend runtime: ``ais_bench.infer.interface.InferSession``, imported lazily.

The wheels' version string never changes (0.0.2 since 2022) while the API did, so features are detected,
never read from a version (older ones run ``dymbatch``/``dymhw`` without setting the gear: we set it).

Contexts (ais_bench ``DeviceManager.cpp``): every ais_bench call makes the session's ACL context current on the
calling thread and leaves it so; we save the thread's context and restore it afterwards (the session is built
inside that guard too), so other ACL users (torch_npu, pyACL) in the same thread keep theirs. When ACL was
already initialised in the process by another library (``aclInit`` returns "repeat initialize": paddle-custom-npu's
plugin, torch_npu, MindSpore; :func:`acl_initialisers`), the first session on a device *borrows* the device's
default context instead of creating one, and its ``free_resource`` would destroy that borrowed context (CANN
forbids it): such a session is never freed (logged). A context just destroyed is never restored. ``aclInit`` runs
once per process, so only the first session's ``acl_json_path`` counts: a later, different one is warned about once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import logging
import sys
import threading
from typing import Any, Dict, Iterator, List, Optional, Set, Union

from ..errors import NpuDeviceUnavailableError, RuntimeUnavailableError
from ..log import logger
from .device_ids import check_device_id, device_hint

INSTALL_HINT = (
    "install Ascend's ais_bench and aclruntime wheels for your CANN and Python "
    "(e.g. `pip install aclruntime-0.0.2-cp311-cp311-linux_aarch64.whl ais_bench-0.0.2-py3-none-any.whl`, "
    "from the Ascend tools ais_bench release page) after `source /usr/local/Ascend/ascend-toolkit/set_env.sh`; "
    "or run on the CPU reference runtime: set PADDLEX_NPU_RUNTIME=reference or "
    "backend_config={'runtime': 'reference'}"
)


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """Undo what an import does to the root logger: ais_bench's modules call ``logging.basicConfig(stream=sys.stdout,
    level=INFO)`` when imported (``infer/common/logger.py``, ``utils.py``, ``path_security_check.py``), which would
    make every server and worker process print every library's INFO records on stdout."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


def load_session_class() -> type:
    """``ais_bench.infer.interface.InferSession`` or a :class:`RuntimeUnavailableError` that says why."""
    try:
        with root_logging_kept():
            from ais_bench.infer.interface import InferSession
    except ImportError as exc:
        spec = importlib.util.find_spec("ais_bench")
        if spec is not None and importlib.util.find_spec("ais_bench.benchmark") is not None:
            raise RuntimeUnavailableError(
                "the installed `ais_bench` package is AISBench's benchmark tool (ais_bench_benchmark), which "
                "shadows Ascend's ais_bench inference package: `pip uninstall ais_bench_benchmark`, then "
                + INSTALL_HINT
            ) from exc
        raise RuntimeUnavailableError(
            f"ais_bench is not importable ({exc}), so nothing can run on an NPU here: without an NPU, set "
            "PADDLEX_NPU_RUNTIME=reference (the CPU reference runtime); on an Ascend machine, install Ascend's "
            f"ais_bench and aclruntime wheels.\nTo {INSTALL_HINT}"
        ) from exc
    return InferSession


def reset_memory_summary() -> None:
    """Clear ais_bench's ``MemorySummary`` (H2D/D2H copy times, appended per copy), where this ais_bench has it."""
    try:
        with root_logging_kept():
            from ais_bench.infer.interface import MemorySummary
    except ImportError:
        return
    reset = getattr(MemorySummary, "reset", None)
    if callable(reset):
        reset()


def features(session_cls: type) -> Dict[str, bool]:
    """Which API generation the installed ais_bench has."""
    infer_params = inspect.signature(session_cls.infer).parameters
    return {
        "out_array": "out_array" in infer_params,
        "set_context": hasattr(session_cls, "set_context"),
        "free_resource": hasattr(session_cls, "free_resource"),
        "summary": hasattr(session_cls, "summary"),
        "infer_pipeline": hasattr(session_cls, "infer_pipeline"),
    }


def _acl() -> Any:
    try:
        import acl  # type: ignore[import-not-found]
    except ImportError:
        return None
    return acl


def current_context() -> Optional[Any]:
    """The calling thread's current ACL context (pyACL ``acl.rt.get_context``), or None (none, or no pyACL)."""
    acl = _acl()
    if acl is None:
        return None
    context, ret = acl.rt.get_context()
    return context if ret == 0 and context else None


@contextlib.contextmanager
def keep_acl_context(skip: Optional[Any] = None) -> Iterator[None]:
    """Restore the calling thread's current ACL context after an ais_bench call (no-op without pyACL), unless it
    is ``skip`` (a context that the call destroyed)."""
    saved = current_context()
    try:
        yield
    finally:
        if saved is not None and saved != skip:
            _acl().rt.set_context(saved)


# Libraries that call aclInit when they load (paddle-custom-npu's plugin in its Init(), torch_npu and MindSpore at
# import). ais_bench then gets ACL_ERROR_REPEAT_INITIALIZE and borrows each device's default context
# (DeviceManager.cpp CreateContext: ``contexts_[deviceId].empty() && !repeatInitAclFlag``), whether or not a context
# is current on the opening thread.
ACL_INITIALISING_MODULES = ("torch_npu", "mindspore", "paddle_custom_device")


def acl_initialisers() -> List[str]:
    """What in this process has (or may have) called ``aclInit`` before paddlex-npu's first session: the modules
    above, or Paddle with the ``npu`` custom device registered (paddle-custom-npu)."""
    found = [m for m in ACL_INITIALISING_MODULES if sys.modules.get(m) is not None]
    paddle = sys.modules.get("paddle")
    if paddle is not None:
        try:
            if "npu" in paddle.device.get_all_custom_device_type():
                found.append("paddle (custom device npu)")
        except Exception:  # noqa: BLE001 - an older or partial Paddle: no custom devices
            pass
    return found


class _Process:
    """What ais_bench's process-wide state (one aclInit, one context per device to borrow) makes of sessions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.foreign_acl: Optional[bool] = None  # ACL initialised by another library before our first session
        self.devices: Set[int] = set()
        self.acl_json_path: Optional[str] = None
        self.acl_json_warned = False

    def opening(self, device_id: int, acl_json_path: Optional[str]) -> bool:
        """Record a session about to open; True when it will borrow another library's context."""
        with self.lock:
            first = self.foreign_acl is None
            if first:
                self.foreign_acl = current_context() is not None or bool(acl_initialisers())
                self.acl_json_path = acl_json_path
            elif acl_json_path != self.acl_json_path and not self.acl_json_warned:
                self.acl_json_warned = True
                logger.warning(
                    "acl_json_path %r is ignored: ACL is initialised once per process, with the first session's "
                    "acl_json_path (%r); set it on the first model loaded in the process",
                    acl_json_path,
                    self.acl_json_path,
                )
            borrowed = bool(self.foreign_acl) and device_id not in self.devices
            self.devices.add(device_id)
            return borrowed


PROCESS = _Process()


class AisSession:
    """ais_bench's ``InferSession`` behind the :class:`~.session.Session` protocol; its features are detected
    once, so the runner never probes the session."""

    def __init__(self, session: Any, context: Optional[Any] = None, borrowed: bool = False) -> None:
        self.raw = session
        self.features = features(type(session))
        self.features["gear_modes"] = _infers_gear_modes(session)
        self.context = context  # the session's ACL context (current right after it was built)
        self.borrowed = borrowed

    def get_inputs(self) -> List[Any]:
        return list(self.raw.get_inputs())

    def get_outputs(self) -> List[Any]:
        return list(self.raw.get_outputs())

    def infer(
        self,
        feeds: list,
        mode: str = "static",
        custom_sizes: Union[int, List[int], None] = 100000,
        out_array: bool = True,
    ) -> List[Any]:
        if mode in ("dymbatch", "dymhw") and not self.features["gear_modes"]:
            self._set_gear(feeds, mode)
        if self.features["out_array"]:
            return self.raw.infer(feeds, mode=mode, custom_sizes=custom_sizes, out_array=out_array)
        return self.raw.infer(feeds, mode=mode, custom_sizes=custom_sizes)

    def _set_gear(self, feeds: list, mode: str) -> None:
        """An ais_bench whose ``infer`` ignores dymbatch/dymhw: set the gear as newer ones do (same input scan)."""
        for desc, feed in zip(self.get_inputs(), feeds):
            shape = list(desc.shape)
            if mode == "dymbatch" and -1 in shape:
                self.raw.set_dynamic_batchsize(int(feed.shape[shape.index(-1)]))
                return
            if mode == "dymhw" and len(shape) == 4 and shape[2] < 0 and shape[3] < 0:
                self.raw.set_dynamic_hw(int(feed.shape[2]), int(feed.shape[3]))
                return
        raise RuntimeError(f"not a {mode} model!")

    def set_custom_outsize(self, custom_sizes: List[int]) -> None:
        self.raw.set_custom_outsize(custom_sizes)

    def reset_summaryinfo(self) -> None:
        """Clear the session's per-execution timing list (ais_bench ``InferSession.reset_summaryinfo``, which calls
        the C++ ``reset_sumaryinfo``; ``reset_sumaryinfo`` on the wrapper before ait 2023-10). Without it the list
        grows by one entry per execution for the life of the process."""
        for name in ("reset_summaryinfo", "reset_sumaryinfo"):
            reset = getattr(self.raw, name, None)
            if callable(reset):
                reset()
                return

    def free_resource(self) -> None:
        if self.borrowed:
            logger.warning(
                "not freeing this ais_bench session: ACL was initialised by another library in this process, so the "
                "session borrowed that library's ACL context, and free_resource would destroy it (CANN forbids "
                "destroying contexts not made by aclrtCreateContext). Its device memory is released at process exit"
            )
            return
        if self.features["free_resource"]:
            with keep_acl_context(skip=self.context):
                self.raw.free_resource()


def _infers_gear_modes(session: Any) -> bool:
    """Whether ``infer(mode=...)`` sets dymbatch/dymhw gears itself (ais_bench from 2023-09: ``infer_mode_switch``)."""
    switch = getattr(session, "infer_mode_switch", None)
    if isinstance(switch, dict):
        return "dymbatch" in switch and "dymhw" in switch
    try:
        source = inspect.getsource(type(session).infer)
    except (OSError, TypeError):
        return False
    return "infer_mode_switch" in source or "_dymbatch_prepare" in source


def open_session(om_path: str, device_id: int, acl_json_path: Optional[str] = None, **options: Any) -> AisSession:
    """Build the session inside the context guard; note whether it borrowed another library's context."""
    session_cls = load_session_class()
    check_device_id(device_id)
    borrowed = PROCESS.opening(device_id, acl_json_path)
    with keep_acl_context():
        try:
            raw = session_cls(device_id, om_path, acl_json_path=acl_json_path, **options)
        except RuntimeError as exc:  # ais_bench says only "[-1][ACL: general failure]"; the detail is on stdout
            raise NpuDeviceUnavailableError(
                f"ais_bench could not open {om_path} on device {device_id} ({str(exc).strip() or type(exc).__name__}; "
                f"ais_bench's log above says more): {device_hint(device_id)}. With the right device, check that the "
                "OM was built for this chip (`npu-smi info -m`) and that `npu-smi info` shows the chip healthy"
            ) from exc
        context = current_context()
    if borrowed:
        logger.warning(
            "ais_bench session for %s borrows the ACL context another library made (ACL was initialised before "
            "paddlex-npu's first session); it will not be freed on close, see paddlex_npu/run/ais.py",
            om_path,
        )
    return AisSession(raw, context, borrowed)
