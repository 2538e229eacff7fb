"""run/ais.py's wrapper of ais_bench's ``InferSession`` (no NPU here): what it detects of each upstream API
generation (``interface.py`` of Ascend tools, read in Yanguan619/aclruntime: 2023-01, 2024-02, 2024-05, 2026-08),
what it passes through, how it loads the class, and what its errors say."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

from paddlex_npu.errors import DeviceLostError, NpuDeviceUnavailableError, RuntimeUnavailableError
from paddlex_npu.run import ais
from paddlex_npu.run.device_ids import device_hint
from tests.fake_ascend import FakeAcl, aclruntime_module, install, session_class, session_class_2026

X = [np.zeros((1, 3, 8, 8), np.float32)]


@pytest.fixture()
def warnings(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """A fresh process state, and the warnings ais.py logs."""
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais, "_BORROWS", {})
    seen: List[str] = []
    monkeypatch.setattr(ais.logger, "warning", lambda msg, *args: seen.append(msg % args))
    return seen


# ---- the API surface of each generation (method names and infer's signature; bodies are not what is read) ------
class Jan2023Surface:
    """interface.py of 2023-01: ``infer(feeds, mode, custom_sizes)``, ``sumary``, ``reset_sumaryinfo``."""

    def infer(self, feeds, mode="static", custom_sizes=100000): ...

    def sumary(self): ...

    def reset_sumaryinfo(self): ...


class Feb2024Surface:
    """interface.py of 2024-02: ``out_array``, ``free_resource``, ``summary``, ``infer_pipeline``; no
    ``set_context`` yet (2024-03)."""

    def infer(self, feeds, mode="static", custom_sizes=100000, out_array=True): ...

    def free_resource(self): ...

    def summary(self): ...

    def infer_pipeline(self, feeds_list, mode="static", custom_sizes=100000): ...

    def reset_summaryinfo(self): ...


class May2024Surface(Feb2024Surface):
    def set_context(self): ...


def test_features_tell_the_generations_apart() -> None:
    """What `paddlex-npu doctor` reports and the wrapper decides by."""
    assert ais.features(Jan2023Surface) == dict.fromkeys(
        ("out_array", "set_context", "free_resource", "summary", "infer_pipeline"), False
    )
    assert ais.features(Feb2024Surface) == {
        "out_array": True,
        "set_context": False,
        "free_resource": True,
        "summary": True,
        "infer_pipeline": True,
    }
    assert ais.features(May2024Surface) == dict.fromkeys(
        ("out_array", "set_context", "free_resource", "summary", "infer_pipeline"), True
    )


def test_features_of_2026_are_read_on_the_aclruntime_class_its_getattr_forwards_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """interface.py of 2026-08 (df1f9a44) has no ``free_resource``/``set_context`` of its own: its ``__getattr__``
    reaches them on ``self.session``, an ``aclruntime.InferenceSession`` of the ``aclruntime`` it imported."""
    acl = FakeAcl()
    runtime = aclruntime_module(acl)
    cls = session_class_2026(runtime)
    assert not hasattr(cls, "free_resource") and not hasattr(cls, "set_context")
    all_true = dict.fromkeys(("out_array", "set_context", "free_resource", "summary", "infer_pipeline"), True)
    install(monkeypatch, acl, cls, aclruntime=runtime)
    assert ais.forwarded_to(cls) is runtime.InferenceSession
    assert ais.features(cls) == all_true
    install(monkeypatch, acl, cls)  # a module without aclruntime (none here): nothing reached through __getattr__
    assert not hasattr(sys.modules["ais_bench.infer.interface"], "aclruntime")
    assert ais.forwarded_to(cls) is None
    assert ais.features(cls) == {**all_true, "set_context": False, "free_resource": False}
    # a class without __getattr__ has only its own methods, whatever its module's aclruntime has
    monkeypatch.setattr(Feb2024Surface, "__module__", "ais_bench.infer.interface")
    install(monkeypatch, acl, Feb2024Surface, aclruntime=runtime)
    assert ais.forwarded_to(Feb2024Surface) is None
    assert ais.features(Feb2024Surface)["set_context"] is False


def test_the_2023_session_keeps_only_what_upstream_keeps() -> None:
    """interface.py of 2023-01 keeps device_id, model_path and loop; acl_json_path and debug from 2024-02 on."""
    acl = FakeAcl()
    old = session_class(acl, new_api=False)(0, "m.om", "acl.json", True)
    assert (old.device_id, old.model_path, old.loop) == (0, "m.om", 1)
    assert not hasattr(old, "acl_json_path") and not hasattr(old, "debug")
    new = session_class(acl)(0, "m.om", "acl.json", True, 2)
    assert (new.acl_json_path, new.debug, new.loop) == ("acl.json", True, 2)


def test_gear_modes_are_read_from_the_switch_table_else_from_infers_source() -> None:
    """``infer_mode_switch`` (a dict set in ``__init__`` from 2023-09): its dymbatch and dymhw entries; without the
    table, the words of ``infer``'s source; without a source (a compiled install), the gear is set by the wrapper."""

    def session(infer: Any, **attrs: Any) -> Any:
        return type("S", (), {"infer": infer, **attrs})()

    both = {"static": None, "dymbatch": None, "dymhw": None}
    assert ais._infers_gear_modes(session(lambda self: None, infer_mode_switch=both)) is True
    assert ais._infers_gear_modes(session(lambda self: None, infer_mode_switch={"dymbatch": None})) is False
    assert ais._infers_gear_modes(session(lambda self: None, infer_mode_switch={"dymhw": None})) is False

    def by_table(self, feeds, mode="static"):
        return self.infer_mode_switch.get(mode)

    def by_prepare(self, feeds, mode="static"):
        return self._dymbatch_prepare(feeds)

    def plain(self, feeds, mode="static"):
        return feeds

    assert ais._infers_gear_modes(session(by_table)) is True
    assert ais._infers_gear_modes(session(by_prepare)) is True
    assert ais._infers_gear_modes(session(plain)) is False
    namespace: Dict[str, Any] = {}
    exec("def compiled(self, feeds, mode='static'):\n    return self.infer_mode_switch\n", namespace)  # no source
    assert ais._infers_gear_modes(session(namespace["compiled"])) is False


