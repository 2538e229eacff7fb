"""Whether a failed device call lost the device: decided from ACL, never from ais_bench's exception text.

A failed ``aclmdlExecute`` reaches Python as ``"[-1][ACL: general failure] "`` in every ais_bench generation
(Yanguan619/aclruntime @8da7f645, ``backend/base/module/ModelInfer/model_process.cpp:1196-1203`` returns FAILED,
``ModelInferenceProcessor.cpp:630-634`` turns it into ``APP_ERR_ACL_FAILURE`` (-1), ``ErrorCode.cpp:98-104`` writes
the text; a failed device malloc says ``[2]``, a failed copy ``[26]``: ``MemoryHelper.cpp:108-120, 200-236``; the
2026 rewrite's ``aclruntime/src/ModelInfer/model_process.cpp`` is the same). The ACL code goes to stdout only
(``aclGetRecentErrMsg``). So after a failed call, :class:`LossJudge` asks ACL on the same thread, in this order:

1. pyACL ``acl.rt.get_last_error(ACL_RT_THREAD_LEVEL)`` (CANN 8.0 on, ``aclrtGetLastError``, ``acl_rt.h:1183``:
   the thread's last runtime error, cleared by the read): a device-fatal code is a lost device, decided at once.
   Any other code decides nothing: the runtime records the last failing ``rt*`` call of the thread, whichever it
   was, until read (hicann/runtime ``src/runtime/api/api_global_err.cc:17-31`` ``GetRtExtErrCodeAndSetGlobalErr``,
   ``api_impl.cc:7724-7738``), and after a real loss it may read 507000, 507001, 507012, 507013, 507047, 507051 or
   507052, none fatal by itself; a zero code (nothing recorded) decides nothing either. Both go on to 2 and 3;
2. pyACL ``acl.rt.query_device_status(device_id)`` -> ``(status, ret)`` (``aclrtQueryDeviceStatus``,
   ``acl_rt.h:3247``): status ``ACL_RT_DEVICE_STATUS_ABNORMAL`` (1) is a lost device (a normal device may still
   hold a dead context, so "normal" goes on to 3);
3. a probe call on the shape of the session's first good call (zeros): if it fails too, the context is lost, if
   it passes, not. A session with no good call yet (its process's very first call, a dymshape model that no
   warm-up ran), when ACL told nothing in 1 (no pyACL, or no code recorded) and the failure came from ais_bench
   (its text carries a code, :func:`acl_code`), probes on zeros of the failed call's own shapes and options: a
   loss on the first call is known at once, and an input that fails for its values alone leaves a passing probe,
   which becomes the good call (an input whose shape fails on zeros too is taken for a loss: its retry on a fresh
   worker fails the same way, bounded by the restart budget). Otherwise (a non-fatal code named, or a Python-side
   error) failures are counted: :data:`CONSECUTIVE_FAILURES` in a row on inputs that passed every check are a
   lost context.

The device-fatal codes are CANN runtime's ``include/external/acl/error_codes/rt_error_codes.h`` (hicann/runtime
@681ef761, lines 20-166), picked by category (:data:`DEVICE_FATAL_BY_CATEGORY`). Not among them: 107002
``ACL_ERROR_RT_CONTEXT_NULL`` (the calling thread has no current context: a caller's bug, not a lost device), the
parameter, shape and resource codes (a bad input or a full device: the next call may pass); read after a failed
call, such a code may be an earlier call's, so the probe or the count still decides.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..errors import DeviceLostError

ACL_RT_THREAD_LEVEL = 0  # aclrtLastErrLevel: only the thread level exists (CANN aclrtGetLastError)
ACL_RT_DEVICE_STATUS_ABNORMAL = 1  # aclrtDeviceStatus: NORMAL = 0, ABNORMAL = 1
CONSECUTIVE_FAILURES = 3  # failures in a row taken for a lost context when ACL cannot be asked and nothing probes

# rt_error_codes.h by category (value: name, as the header defines them). A call that fails with one of these
# leaves its stream, context or device unusable: the process must be replaced.
DEVICE_FATAL_BY_CATEGORY: Dict[str, Dict[int, str]] = {
    "task or stream aborted": {
        107020: "ACL_ERROR_RT_TASK_TIMEOUT",
        107022: "ACL_ERROR_RT_DEVICE_TASK_ABORT",
        107023: "ACL_ERROR_RT_STREAM_ABORT",
    },
    "device or link gone": {
        207004: "ACL_ERROR_RT_NO_DEVICE",
        507010: "ACL_ERROR_RT_LOST_HEARTBEAT",
        507033: "ACL_ERROR_RT_DEV_SETUP_ERROR",
        507056: "ACL_ERROR_RT_LINK_ERROR",
        507057: "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR",
        507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
        507901: "ACL_ERROR_RT_SOCKET_CLOSE",
    },
    "context released": {507007: "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR"},
    "model execution, core exceptions and timeouts": {
        507011: "ACL_ERROR_RT_MODEL_EXECUTE",
        507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
        507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
        507016: "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION",
        507017: "ACL_ERROR_RT_AICPU_TIMEOUT",
        507018: "ACL_ERROR_RT_AICPU_EXCEPTION",
        507034: "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT",
        507035: "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
        507036: "ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION",
        507042: "ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW",
        507043: "ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW",
        507044: "ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW",
        507045: "ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW",
        507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
        507048: "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT",
        507049: "ACL_ERROR_RT_FFTS_PLUS_EXCEPTION",
        507050: "ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION",
        507900: "ACL_ERROR_RT_AICPU_INTERNAL_ERROR",
    },
    "device memory": {
        507053: "ACL_ERROR_RT_DEVICE_MEM_ERROR",
        507054: "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR",
        507055: "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR",
    },
}
DEVICE_FATAL_CODES: Dict[int, str] = {
    code: name for codes in DEVICE_FATAL_BY_CATEGORY.values() for code, name in codes.items()
}
_CODE = re.compile(r"^\s*(?:\[[^\]\d-][^\]]*\])?\[(-?\d+)\]")


def acl_code(exc: BaseException) -> Optional[int]:
    """The code at the start of an ais_bench exception text (``[code][text] ``, or ``[module][code][text] ``:
    ``ErrorCode.cpp`` GetError), or None. Only opening and context calls carry an ACL code there."""
    m = _CODE.match(str(exc))
    return int(m.group(1)) if m else None


def lost_error(what: str, how: str) -> DeviceLostError:
    """The :class:`DeviceLostError` for a call ``what`` that lost the device, ``how`` saying how that is known."""
    return DeviceLostError(
        f"{what} failed and {how}: the NPU context of this process is unusable from now on; the process must be "
        "replaced (a supervised worker is restarted on a fresh context). If it recurs, check `npu-smi info` (chip "
        "health) and the device log (plog) for the failing operator"
    )


def fatal_code_lost(code: Optional[int], what: str, source: str) -> Optional[DeviceLostError]:
    """A :class:`DeviceLostError` when ``code`` (read from ``source``) is device-fatal, else None."""
    if code not in DEVICE_FATAL_CODES:
        return None
    return lost_error(what, f"{source} is {code} ({DEVICE_FATAL_CODES[code]})")


def last_error(acl: Any) -> Optional[int]:
    """pyACL's last runtime error of the calling thread (``acl.rt.get_last_error``, cleared by the read), None
    where this pyACL has no such call (before CANN 8.0) or it raised."""
    get = getattr(getattr(acl, "rt", None), "get_last_error", None)
    if get is None:
        return None
    try:
        return int(get(ACL_RT_THREAD_LEVEL))
    except Exception:  # noqa: BLE001 - a pyACL that cannot answer is one that does not
        return None


def device_status(acl: Any, device_id: int) -> Optional[int]:
    """``acl.rt.query_device_status(device_id)``'s status, None where pyACL has no such call or it failed."""
    query = getattr(getattr(acl, "rt", None), "query_device_status", None)
    if query is None:
        return None
    try:
        status, ret = query(device_id)
    except Exception:  # noqa: BLE001 - as last_error
        return None
    return int(status) if ret == 0 else None


