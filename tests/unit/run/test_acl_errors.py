"""run/acl_errors.py: the device-fatal codes against CANN's header, and how a failed call is judged when it says
only "[-1][ACL: general failure] " (every ais_bench generation: Yanguan619/aclruntime @8da7f645
``backend/base/module/ModelInfer/model_process.cpp:1196-1203``, ``ModelInferenceProcessor.cpp:630-634``,
``ErrorCode.cpp:98-104``)."""

from __future__ import annotations

import threading
from typing import Any, List

import numpy as np
import pytest

from paddlex_npu.errors import DeviceLostError
from paddlex_npu.run import acl_errors
from paddlex_npu.run.acl_errors import DEVICE_FATAL_BY_CATEGORY, DEVICE_FATAL_CODES, JudgedSession, LossJudge
from tests.fake_ascend import ACL_GENERAL_FAILURE, FakeAcl

# (line, name, value) of CANN runtime's include/external/acl/error_codes/rt_error_codes.h, hicann/runtime @681ef761
HEADER_FATAL = [
    (41, "ACL_ERROR_RT_TASK_TIMEOUT", 107020),
    (43, "ACL_ERROR_RT_DEVICE_TASK_ABORT", 107022),
    (44, "ACL_ERROR_RT_STREAM_ABORT", 107023),
    (73, "ACL_ERROR_RT_NO_DEVICE", 207004),
    (99, "ACL_ERROR_RT_CONTEXT_RELEASE_ERROR", 507007),
    (102, "ACL_ERROR_RT_LOST_HEARTBEAT", 507010),
    (103, "ACL_ERROR_RT_MODEL_EXECUTE", 507011),
    (106, "ACL_ERROR_RT_AICORE_TIMEOUT", 507014),
    (107, "ACL_ERROR_RT_AICORE_EXCEPTION", 507015),
    (108, "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION", 507016),
    (109, "ACL_ERROR_RT_AICPU_TIMEOUT", 507017),
    (110, "ACL_ERROR_RT_AICPU_EXCEPTION", 507018),
    (125, "ACL_ERROR_RT_DEV_SETUP_ERROR", 507033),
    (126, "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT", 507034),
    (127, "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION", 507035),
    (128, "ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION", 507036),
    (134, "ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW", 507042),
    (135, "ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW", 507043),
    (136, "ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW", 507044),
    (137, "ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW", 507045),
    (138, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", 507046),
    (140, "ACL_ERROR_RT_FFTS_PLUS_TIMEOUT", 507048),
    (141, "ACL_ERROR_RT_FFTS_PLUS_EXCEPTION", 507049),
    (142, "ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION", 507050),
    (145, "ACL_ERROR_RT_DEVICE_MEM_ERROR", 507053),
    (146, "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR", 507054),
    (147, "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR", 507055),
    (148, "ACL_ERROR_RT_LINK_ERROR", 507056),
    (149, "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", 507057),
    (150, "ACL_ERROR_RT_DRV_INTERNAL_ERROR", 507899),
    (151, "ACL_ERROR_RT_AICPU_INTERNAL_ERROR", 507900),
    (152, "ACL_ERROR_RT_SOCKET_CLOSE", 507901),
]
# not fatal: rt_error_codes.h:23 (no current context: the caller's thread has none), :22 (invalid device id),
# :47 ... the parameter and capture codes, :64 feature not support, :88 device OOM, :100 SoC version
HEADER_NOT_FATAL = [107002, 107001, 107000, 207000, 207001, 207018, 507008, 507047]


def test_the_fatal_codes_are_the_headers_by_category() -> None:
    assert DEVICE_FATAL_CODES == {value: name for _, name, value in HEADER_FATAL}
    flat = [code for codes in DEVICE_FATAL_BY_CATEGORY.values() for code in codes]
    assert len(flat) == len(set(flat)) == len(HEADER_FATAL)  # each code in one category
    assert not set(HEADER_NOT_FATAL) & set(DEVICE_FATAL_CODES)


class Device:
    """A device call that fails as ais_bench's does: "[-1]" in the text, the code through ``acl`` only."""

    def __init__(self, acl: FakeAcl, fail: int = 0, device_id: int = 0) -> None:
        self.acl, self.fail, self.device_id, self.calls = acl, fail, device_id, []  # fail: how many calls fail
        self.code = 507015

    def infer(self, feeds: List[np.ndarray], **options: Any) -> List[np.ndarray]:
        self.calls.append([f.shape for f in feeds])
        if self.fail:
            self.fail -= 1
            raise self.acl.fail(self.code, self.device_id if self.code in DEVICE_FATAL_CODES else None)
        return feeds


X = [np.ones((1, 3, 8, 8), np.float32)]


def test_acl_last_error_decides_on_the_failing_thread() -> None:
    acl = FakeAcl()
    session = JudgedSession(Device(acl, fail=1), LossJudge(acl, 0))
    with pytest.raises(DeviceLostError, match=r"get_last_error\) is 507015 \(ACL_ERROR_RT_AICORE_EXCEPTION\)"):
        session.infer(X)
    acl.fail(507015)  # pyACL's last error is the calling thread's: another thread sees none
    other: List[int] = []
    thread = threading.Thread(target=lambda: other.append(acl.peek_at_last_error(0)))
    thread.start()
    thread.join()
    assert other == [0] and acl.peek_at_last_error(0) == 507015


# What each class of get_last_error code decides. hicann/runtime src/runtime/api/api_global_err.cc:17-31
# (GetRtExtErrCodeAndSetGlobalErr: every failing rt* call of the thread sets the code) and api_impl.cc:7724-7738
# (aclrtGetLastError reads and clears it): the code read after a failed call is the thread's last failing call,
# whichever it was (correction 38 of ../shared/reference/ais-bench-api.md). Fatal list: rt_error_codes.h, correction 26.
# After a real loss the code may be one of these, none fatal by itself (correction 38); 107002: no current context.
NOT_FATAL_AFTER_LOSS = [507000, 507001, 507012, 507013, 507047, 507051, 507052, 107002]


@pytest.mark.parametrize("code", [107020, 207004, 507007, 507011, 507053])  # one per category
def test_a_fatal_code_decides_at_once_without_a_probe(code: int) -> None:
    acl = FakeAcl()
    device = Device(acl)
    session = JudgedSession(device, LossJudge(acl, 0))
    session.infer(X)  # a good call: a probe would be possible
    device.fail, device.code = 1, code
    acl.abnormal.clear()
    with pytest.raises(DeviceLostError, match=rf"get_last_error\) is {code} \({DEVICE_FATAL_CODES[code]}\)"):
        session.infer(X)
    assert len(device.calls) == 2  # the good call and the failed one: no probe


@pytest.mark.parametrize("code", NOT_FATAL_AFTER_LOSS)
def test_a_non_fatal_code_still_probes(code: int) -> None:
    acl = FakeAcl()
    device = Device(acl)
    device.code = code
    session = JudgedSession(device, LossJudge(acl, 0))
    session.infer(X)
    big = [np.ones((1, 3, 64, 64), np.float32)]
    device.fail = 1  # the call fails, the probe passes: not lost
    with pytest.raises(RuntimeError) as info:
        session.infer(big)
    assert str(info.value) == ACL_GENERAL_FAILURE and not isinstance(info.value, DeviceLostError)
    assert device.calls[-1] == [(1, 3, 8, 8)]  # the probe ran on the first good call's shapes
    device.fail = 2  # the call and the probe fail: lost, whatever the code said
    with pytest.raises(DeviceLostError, match=rf"probe call .* failed too .*last error on this thread was {code}"):
        session.infer(big)


@pytest.mark.parametrize("code", NOT_FATAL_AFTER_LOSS)
def test_a_non_fatal_code_on_a_first_call_still_counts(code: int) -> None:
    """No good call yet and ACL names a non-fatal code (a shape or parameter error says as much): no probe on the
    failed call's shapes (it would fail the same way on zeros); the count decides."""
    acl = FakeAcl()
    device = Device(acl, fail=10)
    device.code = code
    session = JudgedSession(device, LossJudge(acl, 0))
    for _ in range(acl_errors.CONSECUTIVE_FAILURES - 1):
        with pytest.raises(RuntimeError) as info:
            session.infer(X)
        assert not isinstance(info.value, DeviceLostError)
    with pytest.raises(DeviceLostError, match=rf"3 calls in a row failed .*was {code}"):
        session.infer(X)
    assert len(device.calls) == 3  # no probe


def test_a_zero_code_on_a_first_call_probes_its_own_shapes() -> None:
    """No good call yet and nothing recorded on the thread: the failed call's shapes are probed (zeros), once."""
    acl = FakeAcl()
    device = Device(acl, fail=10)
    device.code = 0
    with pytest.raises(DeviceLostError, match=r"shapes of the failed call \(this session has had no good call\)"):
        JudgedSession(device, LossJudge(acl, 0)).infer(X, mode="dymshape")
    assert device.calls == [[(1, 3, 8, 8)], [(1, 3, 8, 8)]]  # the call and one probe: no second input lost


class Codeless(Device):
    """A call that fails on the Python side (a ``RuntimeError`` without ais_bench's ``[code]``)."""

    def infer(self, feeds: List[np.ndarray], **options: Any) -> List[np.ndarray]:
        self.calls.append([f.shape for f in feeds])
        if self.fail:
            self.fail -= 1
            raise RuntimeError("not a dymbatch model!")
        return feeds


def test_a_python_side_failure_is_counted_not_probed() -> None:
    device = Codeless(FakeAcl(), fail=10)
    judge = LossJudge(None, 0)
    for _ in range(acl_errors.CONSECUTIVE_FAILURES - 1):
        with pytest.raises(RuntimeError, match="not a dymbatch model"):
            judge.run("x", device.infer, X, mode="dymbatch")
    with pytest.raises(DeviceLostError, match=r"3 calls in a row failed"):
        judge.run("x", device.infer, X, mode="dymbatch")
    assert len(device.calls) == 3  # no probe on a Python-side failure


@pytest.mark.parametrize("code", NOT_FATAL_AFTER_LOSS)
def test_a_non_fatal_code_still_asks_the_device_status(code: int) -> None:
    acl = FakeAcl()
    device = Device(acl, fail=1, device_id=1)
    device.code = code
    acl.abnormal.add(1)
    with pytest.raises(DeviceLostError, match=rf"device 1 is abnormal; ACL's last error on this thread was {code}"):
        JudgedSession(device, LossJudge(acl, 1)).infer(X)


def test_a_zero_code_goes_on_to_the_probe() -> None:
    acl = FakeAcl()  # get_last_error answers 0: nothing recorded on this thread
    device = Device(acl)
    session = JudgedSession(device, LossJudge(acl, 0))
    session.infer(X)
    device.fail, device.code = 2, 0
    with pytest.raises(DeviceLostError, match=r"failed too \(\[-1\]\[ACL: general failure\] \): ") as info:
        session.infer(X)
    assert "last error" not in str(info.value) and acl.peek_at_last_error(0) == 0


def test_without_pyacl_a_first_call_loss_is_known_at_once() -> None:
    """Issue 54 item 3: no pyACL, the process's very first call meets a lost device: a probe on zeros of that
    call's shapes fails too, so the first failure is the loss (before: three inputs failed first)."""
    device = Device(FakeAcl(), fail=10)
    device.code = 0
    judge = LossJudge(None, 0)  # no pyACL in this process
    with pytest.raises(DeviceLostError, match=r"probe call on the shapes of the failed call .* failed too") as info:
        judge.run("x", device.infer, X, mode="dymshape")
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == ACL_GENERAL_FAILURE
    assert len(device.calls) == 2 and judge.probe is None


def test_without_pyacl_a_first_call_that_fails_for_its_values_is_not_a_loss() -> None:
    """The first call fails, the probe on zeros of its shapes passes: the input's own failure, and the probe is
    the session's good call from then on (a later loss is probed on it)."""
    device = Device(FakeAcl(), fail=1)
    judge = LossJudge(None, 0)
    with pytest.raises(RuntimeError) as info:
        judge.run("x", device.infer, X, mode="dymshape")
    assert str(info.value) == ACL_GENERAL_FAILURE and not isinstance(info.value, DeviceLostError)
    assert judge.probe == ([((1, 3, 8, 8), np.dtype(np.float32))], {"mode": "dymshape"}) and judge.failures == 0
    big = [np.ones((1, 3, 64, 64), np.float32)]
    device.fail = 2
    with pytest.raises(DeviceLostError, match=r"probe call on the shapes of the first good call failed too"):
        judge.run("x", device.infer, big, mode="dymshape")
    assert device.calls[-1] == [(1, 3, 8, 8)]


def test_without_pyacl_the_probe_or_the_count_decides() -> None:
    device = Codeless(FakeAcl(), fail=10)
    judge = LossJudge(None, 0)  # no pyACL in this process, failures without a code: counted
    for _ in range(acl_errors.CONSECUTIVE_FAILURES - 1):
        with pytest.raises(RuntimeError) as info:
            judge.run("x", device.infer, X)
        assert not isinstance(info.value, DeviceLostError)
    with pytest.raises(DeviceLostError, match=r"3 calls in a row"):
        judge.run("x", device.infer, X)
    device.fail = 0
    judge.run("x", device.infer, X)
    device.fail = 2
    with pytest.raises(DeviceLostError, match=r"probe call on the shapes of the first good call failed too"):
        judge.run("x", device.infer, X)


def test_without_last_error_the_device_status_decides() -> None:
    acl = FakeAcl(last_error=False)
    session = JudgedSession(Device(acl, fail=1, device_id=2), LossJudge(acl, 2))
    with pytest.raises(DeviceLostError, match="query_device_status says device 2 is abnormal"):
        session.infer(X)


def test_without_either_query_a_probe_on_the_first_good_shapes_decides() -> None:
    acl = FakeAcl(last_error=False, device_status=False)
    device = Device(acl)
    session = JudgedSession(device, LossJudge(acl, 0))
    session.infer(X, mode="dymshape")
    big = [np.ones((1, 3, 64, 64), np.float32)]
    device.fail = 1  # this input fails, the probe passes: not lost
    with pytest.raises(RuntimeError) as info:
        session.infer(big, mode="dymshape")
    assert not isinstance(info.value, DeviceLostError) and device.calls[-1] == [(1, 3, 8, 8)]
    device.fail = 2  # this input and the probe fail: lost
    with pytest.raises(DeviceLostError, match="a probe call on the shapes of the first good call failed too"):
        session.infer(big, mode="dymshape")


def test_without_queries_or_a_good_call_failures_in_a_row_decide() -> None:
    acl = FakeAcl(last_error=False, device_status=False)
    session = JudgedSession(Codeless(acl, fail=10), LossJudge(acl, 0))
    for _ in range(acl_errors.CONSECUTIVE_FAILURES - 1):
        with pytest.raises(RuntimeError) as info:
            session.infer(X)
        assert not isinstance(info.value, DeviceLostError)
    with pytest.raises(DeviceLostError, match=r"3 calls in a row failed on inputs that passed every check"):
        session.infer(X)


def test_without_queries_a_first_call_loss_is_known_at_once() -> None:
    acl = FakeAcl(last_error=False, device_status=False)
    device = Device(acl, fail=10)
    with pytest.raises(DeviceLostError, match=r"the failed call \(this session has had no good call\) failed too"):
        JudgedSession(device, LossJudge(acl, 0)).infer(X)
    assert len(device.calls) == 2


def test_a_good_call_resets_the_count() -> None:
    acl = FakeAcl(last_error=False, device_status=False)
    device = Codeless(acl, fail=2)
    judge = LossJudge(acl, 0)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            judge.run("x", device.infer, X)
    judge.probe = None
    judge.run("x", device.infer, X)
    assert judge.failures == 0