def test_reset_summaryinfo_reaches_either_name() -> None:
    """``reset_summaryinfo`` (2023-09 on), else the 2023-01 wrapper's ``reset_sumaryinfo``; neither: nothing."""
    acl = FakeAcl()
    for new_api in (True, False):
        raw = session_class(acl, new_api=new_api)(0, "m.om")
        raw.exec_time_list.extend([1.0, 2.0])
        ais.AisSession(raw).reset_summaryinfo()
        assert raw.exec_time_list == [], new_api
    ais.AisSession(type("Bare", (), {"infer": Jan2023Surface.infer})()).reset_summaryinfo()


def test_reset_memory_summary_clears_ais_bench_copy_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """interface.py ``MemorySummary.reset`` (a staticmethod: ``aclruntime.MemorySummary().reset()``)."""
    times: List[float] = [0.5, 0.25]

    class MemorySummary:
        @staticmethod
        def reset() -> None:
            times.clear()

    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    sys.modules["ais_bench.infer.interface"].MemorySummary = MemorySummary  # type: ignore[attr-defined]
    assert ais.reset_memory_summary() is None and times == []
    del MemorySummary.reset  # an ais_bench without it: nothing to clear
    times.append(1.0)
    ais.reset_memory_summary()
    assert times == [1.0]
    del sys.modules["ais_bench.infer.interface"].MemorySummary  # and one without MemorySummary at all
    ais.reset_memory_summary()


# ---- load_session_class: which ais_bench is installed ------------------------------------------------------------
@pytest.fixture()
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A folder on sys.path for packages named ais_bench; what they import is dropped afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "ais_bench" or m.startswith("ais_bench.")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    for name in [m for m in sys.modules if m == "ais_bench" or m.startswith("ais_bench.")]:
        del sys.modules[name]


def test_no_ais_bench_says_to_install_it_or_use_the_reference(site: Path) -> None:
    with pytest.raises(RuntimeUnavailableError, match=r"ais_bench is not importable \(No module named 'ais_bench'\)"):
        ais.load_session_class()


def test_the_aisbench_benchmark_tool_shadowing_ais_bench_is_named(site: Path) -> None:
    """ais_bench_benchmark installs a top-level ``ais_bench`` with ``benchmark`` and no ``infer.interface``."""
    (site / "ais_bench" / "benchmark").mkdir(parents=True)
    (site / "ais_bench" / "__init__.py").write_text("")
    (site / "ais_bench" / "benchmark" / "__init__.py").write_text("")
    with pytest.raises(RuntimeUnavailableError, match=r"`pip uninstall ais_bench_benchmark`"):
        ais.load_session_class()


def test_a_broken_ais_bench_is_not_called_the_benchmark_tool(site: Path) -> None:
    (site / "ais_bench" / "infer").mkdir(parents=True)
    (site / "ais_bench" / "__init__.py").write_text("")
    (site / "ais_bench" / "infer" / "__init__.py").write_text("")
    (site / "ais_bench" / "infer" / "interface.py").write_text("import aclruntime\n")  # the wheel is missing
    with pytest.raises(RuntimeUnavailableError) as info:
        ais.load_session_class()
    assert "No module named 'aclruntime'" in str(info.value) and "ais_bench_benchmark" not in str(info.value)


