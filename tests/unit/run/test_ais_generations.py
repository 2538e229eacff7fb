"""run/ais.py against both ais_bench generations of DeviceManager.cpp (Ascend tools, before and after commit
a04bd85b "fix finalize", 2024-12-09, read in Yanguan619/aclruntime): who borrowed a context, what the older one
says, and ACL's device-fatal codes (CANN aclError list) raised as DeviceLostError."""

from __future__ import annotations

import gc
import sys
import types

import numpy as np
import pytest

from paddlex_npu.errors import DeviceLostError
from paddlex_npu.run import ais
from tests.fake_ascend import FakeAcl, aclruntime_module, install, session_class, session_class_2026

X = [np.zeros((1, 3, 8, 8), np.float32)]


@pytest.fixture()
def warnings(monkeypatch):
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais, "_BORROWS", {}, raising=False)
    seen = []
    monkeypatch.setattr(ais.logger, "warning", lambda msg, *args: seen.append(msg % args))
    return seen


def _aclruntime(monkeypatch, tmp_path, borrows: bool) -> None:
    """An aclruntime extension on sys.path; the newer one carries DeviceManager.cpp's WARN_LOG text."""
    text = 'WARN_LOG("acl repeat initialize");\n' if borrows else 'ERROR_LOG("acl init failed");\n'
    (tmp_path / "aclruntime.py").write_text("# " + text)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("borrows", [True, False])
def test_the_generation_is_read_from_the_aclruntime_extension(monkeypatch, tmp_path, warnings, borrows):
    assert ais.ais_bench_borrows() is None  # no aclruntime here
    _aclruntime(monkeypatch, tmp_path, borrows)
    assert ais.ais_bench_borrows() is borrows


def test_a_pyacl_users_own_acl_init_is_detected_as_ais_bench_detects_it(monkeypatch, warnings):
    """No context current, no known library: only aclInit's "repeat initialize" tells ais_bench, which then borrows
    the device's default context; paddlex-npu sees that context is the default one."""
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    assert acl.init() == 0  # the user's own pyACL init, nothing else
    session = ais.open_session("m.om", 0)
    assert session.borrowed and session.context == "default-ctx-0"
    session.free_resource()
    assert acl.destroyed == [] and acl.device_refs == {0: 1}  # one reference held for the process, never reset
    assert ais.open_session("n.om", 0).context == "ais-ctx-0" and acl.device_refs == {0: 1}  # read once


def test_importing_torch_npu_is_not_initialising_acl(monkeypatch, warnings):
    """torch_npu calls aclInit in its lazy init (first NPU call), not at import."""
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.npu = types.SimpleNamespace(is_initialized=lambda: False)
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    assert ais.acl_initialisers() == []
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    session = ais.open_session("m.om", 0)
    assert not session.borrowed
    session.free_resource()
    assert acl.destroyed == ["ais-ctx-0"]  # freed: no device memory left behind per reload
    torch_npu.npu = types.SimpleNamespace(is_initialized=lambda: True)
    assert ais.acl_initialisers() == ["torch_npu (initialised)"]


def test_without_pyacl_a_known_initialiser_decides(monkeypatch, warnings):
    acl = FakeAcl(initialised=True)
    install(monkeypatch, acl, session_class(acl))
    monkeypatch.setitem(sys.modules, "acl", None)  # no pyACL: contexts cannot be read
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.npu = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    assert ais.open_session("m.om", 0).borrowed
    assert not ais.open_session("n.om", 0).borrowed  # the second session on the device makes its own context


@pytest.mark.parametrize("first", ["pyacl", "paddle"])
def test_the_older_generation_opens_beside_another_acl_user(monkeypatch, tmp_path, warnings, first):
    """Before a04bd85b, InitDevices returns 100002 with its counter at 0 (DeviceManager.cpp@a04bd85b^:54-68) and
    the TensorContext constructor logs it and goes on (TensorContext.cpp@a04bd85b^:27-39): the session opens on a
    context of its own (:209-230) and infers; free_resource returns 1009 (:138-142) and the context stays."""
    _aclruntime(monkeypatch, tmp_path, borrows=False)
    acl = FakeAcl()
    cls = session_class(acl, borrows=False)
    install(monkeypatch, acl, cls)
    if first == "pyacl":
        acl.init()  # a pyACL user initialised ACL first
    else:
        acl.initialised = True
        paddle = types.ModuleType("paddle")
        paddle.device = types.SimpleNamespace(get_all_custom_device_type=lambda: ["npu"])
        monkeypatch.setitem(sys.modules, "paddle", paddle)
    session = ais.open_session("m.om", 0)
    assert cls.ais_init == 100002 and not session.borrowed and session.context == "ais-ctx-0"
    assert session.infer(X, mode="dymshape") == X
    opened = [w for w in warnings if "older than 2024-12" in w]
    assert len(opened) == (first == "paddle")  # without pyACL's answer, a known initialiser names itself
    if opened:
        assert "paddle (custom device npu)" in opened[0] and "its ACL context cannot be freed" in opened[0]
    pybind = session.raw.session
    session.free_resource()
    assert pybind.freed and acl.destroyed == [] and session.raw.session is None
    assert warnings[-1].startswith("ais_bench free_resource returned 1009 (this aclruntime, older than 2024-12")