Probe = Tuple[List[Tuple[Tuple[int, ...], np.dtype]], Dict[str, Any]]


def _shapes(feeds: List[np.ndarray], options: Dict[str, Any]) -> Probe:
    """What a probe call needs of a call: its inputs' shapes and dtypes, and its options."""
    return [(tuple(np.shape(f)), np.asarray(f).dtype) for f in feeds], dict(options)


class LossJudge:
    """Decides, after a failed device call of one session, whether the device is lost (see the module's
    docstring). ``acl``: pyACL (or the simulated device's stand-in for it), None without one."""

    def __init__(self, acl: Any, device_id: int, consecutive: int = CONSECUTIVE_FAILURES) -> None:
        self.acl, self.device_id, self.consecutive = acl, device_id, consecutive
        self.failures = 0  # failed calls in a row
        self.probe: Optional[Probe] = None  # the shapes, dtypes and call options of the first good call

    def succeeded(self, feeds: List[np.ndarray], options: Dict[str, Any]) -> None:
        self.failures = 0
        if self.probe is None:
            self.probe = _shapes(feeds, options)

    def judge(self, what: str, call: Callable[..., Any], failed: Optional[Probe] = None) -> Optional[DeviceLostError]:
        """The :class:`DeviceLostError` for a failed call ``what``, or None when the device is not lost. ``call``
        runs a probe (``call(feeds, **options)``) when ACL cannot be asked; ``failed``: the failed call's shapes
        and options, probed when the session has had no good call (None: count instead)."""
        self.failures += 1
        code = last_error(self.acl)
        fatal = fatal_code_lost(code, what, "ACL's last error on this thread (acl.rt.get_last_error)")
        if fatal is not None:
            return fatal
        # any other code (an earlier call's, or one a loss leaves behind: correction 38) and zero go on
        said = f"; ACL's last error on this thread was {code}" if code else ""
        if device_status(self.acl, self.device_id) == ACL_RT_DEVICE_STATUS_ABNORMAL:
            return lost_error(what, f"acl.rt.query_device_status says device {self.device_id} is abnormal{said}")
        probe, whose = self.probe, "the first good call"
        if probe is None and failed is not None and not code:  # ACL told nothing (no pyACL, or no code recorded)
            probe, whose = failed, "the failed call (this session has had no good call)"
        if probe is not None:
            shapes, options = probe
            try:
                call([np.zeros(shape, dtype) for shape, dtype in shapes], **options)
            except RuntimeError as exc:
                return lost_error(what, f"a probe call on the shapes of {whose} failed too ({exc}){said}")
            self.failures = 0
            self.probe = probe  # a passing probe is a good call
            return None
        if self.failures >= self.consecutive:
            return lost_error(what, f"{self.failures} calls in a row failed on inputs that passed every check{said}")
        return None

    def run(self, what: str, call: Callable[..., Any], feeds: List[np.ndarray], **options: Any) -> Any:
        """``call(feeds, **options)``, a failure judged: :class:`DeviceLostError` when the device is lost, the
        call's own error otherwise."""
        try:
            outputs = call(feeds, **options)
        except RuntimeError as exc:
            failed = _shapes(feeds, options) if acl_code(exc) is not None else None  # an ais_bench failure
            lost = self.judge(what, call, failed)
            if lost is not None:
                raise lost from exc
            raise
        self.succeeded(feeds, options)
        return outputs


class JudgedSession:
    """A session whose failed ``infer`` is judged by a :class:`LossJudge` (the simulated device's: it fails as
    ais_bench does and answers pyACL's queries); everything else is the session's own."""

    def __init__(self, session: Any, judge: LossJudge) -> None:
        self.raw, self.judge = session, judge

    def infer(self, feeds: list, mode: str = "static", custom_sizes: Any = 100000, out_array: bool = True) -> Any:
        what = f"infer ({mode}) on npu:{self.judge.device_id}"
        return self.judge.run(what, self.raw.infer, feeds, mode=mode, custom_sizes=custom_sizes, out_array=out_array)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