def test_an_installed_ais_bench_is_loaded_and_its_root_logging_undone(site: Path) -> None:
    """ais_bench's modules call ``logging.basicConfig(stream=sys.stdout, level=INFO)`` when imported."""
    import logging

    (site / "ais_bench" / "infer").mkdir(parents=True)
    (site / "ais_bench" / "__init__.py").write_text("")
    (site / "ais_bench" / "infer" / "__init__.py").write_text("")
    (site / "ais_bench" / "infer" / "interface.py").write_text(
        "import logging, sys\nlogging.basicConfig(stream=sys.stdout, level=logging.INFO)\n"
        "class InferSession:\n    pass\n"
    )
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    cls = ais.load_session_class()
    assert cls.__name__ == "InferSession" and cls.__module__ == "ais_bench.infer.interface"
    assert root.handlers == handlers and root.level == level


# ---- what AisSession passes to ais_bench ---------------------------------------------------------------------------
def test_infer_passes_mode_sizes_and_out_array_through(monkeypatch: pytest.MonkeyPatch) -> None:
    acl = FakeAcl()
    new = ais.AisSession(session_class(acl)(0, "m.om"))
    new.infer(X)
    assert new.raw.infer_kwargs == {"mode": "static", "custom_sizes": 100000, "out_array": True}  # upstream's defaults
    new.infer(X, mode="dymshape", custom_sizes=[4096, 64], out_array=False)
    assert new.raw.infer_kwargs == {"mode": "dymshape", "custom_sizes": [4096, 64], "out_array": False}
    old = ais.AisSession(session_class(acl, new_api=False)(0, "n.om"))  # 2023-01: no out_array parameter
    old.infer(X, mode="dymshape", custom_sizes=[128])
    assert old.raw.infer_kwargs == {"mode": "dymshape", "custom_sizes": [128]}
    new.set_custom_outsize([10, 20])
    assert new.raw.calls[-1] == ("set_custom_outsize", [10, 20])
    assert [d.name for d in new.get_inputs()] == ["x"] and [d.name for d in new.get_outputs()] == ["y"]


def test_no_current_context_is_none_and_nothing_is_restored() -> None:
    """pyACL gives a null context (0) with ACL_ERROR_RT_CONTEXT_NULL when the thread has none: not a context."""
    acl = FakeAcl()
    assert acl.rt.get_context() == (0, 107002)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "acl", acl)
        assert ais.current_context() is None
        with ais.keep_acl_context():
            acl.current = "ais-ctx-0"  # a call made its context current
        assert acl.set_calls == []  # nothing to go back to
        assert ais.current_context() == "ais-ctx-0"


def test_a_session_wrapped_directly_is_its_own_and_is_freed() -> None:
    acl = FakeAcl()
    session = ais.AisSession(session_class(acl)(0, "m.om"))
    assert session.borrowed is False and session.context is None
    session.free_resource()
    assert session.raw.freed


def test_older_ais_bench_gets_dymhw_from_the_first_rank_4_input_with_both_dims_dynamic() -> None:
    """As ais_bench's ``_dymhw_prepare``: the first input whose H and W (dims 2, 3) are both dynamic; rank 4 only."""
    acl = FakeAcl()
    descs = [[1, 3, -1, -1, 2], [1, 3, 32, -1], [1, 1, -1, 32], [1, 3, 0, -1], [1, 3, -1, 0], [1, 4], [1, 3, -1, -1]]

    class Old(session_class(acl, new_api=False)):  # type: ignore[misc,valid-type]
        def get_inputs(self):
            return [types.SimpleNamespace(name=f"in{i}", shape=s) for i, s in enumerate(descs)]

    session = ais.AisSession(Old(0, "m.om"))
    feeds = [np.zeros([abs(d) for d in s], np.float32) for s in descs[:-1]] + [np.zeros((1, 3, 48, 96), np.float32)]
    session.infer(feeds, mode="dymhw")
    assert session.raw.calls == [("set_dynamic_hw", 48, 96), ("infer", "dymhw")]
    descs[-1] = [1, 3, 48, 96]
    with pytest.raises(RuntimeError, match="not a dymhw model"):
        session.infer(feeds, mode="dymhw")


# ---- open_session: what reaches ais_bench, per device -----------------------------------------------------------
def test_open_session_passes_the_model_and_options(monkeypatch: pytest.MonkeyPatch, warnings: List[str]) -> None:
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    session = ais.open_session("/models/det.om", 1, acl_json_path="/tmp/acl.json", debug=True)
    raw = session.raw
    assert (raw.device_id, raw.model_path, raw.acl_json_path, raw.debug) == (1, "/models/det.om", "/tmp/acl.json", True)


