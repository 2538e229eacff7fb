"""run/ais.py against fake pyACL and ais_bench (no NPU here): contexts, acl_json_path, older ais_bench APIs."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.run import ais
from tests.fake_ascend import FakeAcl, install, session_class


@pytest.fixture()
def warnings(monkeypatch):
    """A fresh process state, and the warnings ais.py logs."""
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    seen = []
    monkeypatch.setattr(ais.logger, "warning", lambda msg, *args: seen.append(msg % args))
    return seen


def test_a_borrowed_context_is_kept_current_and_never_destroyed(monkeypatch, warnings):
    acl = FakeAcl(foreign="torch-ctx")  # another library initialised ACL and made this thread's context
    install(monkeypatch, acl, session_class(acl))
    session = ais.open_session("m.om", 0)
    assert session.borrowed and session.context == "torch-ctx" and acl.current == "torch-ctx"
    assert any("borrows the ACL context" in w for w in warnings)
    session.free_resource()
    assert not session.raw.freed and acl.destroyed == [] and acl.current == "torch-ctx"
    assert any("not freeing this ais_bench session" in w for w in warnings)
    second = ais.open_session("n.om", 0)  # the next session on the device makes its own context
    assert not second.borrowed and second.context == "ais-ctx-1" and acl.current == "torch-ctx"
    second.free_resource()
    assert acl.destroyed == ["ais-ctx-1"] and acl.current == "torch-ctx"


def test_the_session_is_built_inside_the_guard_and_a_destroyed_context_is_never_restored(monkeypatch, warnings):
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    first = ais.open_session("m.om", 0)
    assert not first.borrowed and first.context == "ais-ctx-0"
    acl.current = "user-ctx"  # the user's own context on this thread
    second = ais.open_session("n.om", 0)  # built inside the guard: the user's context is current again after
    assert acl.current == "user-ctx" and second.context == "ais-ctx-1"
    with ais.keep_acl_context():
        first.infer([np.zeros((1, 3, 8, 8), np.float32)], mode="dymshape")
    assert acl.current == "user-ctx"
    acl.current = first.context  # the thread's current context is the session's own (e.g. after a raw call)
    first.free_resource()
    assert acl.destroyed == ["ais-ctx-0"] and "ais-ctx-0" not in acl.set_calls[-1:]


def test_acl_json_path_of_a_later_session_is_warned_about_once(monkeypatch, warnings):
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    ais.open_session("a.om", 0, acl_json_path="dump.json")
    ais.open_session("b.om", 0, acl_json_path="dump.json")
    assert not [w for w in warnings if "acl_json_path" in w]
    ais.open_session("c.om", 0, acl_json_path="other.json")
    ais.open_session("d.om", 0)
    assert len([w for w in warnings if "acl_json_path 'other.json' is ignored" in w]) == 1
    assert len([w for w in warnings if "acl_json_path" in w]) == 1


@pytest.mark.parametrize(
    "mode, shape, setter",
    [("dymbatch", (4, 3, 8, 8), ("set_dynamic_batchsize", 4)), ("dymhw", (1, 3, 16, 32), ("set_dynamic_hw", 16, 32))],
)
def test_older_ais_bench_gets_its_gear_set_before_infer(monkeypatch, warnings, mode, shape, setter):
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl, new_api=False))
    old = ais.open_session("m.om", 0)
    assert old.features["gear_modes"] is False and old.features["out_array"] is False
    old.infer([np.zeros(shape, np.float32)], mode=mode)
    assert old.raw.calls == [setter, ("infer", mode)]
    new = ais.AisSession(session_class(acl)(0, "n.om"))
    assert new.features["gear_modes"] is True
    new.infer([np.zeros(shape, np.float32)], mode=mode)
    assert new.raw.calls == [("infer", mode)]  # newer ais_bench sets the gear inside infer


def test_acl_initialised_by_a_plugin_without_a_current_context_is_still_borrowed(monkeypatch, warnings):
    """ais_bench DeviceManager.cpp CreateContext: after aclInit returned ACL_ERROR_REPEAT_INITIALIZE
    (paddle-custom-npu's plugin calls aclInit in its Init()), the first session on a device takes
    aclrtGetCurrentContext, the device's default context, even when no context was current on the opening thread."""
    import sys
    import types

    acl = FakeAcl(initialised=True)  # no context current on this thread
    install(monkeypatch, acl, session_class(acl))
    paddle = types.ModuleType("paddle")
    paddle.device = types.SimpleNamespace(get_all_custom_device_type=lambda: ["npu"])
    monkeypatch.setitem(sys.modules, "paddle", paddle)
    assert ais.acl_initialisers() == ["paddle (custom device npu)"]
    session = ais.open_session("m.om", 0)
    assert session.borrowed and session.raw.context == "default-ctx-0"
    session.free_resource()
    assert acl.destroyed == []  # the device's default context is not ours to destroy


def test_trim_logs_reaches_the_ais_bench_session_behind_the_wrapper(monkeypatch, warnings):
    """ais_bench interface.py InferSession.reset_summaryinfo -> session.reset_sumaryinfo: the wrapper delegates, so a
    long-running server's per-execution list stays flat."""
    from paddlex_npu.run.session import OpenedSession

    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    session = ais.open_session("m.om", 0)
    for _ in range(3):
        session.infer([np.zeros((1, 3, 8, 8), np.float32)], mode="dymshape")
    assert len(session.raw.exec_time_list) == 3
    OpenedSession("ais_bench", session, ais.keep_acl_context).trim_logs()
    assert session.raw.exec_time_list == []
