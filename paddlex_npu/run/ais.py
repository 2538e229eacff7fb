"""The real Ascend runtime: ``ais_bench.infer.interface.InferSession``, imported lazily.

The wheels' version string never changes (0.0.2 since 2022) while the API did, so features are detected,
never read from a version (older ones run ``dymbatch``/``dymhw`` without setting the gear: we set it).

Contexts (ais_bench ``backend/base/module/DeviceManager/DeviceManager.cpp``): every ais_bench call makes the
session's ACL context current on the calling thread and leaves it so; we save the thread's context and restore it
afterwards (the session is built inside that guard too), so other ACL users (torch_npu, pyACL) in the same thread
keep theirs. What happens when something else called ``aclInit`` first depends on the ais_bench generation:

- from Ascend tools' commit a04bd85b ("fix finalize", 2024-12-09) on, ``InitDevices`` takes ``aclInit``'s
  ``ACL_ERROR_REPEAT_INITIALIZE`` and ``CreateContext`` then *borrows* the device's current context
  (``aclrtGetCurrentContext`` after ``aclrtSetDevice``: the device's default context) for the first session on a
  device; its ``free_resource`` would destroy that context (CANN forbids destroying contexts not made by
  ``aclrtCreateContext``), so such a session is never freed (logged);
- before it, ``InitDevices`` returns that code with its counter at 0 (``DeviceManager.cpp@a04bd85b^:54-68``), but
  its only caller, the ``TensorContext`` constructor, logs it and goes on (``TensorContext.cpp@a04bd85b^:27-39``):
  the session opens on a context of its own and infers; only ``free_resource`` returns 1009 (``DestroyContext``,
  ``:138-142``), leaving that context alive. Such sessions are opened with a warning, and ``free_resource``'s int
  is checked (the ``InferSession`` wrapper drops it: the pybind session's is read).

Which generation is installed is read from the aclruntime extension itself (:func:`ais_bench_borrows`: its
``WARN_LOG("acl repeat initialize")`` text exists only from that commit on; the wheel's version never changes).
Whether a session borrowed is decided as ais_bench decides it: with pyACL, the session's context is compared with
the device's default context (which catches a pyACL user's own ``acl.init()`` as ais_bench does); without pyACL, a
library known to have initialised ACL counts (:func:`acl_initialisers`; torch_npu only once its lazy init ran).
A context just destroyed is never restored. ``aclInit`` runs once per process, so only the first session's
``acl_json_path`` counts: a later, different one is warned about once.

Device-fatal errors: a failed ``infer`` says only ``[-1][ACL: general failure]``, so whether the device is lost is
asked of ACL on the calling thread (:class:`~.acl_errors.LossJudge`); a lost device raises
:class:`~paddlex_npu.errors.DeviceLostError`, so the worker holding the session can be replaced by its
supervisor; other failures keep their own error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Union

from ..errors import DeviceLostError, NpuDeviceUnavailableError, RuntimeUnavailableError
from ..log import logger
from .acl_errors import LossJudge, acl_code, fatal_code_lost
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


def forwarded_to(session_cls: type) -> Any:
    """What ``InferSession.__getattr__`` forwards unknown names to, or None (a class without one). From Yanguan619/
    aclruntime 3eab4a91 (2026-06) interface.py's ``__getattr__`` returns ``getattr(self.session, name)``,
    ``self.session`` an ``aclruntime.InferenceSession`` (pybind): ``set_context`` (since then) and ``free_resource``
    (since df1f9a44, 2026-08) exist only there, so they are looked up on that class, from the ``aclruntime`` that
    the class's module imported."""
    if not hasattr(session_cls, "__getattr__"):
        return None
    module = sys.modules.get(session_cls.__module__)
    return getattr(getattr(module, "aclruntime", None), "InferenceSession", None)


def features(session_cls: type) -> Dict[str, bool]:
    """Which API generation the installed ais_bench has: its methods, or those its ``__getattr__`` reaches."""
    infer_params = inspect.signature(session_cls.infer).parameters
    forwarded = forwarded_to(session_cls)
    names = ("set_context", "free_resource", "summary", "infer_pipeline")
    found = {name: hasattr(session_cls, name) or hasattr(forwarded, name) for name in names}
    return {"out_array": "out_array" in infer_params, **found}


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