def test_the_older_generation_opens_and_frees_when_it_initialises_acl_itself(monkeypatch, tmp_path, warnings):
    _aclruntime(monkeypatch, tmp_path, borrows=False)
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl, borrows=False))
    session = ais.open_session("m.om", 0)
    assert not session.borrowed
    session.free_resource()
    assert acl.destroyed == ["ais-ctx-0"]


def _install_2026(monkeypatch, acl):
    """interface.py and aclruntime of Yanguan619/aclruntime df1f9a44 (2026-08-12)."""
    runtime = aclruntime_module(acl)
    install(monkeypatch, acl, session_class_2026(runtime), aclruntime=runtime)
    return runtime


def test_the_2026_generation_frees_resets_and_sets_gears_through_its_getattr(monkeypatch, warnings):
    """Its InferSession forwards free_resource (and the gear setters its infer calls) to the aclruntime session:
    the wrapper still frees it, inside the context guard, and lets its infer set the gears."""
    acl = FakeAcl()
    _install_2026(monkeypatch, acl)
    session = ais.open_session("m.om", 0, acl_json_path="acl.json", debug=True)
    raw = session.raw
    assert (raw.options.acl_json_path, raw.options.log_level, raw.options.loop) == ("acl.json", 1, 1)
    assert session.features == {
        "out_array": True,
        "set_context": True,
        "free_resource": True,
        "summary": True,
        "infer_pipeline": True,
        "gear_modes": True,
    }
    assert not session.borrowed and session.context == "ais-ctx-0"
    session.infer([np.zeros((2, 3, 8, 8), np.float32)], mode="dymbatch")
    session.infer(X, mode="dymhw")
    session.infer(X, mode="dymshape", custom_sizes=[64])
    assert raw.session.calls == [
        ("set_dynamic_batchsize", 2),
        ("run", ["y"]),
        ("set_dynamic_hw", 8, 8),
        ("run", ["y"]),
        ("set_dynamic_shape", "x:1,3,8,8"),
        ("set_custom_outsize", [64]),
        ("run", ["y"]),
    ]
    assert raw.session.exec_time_list == [1.0, 1.0, 1.0]
    session.reset_summaryinfo()
    assert raw.session.exec_time_list == []
    acl.current = "user-ctx"  # the thread's own context, made current again after the free
    pybind = raw.session
    session.free_resource()
    assert pybind.freed and acl.destroyed == ["ais-ctx-0"] and acl.current == "user-ctx"
    assert raw.session is None  # detached: the exit hook and __del__ (interface.py:173-190, 370-383) skip it


def test_the_2026_generation_frees_each_session_once_at_exit_and_collection(monkeypatch, warnings):
    """interface.py@df1f9a44 frees every live session in its atexit hook and again in ``__del__``; a second free
    logs "set context failed" at ERROR (PyInferenceSession.cpp:152-158). A session the route freed (detached) and a
    borrowed one it keeps are freed by neither."""
    acl = FakeAcl()
    runtime = _install_2026(monkeypatch, acl)
    cls = sys.modules["ais_bench.infer.interface"].InferSession
    acl.init()  # another ACL user first: the first session borrows
    borrowed, own = ais.open_session("b.om", 0), ais.open_session("o.om", 0)
    pybinds = [borrowed.raw.session, own.raw.session]
    assert borrowed.borrowed and not own.borrowed
    own.free_resource()
    borrowed.free_resource()
    cls._finalize_acl()  # the exit hook
    del own, borrowed
    gc.collect()
    assert [p.free_calls for p in pybinds] == [0, 1] and runtime.errors == []
    assert acl.destroyed == ["ais-ctx-0"]  # the borrowed default context is never destroyed


