"""Device ids are logical after ASCEND_RT_VISIBLE_DEVICES; the chip an OM was built for; doctor's view of the chips;
Triton instance names; close() against a call in flight; ais_bench's logging on import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError, NpuDeviceUnavailableError
from paddlex_npu.run import ais, device_ids
from paddlex_npu.run.device_ids import Chip
from paddlex_npu.run.runner import build_om_runner
from tests.fake_ascend import FakeAcl, install, session_class
from tests.onnx_models import two_input_model

# `npu-smi info -m` on an Atlas 300I Duo (two chips per card) in a two-card machine: four chips, two cards.
NPU_SMI_M = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        0                              0                              0                              Ascend 310P3
        0                              1                              1                              Ascend 310P3
        0                              2                              -                              Mcu
        1                              0                              2                              Ascend 310P3
        1                              1                              3                              Ascend 310P3
        1                              2                              -                              Mcu
"""


def test_npu_smi_chips_are_counted_by_chip_logic_id():
    chips = device_ids.parse_npu_smi_chips(NPU_SMI_M)
    assert chips == [  # card (NPU ID), chip on the card, Chip Logic ID; the MCU rows are left out
        Chip(0, 0, 0, "Ascend 310P3"),
        Chip(0, 1, 1, "Ascend 310P3"),
        Chip(1, 0, 2, "Ascend 310P3"),
        Chip(1, 1, 3, "Ascend 310P3"),
    ]
    assert chips[0].soc_version == "Ascend310P3"


def test_soc_name_is_none_without_a_chip_to_ask(monkeypatch):
    """No pyACL, a pyACL without get_soc_name (older CANN), or an empty answer: None, not an error."""
    monkeypatch.setitem(sys.modules, "acl", None)
    assert device_ids.soc_name() is None
    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace())
    assert device_ids.soc_name() is None
    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=lambda: ""))
    assert device_ids.soc_name() is None
    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=lambda: "Ascend310P3"))
    assert device_ids.soc_name() == "Ascend310P3"


@pytest.mark.parametrize(
    "built_for, device, same",
    [
        ("Ascend310P3", "Ascend310P3", True),
        ("Ascend310P3", "Ascend310P3vir02", True),  # a vNPU counts as its chip
        ("Ascend310P3vir04", "Ascend310P3", True),
        ("Ascend310P3", "Ascend910B4", False),
        ("Ascend310P3", "Ascend310P1vir02", False),
        ("Ascend310P3", "Ascend310P3vir02vir01", True),  # the chip is what precedes the first "vir"
        ("", "Ascend310P3", False),  # no soc_version in the manifest: no match claimed
    ],
)
def test_soc_matches_compares_chips_not_vnpu_templates(built_for, device, same):
    assert device_ids.soc_matches(built_for, device) is same


def test_an_om_without_soc_version_does_not_ask_acl(monkeypatch):
    """Nothing to compare without the manifest's soc_version: pyACL is not asked (it may not be there)."""

    def never() -> str:
        raise AssertionError("acl.get_soc_name() asked although there is nothing to compare")

    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=never))
    device_ids.check_om_soc(None, "m.om")
    device_ids.check_om_soc("", "m.om")


@pytest.fixture()
def npu_smi(tmp_path, monkeypatch):
    """An npu-smi on PATH that prints the table above for `info -m`."""
    exe = tmp_path / "npu-smi"
    exe.write_text(f"#!/usr/bin/env bash\n[ \"$2\" = -m ] && cat <<'EOF'\n{NPU_SMI_M}EOF\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_doctor_reports_chips_and_what_ascend_rt_visible_devices_leaves(npu_smi, monkeypatch):
    from paddlex_npu.reports import doctor

    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    check = doctor._npu_smi()
    assert check.status == doctor.OK and check.detail.startswith("4 chip(s) on 2 card(s), Chip Logic IDs 0, 1, 2, 3")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "2,3")
    assert "device ids 0..1 are those chips" in doctor._npu_smi().detail
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "2,7")
    # on a host (in a container npu-smi shows host ids: tests/deploy/test_doctor_container.py)
    monkeypatch.setattr("paddlex_npu.reports.container.container_kind", lambda *a, **k: None)
    check = doctor._npu_smi()
    assert check.status == doctor.FAIL and "7 is no Chip Logic ID here" in check.detail


def test_doctor_checks_import_acl(monkeypatch):
    from paddlex_npu.reports import doctor

    monkeypatch.setitem(sys.modules, "acl", None)
    check = doctor._pyacl()
    assert check.status == doctor.FAIL and "set_env.sh" in check.fix
    assert "pyACL" in [c.name for c in doctor.run_checks()]


@pytest.fixture()
def fresh_process(monkeypatch):
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais.logger, "warning", lambda *a: None)


