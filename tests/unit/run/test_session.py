"""run/session.py: which runtime a model gets (backend_config, then $PADDLEX_NPU_RUNTIME, then ais_bench), what
``open_session`` hands each runtime (the OM, its ONNX, acl.json, debug, the simulated device's options), the guard
of each, and ``trim_logs``'s clearing of the per-execution timing logs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, List, Optional

import pytest

from paddlex_npu.config import SimulationConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.om.package import OMPackage
from paddlex_npu.run import ais, simulated
from paddlex_npu.run.acl_errors import JudgedSession
from paddlex_npu.run.reference import InferSession
from paddlex_npu.run.session import OpenedSession, open_session, resolve_runtime_name
from tests.fake_ascend import FakeAcl, install, session_class
from tests.onnx_models import static_model


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder with ``inference.onnx`` (static, y = x + 1), built once for the module."""
    path = tmp_path_factory.mktemp("pkg")
    static_model(path / "inference.onnx")
    return path


# ---- resolve_runtime_name -------------------------------------------------------------------------------------


def test_backend_config_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "simulated")
    assert resolve_runtime_name("reference") == "reference"
    monkeypatch.delenv("PADDLEX_NPU_RUNTIME")
    assert resolve_runtime_name("reference") == "reference"


def test_the_variable_then_ais_bench(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "simulated")
    assert resolve_runtime_name() == "simulated" and resolve_runtime_name(None) == "simulated"
    monkeypatch.delenv("PADDLEX_NPU_RUNTIME")
    assert resolve_runtime_name() == "ais_bench"


def test_an_unknown_runtime_names_where_it_was_set(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "gpu")
    with pytest.raises(ConfigError, match=r"^unknown runtime 'cpu' in backend_config\['runtime'\]: choose one of"):
        resolve_runtime_name("cpu")
    with pytest.raises(ConfigError, match=r"^unknown runtime 'gpu' in PADDLEX_NPU_RUNTIME: choose one of ais_bench,"):
        resolve_runtime_name()


# ---- open_session: the CPU runtimes ---------------------------------------------------------------------------


def test_reference_gets_the_packages_onnx_acl_json_and_debug(folder):
    """The ONNX is the package's, not the one named after the OM (here there is none beside ``model.om``)."""
    package = OMPackage(folder, folder / "model.om", folder / "inference.onnx")
    opened = open_session("reference", package, 2, None, acl_json_path="acl.json", debug=True)
    session = opened.session
    assert type(session) is InferSession and opened.runtime == "reference"
    assert opened.call_guard is contextlib.nullcontext
    assert (session.device_id, session.model_path, session.onnx_path) == (
        2,
        str(folder / "model.om"),
        str(folder / "inference.onnx"),
    )
    assert session.acl_json_path == "acl.json" and session.debug is True


def test_reference_without_an_onnx_path_runs_the_onnx_beside_the_om(folder):
    opened = open_session("reference", OMPackage(folder, folder / "inference.om", None), 0, None)
    assert opened.session.onnx_path == str(folder / "inference.onnx")
    assert opened.session.acl_json_path is None and opened.session.debug is False  # ais_bench's defaults


def test_simulated_gets_its_cost_model_and_task(folder, tmp_path):
    """``simulation`` and ``task`` reach the simulated device: the configured base time, the dense per-element
    cost that text detection's task picks (not the sequence models' default)."""
    sim = SimulationConfig(base_ms=3.5, store=str(tmp_path / "store"), lock_dir=str(tmp_path / "locks"))
    package = OMPackage(folder, folder / "inference.om", folder / "inference.onnx")
    opened = open_session("simulated", package, 0, None, simulation=sim, task="TextDetPredictor")
    try:
        assert isinstance(opened.session, JudgedSession) and opened.session.judge.acl is simulated.ACL
        assert isinstance(opened.session.raw, simulated.SimulatedSession) and opened.runtime == "simulated"
        assert opened.call_guard is contextlib.nullcontext
        assert opened.session.cost.base_ms == 3.5
        assert opened.session.cost.ms_per_melem == simulated.DENSE_MS_PER_MELEM != simulated.SEQUENCE_MS_PER_MELEM
        assert opened.session.device.path == tmp_path / "locks" / "npu0.lock"
    finally:
        opened.session.free_resource()


# ---- open_session: ais_bench ----------------------------------------------------------------------------------


def test_ais_bench_gets_the_om_device_acl_json_and_debug(folder, monkeypatch):
    """InferSession(device_id, model_path, acl_json_path=None, debug=False) as ais_bench's interface.py has it."""
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais.logger, "warning", lambda *a: None)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    acl = FakeAcl()
    base = session_class(acl)
    made: List[tuple] = []

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, device_id: int, model_path: str, acl_json_path: Any = None, debug: bool = False) -> None:
            made.append((device_id, model_path, acl_json_path, debug))
            super().__init__(device_id, model_path, acl_json_path, debug)

    install(monkeypatch, acl, Recording)
    package = OMPackage(folder, folder / "inference.om", None)
    opened = open_session("ais_bench", package, 1, None, acl_json_path="acl.json", debug=True)
    assert made == [(1, str(folder / "inference.om"), "acl.json", True)]
    assert opened.runtime == "ais_bench" and opened.call_guard is ais.keep_acl_context
    assert isinstance(opened.session, ais.AisSession) and isinstance(opened.session.raw, Recording)
    open_session("ais_bench", package, 1, None)
    assert made[-1] == (1, str(folder / "inference.om"), None, False)


# ---- trim_logs ------------------------------------------------------------------------------------------------


class _Summaries:
    """A session with the named reset methods (``reset_summaryinfo``; ``reset_sumaryinfo`` in ait before 2023-10)."""

    def __init__(self, *names: str) -> None:
        self.resets: List[str] = []
        for name in names:
            setattr(self, name, lambda name=name: self.resets.append(name))


@pytest.fixture()
def memory_resets(monkeypatch) -> List[None]:
    """The calls of ais.reset_memory_summary (ais_bench's process-wide MemorySummary)."""
    calls: List[None] = []
    monkeypatch.setattr(ais, "reset_memory_summary", lambda: calls.append(None))
    return calls


@pytest.mark.parametrize(
    "names, reset",
    [
        (("reset_summaryinfo",), "reset_summaryinfo"),
        (("reset_sumaryinfo",), "reset_sumaryinfo"),  # ait before 2023-10
        (("reset_summaryinfo", "reset_sumaryinfo"), "reset_summaryinfo"),  # one clear, not two
        ((), None),  # a session with neither: nothing to clear, no error
    ],
)
def test_trim_logs_clears_the_sessions_summary_once(names, reset: Optional[str], memory_resets):
    session = _Summaries(*names)
    OpenedSession("reference", session, contextlib.nullcontext).trim_logs()  # type: ignore[arg-type]
    assert session.resets == ([reset] if reset else [])
    assert memory_resets == []  # the CPU runtimes have no MemorySummary


@pytest.mark.parametrize("names", [("reset_summaryinfo",), ("reset_sumaryinfo",), ()])
def test_trim_logs_on_the_device_clears_the_memory_summary_too(names, memory_resets):
    session = _Summaries(*names)
    OpenedSession("ais_bench", session, ais.keep_acl_context).trim_logs()  # type: ignore[arg-type]
    assert len(session.resets) == (1 if names else 0) and memory_resets == [None]
