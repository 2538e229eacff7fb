"""Device memory as ACL reports it: pyACL ``free, total, ret = acl.rt.get_mem_info(attr)`` (CANN's pyACL reference,
"aclrtGetMemInfo"; ``aclrtMemAttr`` in ``acl_rt.h``: ACL_DDR_MEM 0, ACL_HBM_MEM 1), and the simulated device's
stand-in answering it from its accounting, device-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from paddlex_npu.run import simulated
from paddlex_npu.run.acl_memory import ACL_DDR_MEM, ACL_HBM_MEM, memory_in_use

GIB = 2**30


def pyacl(answers: dict) -> types.SimpleNamespace:
    """A pyACL whose ``rt.get_mem_info(attr)`` returns ``answers[attr]`` (a (free, total, ret) triple) or raises it."""

    def get_mem_info(attr: int):
        answer = answers[attr]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return types.SimpleNamespace(rt=types.SimpleNamespace(get_mem_info=get_mem_info))


def test_hbm_in_use_is_total_minus_free():
    acl = pyacl({ACL_HBM_MEM: (60 * GIB, 64 * GIB, 0), ACL_DDR_MEM: (1, 2, 0)})
    assert memory_in_use(acl) == (4 * GIB, 64 * GIB)


def test_a_chip_without_hbm_is_asked_for_ddr():
    no_hbm = (0, 0, 0)  # a 310P: no HBM of its kind
    assert memory_in_use(pyacl({ACL_HBM_MEM: no_hbm, ACL_DDR_MEM: (20 * GIB, 21 * GIB, 0)})) == (GIB, 21 * GIB)
    failed = (0, 0, 100000)  # ACL_ERROR_INVALID_PARAM
    assert memory_in_use(pyacl({ACL_HBM_MEM: failed, ACL_DDR_MEM: (5, 8, 0)})) == (3, 8)


@pytest.mark.parametrize(
    "acl",
    [
        None,  # no CANN
        types.SimpleNamespace(rt=types.SimpleNamespace()),  # a pyACL without the call
        pyacl({ACL_HBM_MEM: (0, 0, 107002), ACL_DDR_MEM: (0, 0, 107002)}),  # no current context on this thread
        pyacl({ACL_HBM_MEM: RuntimeError("x"), ACL_DDR_MEM: RuntimeError("x")}),
    ],
)
def test_no_answer_is_none_not_a_zero(acl):
    assert memory_in_use(acl) is None


def test_the_simulated_device_answers_device_wide_for_live_processes(tmp_path, monkeypatch):
    memory = simulated.DeviceMemory()
    monkeypatch.setattr(simulated, "MEMORY", memory)
    assert memory_in_use(simulated.ACL) == (0, simulated.DEVICE_BYTES)  # nothing published, nothing held
    memory.publish_to(tmp_path, 0)
    memory.hold(3000)
    folder = tmp_path / "memory"
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        (folder / f"{other.pid}.json").write_text(json.dumps({"npu": 0, "bytes": 500}))  # a live process on it
        (folder / "999999999.json").write_text(json.dumps({"npu": 0, "bytes": 7}))  # a process that ended
        (folder / f"{os.getppid()}.json").write_text(json.dumps({"npu": 1, "bytes": 11}))  # another device's
        assert memory_in_use(simulated.ACL) == (3500, simulated.DEVICE_BYTES)
    finally:
        other.communicate(b"")
    assert memory_in_use(simulated.ACL) == (3000, simulated.DEVICE_BYTES)
    assert simulated.ACL.rt.get_mem_info(ACL_DDR_MEM) == (0, 0, 0)  # no DDR of its own: a 910B's answer