def test_a_device_id_past_the_visible_chips_names_the_variable(monkeypatch, fresh_process):
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "6,7")
    with pytest.raises(NpuDeviceUnavailableError) as info:
        ais.open_session("m.om", 2)
    assert str(info.value).startswith("device id 2 names no visible chip: device ids are logical, counted after")
    assert "ASCEND_RT_VISIBLE_DEVICES='6,7', which makes 2 chip(s) visible (ids 0..1)" in str(info.value)
    assert ais.open_session("m.om", 1).raw is not None  # the second visible chip (physical 7) is device 1


def test_a_session_that_cannot_open_says_why_a_device_id_may_be_wrong(monkeypatch, fresh_process):
    """ais_bench raises RuntimeError("[-1][ACL: general failure] ") when aclrtSetDevice fails (DeviceManager.cpp)."""
    acl = FakeAcl()
    cls = session_class(acl)

    class Failing(cls):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("[-1][ACL: general failure] ")

    install(monkeypatch, acl, Failing)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    with pytest.raises(NpuDeviceUnavailableError, match=r"could not open m.om on device 3 \(\[-1\]\[ACL: general"):
        ais.open_session("m.om", 3)


def test_an_om_for_another_chip_is_refused_at_load(tmp_path, monkeypatch):
    """acl.get_soc_name() (pyACL, no aclInit needed) against the manifest's soc_version, before ais_bench loads it."""
    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=lambda: "Ascend910B4"))
    with pytest.raises(ConfigError, match="was built for Ascend310P3, but this machine's chip is Ascend910B4"):
        device_ids.check_om_soc("Ascend310P3", "m.om")
    device_ids.check_om_soc("Ascend910B4", "m.om")
    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=lambda: "Ascend310P3vir02"))
    device_ids.check_om_soc("Ascend310P3", "m.om")  # a vNPU of the chip


def test_convert_defaults_the_chip_to_acl_get_soc_name(monkeypatch):
    from paddlex_npu.build.convert import resolve_soc_version

    monkeypatch.setitem(sys.modules, "acl", types.SimpleNamespace(get_soc_name=lambda: "Ascend310P3"))
    assert resolve_soc_version(None) == "Ascend310P3" and resolve_soc_version("Ascend910B4") == "Ascend910B4"
    monkeypatch.setitem(sys.modules, "acl", None)
    with pytest.raises(ConfigError, match="no --soc-version given and no chip to read it from here"):
        resolve_soc_version(None)


@pytest.mark.parametrize("name, device", [("npu1_0", 1), ("npu3_2", 3), ("npu1", 1), ("npu0", 0)])
def test_triton_instance_names_old_and_new(name, device):
    """Triton names instances <group>_<k> since its core of 2023-07, and a count-1 group <group> before."""
    from paddlex_npu.triton.model import instance_device

    assert instance_device(name) == device


@pytest.mark.parametrize("name", ["", "ocr_0", "gpu1_0", "npu"])
def test_other_triton_instance_names_are_refused_not_put_on_device_0(name):
    from paddlex_npu.triton.model import instance_device

    with pytest.raises(ConfigError, match="is not of an instance group named npu<DEVICE_ID>"):
        instance_device(name)


def test_close_waits_for_the_call_in_flight(tmp_path):
    two_input_model(tmp_path / "inference.onnx")
    (tmp_path / "inference.yml").write_text("Global:\n  model_name: test\n")
    runner = build_om_runner(tmp_path, runtime="reference", device_id=0, config=OMBackendConfig())
    session = runner.session
    started, release = threading.Event(), threading.Event()
    infer = session.infer

    def slow_infer(*args, **kwargs):
        started.set()
        assert release.wait(10)
        return infer(*args, **kwargs)

    session.infer = slow_infer
    results = []
    call = threading.Thread(target=lambda: results.append(runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, 4, 4))])))
    call.start()
    assert started.wait(10)
    closer = threading.Thread(target=runner.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive() and not session._freed  # close waits for the call, not frees under it
    release.set()
    call.join(10)
    closer.join(10)
    assert len(results) == 1 and session._freed
    with pytest.raises(RuntimeError, match="is closed"):
        runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, 4, 4))])


def test_importing_ais_bench_leaves_the_root_logger_alone(tmp_path):
    """ais_bench's infer/common/logger.py calls logging.basicConfig(stream=sys.stdout, level=INFO) on import."""
    pkg = tmp_path / "ais_bench" / "infer"
    pkg.mkdir(parents=True)
    (tmp_path / "ais_bench" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "interface.py").write_text(
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='[%(levelname)s] %(message)s')\n"
        "class InferSession:\n    pass\n"
    )
    code = textwrap.dedent(
        """
        import logging
        from paddlex_npu.run.ais import load_session_class
        load_session_class()
        root = logging.getLogger()
        print(len(root.handlers), root.level)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", "30"]  # no handler added, WARNING as Python starts