def test_each_devices_first_session_may_borrow(monkeypatch: pytest.MonkeyPatch, warnings: List[str]) -> None:
    """Without pyACL a known initialiser decides, for the first session of each device (DeviceManager.cpp borrows
    per device)."""
    acl = FakeAcl(initialised=True)
    install(monkeypatch, acl, session_class(acl))
    monkeypatch.setitem(sys.modules, "acl", None)
    monkeypatch.setitem(sys.modules, "mindspore", types.ModuleType("mindspore"))
    assert ais.acl_initialisers() == ["mindspore"]
    assert [ais.open_session("m.om", d).borrowed for d in (0, 1, 0, 1)] == [True, True, False, False]


def test_the_newer_generation_read_from_aclruntime_still_borrows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, warnings: List[str]
) -> None:
    (tmp_path / "aclruntime.py").write_text('# WARN_LOG("acl repeat initialize");\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ais.ais_bench_borrows() is True
    acl = FakeAcl(foreign="torch-ctx")
    install(monkeypatch, acl, session_class(acl))
    session = ais.open_session("m.om", 0)
    assert session.borrowed and session.context == "torch-ctx"


# ---- the codes in ais_bench's exception texts, and what the errors say --------------------------------------------
def test_acl_code_reads_the_leading_code_only() -> None:
    assert ais.acl_code(RuntimeError("[507015][ACL_ERROR_RT_AICORE_EXCEPTION] ")) == 507015
    assert ais.acl_code(RuntimeError("[ModelProcess][-1][general failure]")) == -1
    assert ais.acl_code(RuntimeError("  [100002][Error code unknown] ")) == 100002
    for text in ("no code", "failed [507015]", "[12a][x]", ""):
        assert ais.acl_code(RuntimeError(text)) is None, text


def test_device_lost_says_what_failed_and_what_to_do() -> None:
    lost = ais.device_lost(RuntimeError("[507010][Error code unknown] "), "opening m.om on device 0")
    assert isinstance(lost, DeviceLostError)
    assert str(lost) == (
        "opening m.om on device 0 failed and its code is 507010 (ACL_ERROR_RT_LOST_HEARTBEAT): the NPU context of this "
        "process is unusable from now on; the process must be replaced (a supervised worker is restarted on a fresh "
        "context). If it recurs, check `npu-smi info` (chip health) and the device log (plog) for the failing "
        "operator"
    )
    assert ais.device_lost(RuntimeError("[507008][x]"), "x") is None


def test_a_device_fatal_infer_failure_names_the_call(monkeypatch: pytest.MonkeyPatch, warnings: List[str]) -> None:
    acl = FakeAcl()
    cls = session_class(acl)
    install(monkeypatch, acl, cls)
    session = ais.open_session("m.om", 0)
    cls.fail_with = 107022
    with pytest.raises(DeviceLostError, match=r"^ais_bench infer \(dymbatch\) on npu:0 failed and ACL's last error "):
        session.infer(X, mode="dymbatch")


def _failing_open(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    acl = FakeAcl()

    class Failing(session_class(acl)):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError(text)

    install(monkeypatch, acl, Failing)


def test_open_errors_say_what_failed_and_where_to_look(monkeypatch: pytest.MonkeyPatch, warnings: List[str]) -> None:
    _failing_open(monkeypatch, "[507901][Error code unknown] ")
    with pytest.raises(DeviceLostError, match=r"^opening m\.om on device 3 failed and its code is 507901 "):
        ais.open_session("m.om", 3)
    _failing_open(monkeypatch, "[145000][Error code unknown] ")
    with pytest.raises(NpuDeviceUnavailableError) as info:
        ais.open_session("m.om", 3)
    assert str(info.value) == (
        "ais_bench could not open m.om on device 3 ([145000][Error code unknown]; ais_bench's log above says more): "
        f"{device_hint(3)}. With the right device, check that the OM was built for this chip (`npu-smi info -m`) "
        "and that `npu-smi info` shows the chip healthy"
    )
    _failing_open(monkeypatch, "  ")  # ais_bench said nothing: the exception's type stands in
    with pytest.raises(NpuDeviceUnavailableError, match=r"on device 3 \(RuntimeError; ais_bench's log above"):
        ais.open_session("m.om", 3)


def test_no_open_error_is_read_as_repeat_initialize(monkeypatch: pytest.MonkeyPatch, warnings: List[str]) -> None:
    """ "[100002]" never reaches Python from an open (TensorContext.cpp@a04bd85b^:27-39 logs it and goes on): a
    text with it is an ordinary open failure."""
    _failing_open(monkeypatch, "[100002][Error code unknown] ")
    with pytest.raises(NpuDeviceUnavailableError, match=r"^ais_bench could not open m\.om on device 0 \(\[100002\]"):
        ais.open_session("m.om", 0)