# Libraries that call aclInit: paddle-custom-npu's plugin in its Init() (when Paddle registers the npu custom
# device), MindSpore; torch_npu only in its lazy init (torch_npu/npu/__init__.py ``_lazy_init``, on the first NPU
# call), so importing it initialises nothing: it counts once ``torch_npu.npu.is_initialized()`` says so.
ACL_INITIALISING_MODULES = ("mindspore", "paddle_custom_device")
# The aclruntime log text Ascend tools' commit a04bd85b (2024-12-09, DeviceManager.cpp InitDevices) added with
# the borrowing of a context; a build without it opens beside another ACL user but cannot free its contexts.
BORROWING_MARKER = b"acl repeat initialize"
ACL_ERROR_COMM_OUT_OF_RANGE = 1009  # what DestroyContext returns before a04bd85b once InitDevices failed


def acl_initialisers() -> List[str]:
    """What in this process has called ``aclInit`` (as far as can be told without pyACL): the modules above,
    torch_npu after its lazy init, Paddle with the ``npu`` custom device registered (paddle-custom-npu)."""
    found = [m for m in ACL_INITIALISING_MODULES if sys.modules.get(m) is not None]
    torch_npu = sys.modules.get("torch_npu")
    if torch_npu is not None:
        try:
            if torch_npu.npu.is_initialized():
                found.append("torch_npu (initialised)")
        except Exception:  # noqa: BLE001 - a torch_npu without is_initialized: its init cannot be told
            pass
    paddle = sys.modules.get("paddle")
    if paddle is not None:
        try:
            if "npu" in paddle.device.get_all_custom_device_type():
                found.append("paddle (custom device npu)")
        except Exception:  # noqa: BLE001 - an older or partial Paddle: no custom devices
            pass
    return found


_BORROWS: Dict[str, Optional[bool]] = {}


def ais_bench_borrows() -> Optional[bool]:
    """Whether the installed aclruntime borrows a context when ACL was initialised first (True: 2024-12 on),
    fails instead (False), or cannot be told (None: no aclruntime file to read)."""
    spec = importlib.util.find_spec("aclruntime")
    origin = getattr(spec, "origin", None) if spec else None
    if not origin or not os.path.isfile(origin):
        return None
    if origin not in _BORROWS:
        _BORROWS[origin] = BORROWING_MARKER in Path(origin).read_bytes()
    return _BORROWS[origin]


def default_context(device_id: int) -> Optional[Any]:
    """The default context of ``device_id``, None without pyACL. pyACL's ``set_device`` makes it current (one per
    device in a process, the same in every thread: CANN ``acl.rt.set_device``); the thread's context is restored.
    The device is not reset afterwards: before CANN 8.0.RC3 ``aclrtResetDevice`` is not documented as reference
    counted and could release what ais_bench uses, while a ``set_device`` left unpaired is released at process exit
    (CANN). Holding that one reference also keeps the default context, so it is read once per device."""
    known = PROCESS.default_contexts
    if device_id in known:
        return known[device_id]
    acl = _acl()
    if acl is None:
        return None
    with keep_acl_context():
        if acl.rt.set_device(device_id) != 0:
            return None
        known[device_id] = context = current_context()
    return context