def test_the_2026_generation_does_not_free_a_borrowed_context_on_close(monkeypatch, warnings):
    """Neither on close nor when the wrapper is dropped: the 2026 InferSession frees itself in ``__del__``."""
    acl = FakeAcl()
    _install_2026(monkeypatch, acl)
    acl.init()  # another ACL user initialised ACL first: the session borrows the device's default context
    session = ais.open_session("m.om", 0)
    assert session.borrowed and session.context == "default-ctx-0"
    raw = session.raw.session
    session.free_resource()
    assert acl.destroyed == [] and not raw.freed
    del session
    gc.collect()  # its InferSession.__del__ would free it (and destroy the borrowed context): it is kept instead
    assert acl.destroyed == [] and not raw.freed


def test_device_fatal_codes_of_the_2026_generation_raise_device_lost(monkeypatch, warnings):
    """The 2026 rewrite fails as before: "[-1]" (aclruntime/src/ModelInfer/model_process.cpp:1454-1459 @df1f9a44)."""
    acl = FakeAcl()
    runtime = _install_2026(monkeypatch, acl)
    session = ais.open_session("m.om", 0)
    runtime.InferenceSession.fail_with = 507015
    with pytest.raises(DeviceLostError, match=r"get_last_error\) is 507015") as info:
        session.infer(X)
    assert str(info.value.__cause__) == "[-1][ACL: general failure] "


@pytest.mark.parametrize("code, name", [(507015, "ACL_ERROR_RT_AICORE_EXCEPTION"), (507899, "DRV_INTERNAL_ERROR")])
def test_device_fatal_codes_raise_device_lost(monkeypatch, warnings, code, name):
    """The exception says "[-1][ACL: general failure] " (model_process.cpp:1196-1203, ModelInferenceProcessor.cpp:
    630-634, ErrorCode.cpp:98-104 @8da7f645); the code comes from acl.rt.get_last_error on the same thread."""
    acl = FakeAcl()
    cls = session_class(acl)
    install(monkeypatch, acl, cls)
    session = ais.open_session("m.om", 0)
    cls.fail_with = code
    with pytest.raises(DeviceLostError, match=rf"get_last_error\) is {code} \(.*{name}\): the NPU context") as info:
        session.infer(X, mode="dymshape")
    assert info.value.category == "device_lost" and str(info.value.__cause__) == "[-1][ACL: general failure] "
    assert acl.peek_at_last_error(0) == 0  # read with get_last_error, which clears it


@pytest.mark.parametrize("code", [-1, 0, 100000, 145021, 507008, 107002])
def test_ordinary_failures_are_not_device_lost(monkeypatch, warnings, code):
    """Whatever ACL's last error, the text is "[-1]"; a non-fatal one (invalid parameter 100000, GE shape 145021,
    SoC version 507008, no current context 107002: a caller's bug), or none (0: ais_bench's own check failed, and
    the probe on the first good call's shapes passes), is not a lost context."""
    acl = FakeAcl()
    cls = session_class(acl)
    install(monkeypatch, acl, cls)
    session = ais.open_session("m.om", 0)
    session.infer(X, mode="dymshape")
    cls.fail_with, cls.fail_calls = code, 1
    with pytest.raises(RuntimeError) as info:
        session.infer(X, mode="dymshape")
    assert not isinstance(info.value, DeviceLostError)
    assert str(info.value) == "[-1][ACL: general failure] "


def test_a_lost_device_at_open_is_device_lost(monkeypatch, warnings):
    acl = FakeAcl()
    cls = session_class(acl)

    class Lost(cls):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("[507901][Error code unknown] ")

    install(monkeypatch, acl, Lost)
    with pytest.raises(DeviceLostError, match="507901 \\(ACL_ERROR_RT_SOCKET_CLOSE\\)"):
        ais.open_session("m.om", 0)


def test_the_runner_lets_device_lost_through_and_explains_other_failures(monkeypatch, tmp_path, warnings):
    """The OM runner turns a failed call into DeviceCallError (model, shapes, sizes) but must not hide a lost
    context behind it: the worker's supervisor looks for DeviceLostError."""
    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.errors import DeviceCallError
    from paddlex_npu.run.runner import build_om_runner
    from tests.onnx_models import image_model, tiny_package

    tiny_package(tmp_path, image_model)
    (tmp_path / "inference.om").write_bytes(b"om")
    acl = FakeAcl()
    cls = session_class(acl)
    install(monkeypatch, acl, cls)
    runner = build_om_runner(tmp_path, runtime="ais_bench", device_id=0, config=OMBackendConfig(warmup_runs=0))
    try:
        cls.fail_with = 145021  # ACL answers a shape error: not a lost device
        with pytest.raises(DeviceCallError, match=r"session failed \(\[-1\]\[ACL: general failure\]\)"):
            runner(X)
        cls.fail_with = 507015
        with pytest.raises(DeviceLostError, match="507015"):
            runner(X)
    finally:
        runner.close()