class _Process:
    """What ais_bench's process-wide state (one aclInit, one context per device to borrow) makes of sessions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.devices: Set[int] = set()
        self.default_contexts: Dict[int, Any] = {}  # read once per device (default_context)
        self.acl_json_path: Optional[str] = None
        self.acl_json_warned = False
        self.unfreed: List[Any] = []  # borrowed sessions, kept from being collected (see AisSession.free_resource)

    def opening(self, device_id: int, acl_json_path: Optional[str]) -> bool:
        """Record a session about to open; True when it is the first on its device (the one that may borrow)."""
        with self.lock:
            if not self.started:
                self.started = True
                self.acl_json_path = acl_json_path
            elif acl_json_path != self.acl_json_path and not self.acl_json_warned:
                self.acl_json_warned = True
                logger.warning(
                    "acl_json_path %r is ignored: ACL is initialised once per process, with the first session's "
                    "acl_json_path (%r); set it on the first model loaded in the process",
                    acl_json_path,
                    self.acl_json_path,
                )
            first = device_id not in self.devices
            self.devices.add(device_id)
            return first


PROCESS = _Process()


def device_lost(exc: BaseException, what: str) -> Optional[DeviceLostError]:
    """A :class:`DeviceLostError` for an opening or context call whose exception text starts with a device-fatal
    ACL code (only those calls carry one: :mod:`.acl_errors`), else None."""
    return fatal_code_lost(acl_code(exc), what, "its code")


class AisSession:
    """ais_bench's ``InferSession`` behind the :class:`~.session.Session` protocol; its features are detected
    once, so the runner never probes the session."""

    def __init__(self, session: Any, context: Optional[Any] = None, borrowed: bool = False, device_id: int = 0) -> None:
        self.raw = session
        self.device_id = device_id
        self.judge = LossJudge(_acl(), device_id)  # a failed call says "[-1]" only: ACL is asked
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
        what = f"ais_bench infer ({mode}) on npu:{self.device_id}"
        return self.judge.run(what, self._infer, feeds, mode=mode, custom_sizes=custom_sizes, out_array=out_array)

    def _infer(self, feeds: list, mode: str, custom_sizes: Union[int, List[int], None], out_array: bool) -> List[Any]:
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
        """Free the session once; a borrowed one is kept, never freed. Either way the ``InferSession`` wrapper is
        detached from its pybind session (``.session = None``), so the 2026 generation's exit hook and ``__del__``
        (Yanguan619/aclruntime @df1f9a44 ``interface.py:173-190, 370-383``) free nothing again."""
        inner = getattr(self.raw, "session", None)  # the aclruntime.InferenceSession (pybind), where there is one
        if self.borrowed:
            logger.warning(
                "not freeing this ais_bench session: ACL was initialised by another library in this process, so the "
                "session borrowed that library's ACL context, and free_resource would destroy it (CANN forbids "
                "destroying contexts not made by aclrtCreateContext). Its device memory is released at process exit"
            )
            PROCESS.unfreed.append(inner if inner is not None else self.raw)  # never collected: never destroyed
            _detach(self.raw)
            return
        if not self.features["free_resource"]:
            return
        with keep_acl_context(skip=self.context):
            free = getattr(inner, "free_resource", None)
            ret = free() if free is not None else self.raw.free_resource()
        _detach(self.raw)
        if isinstance(ret, int) and ret != 0:
            logger.warning(
                "ais_bench free_resource returned %d%s: the session's model is unloaded, its ACL context stays until "
                "the process exits",
                ret,
                " (this aclruntime, older than 2024-12, cannot destroy contexts once another library initialised ACL)"
                if ret == ACL_ERROR_COMM_OUT_OF_RANGE
                else "",
            )


def _detach(raw: Any) -> None:
    """Drop an ``InferSession`` wrapper's pybind session (its exit hook and ``__del__`` skip a None one)."""
    if getattr(raw, "session", None) is not None:
        try:
            raw.session = None
        except AttributeError:  # a session object without that attribute to set: nothing of it frees again
            pass


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
    """Build the session inside the context guard; decide whether it borrowed another library's context."""
    session_cls = load_session_class()
    check_device_id(device_id)
    first = PROCESS.opening(device_id, acl_json_path)
    borrows = ais_bench_borrows()
    if first and borrows is False and acl_initialisers():
        logger.warning(
            "ais_bench session for %s opens beside another ACL user (%s) on an aclruntime older than 2024-12 (Ascend "
            "tools commit a04bd85b): it works, but its ACL context cannot be freed (free_resource returns 1009), so "
            "each session closed leaves one context on npu:%d until the process exits",
            om_path,
            ", ".join(acl_initialisers()),
            device_id,
        )
    before = current_context()
    with keep_acl_context():
        try:
            raw = session_cls(device_id, om_path, acl_json_path=acl_json_path, **options)
        except RuntimeError as exc:  # ais_bench says only "[code][text]"; the detail is on stdout
            raise _open_error(exc, om_path, device_id) from exc
        context = current_context()
    borrowed = borrows is not False and _borrowed(device_id, context, before, first)
    if borrowed:
        logger.warning(
            "ais_bench session for %s borrows the ACL context another library made (ACL was initialised before "
            "paddlex-npu's first session); it will not be freed on close, see paddlex_npu/run/ais.py",
            om_path,
        )
    return AisSession(raw, context, borrowed, device_id)


def _borrowed(device_id: int, context: Optional[Any], before: Optional[Any], first: bool) -> bool:
    """ais_bench borrows ``aclrtGetCurrentContext`` after ``aclrtSetDevice`` (DeviceManager.cpp CreateContext): the
    opening thread's context or the device's default one. With pyACL that is seen directly (so a pyACL user's own
    ``acl.init()`` counts, as it does for ais_bench); without it, a known ACL initialiser on the first session of
    the device stands for it."""
    if context is not None:
        return context == before or context == default_context(device_id)
    return first and bool(acl_initialisers())


def _open_error(exc: RuntimeError, om_path: str, device_id: int) -> Exception:
    lost = device_lost(exc, f"opening {om_path} on device {device_id}")
    if lost is not None:
        return lost
    return NpuDeviceUnavailableError(
        f"ais_bench could not open {om_path} on device {device_id} ({str(exc).strip() or type(exc).__name__}; "
        f"ais_bench's log above says more): {device_hint(device_id)}. With the right device, check that the "
        "OM was built for this chip (`npu-smi info -m`) and that `npu-smi info` shows the chip healthy"
    )
