"""A device-fatal error ends the executor's worker after its answer: the pool starts a fresh process."""

from __future__ import annotations

import pytest

from paddlex_npu.executor import ParallelExecutor
from paddlex_npu.samples import assets


def test_a_worker_whose_device_is_lost_answers_then_is_replaced(asset_root, images, tmp_path):
    """The simulated device's fault knob (PADDLEX_NPU_SIM_DEVICE_LOST=N: the Nth device call of a process and
    every later one fail as ais_bench's infer fails, "[-1][ACL: general failure] ", the code only through the
    simulated pyACL's acl.rt.get_last_error on the failing thread): run/ asks it and the input that hits it is
    answered with DeviceLostError, its worker exits and a fresh
    one answers the next input right; an ordinary input error does not end the worker; the restart budget
    bounds a device that keeps failing."""
    from paddlex_npu.errors import ExecutorError
    from paddlex_npu.executor.pool import RestartBudget

    page = str(images["english"])
    config = assets.ocr_pipeline_config(asset_root / "om")
    env = {"PADDLEX_NPU_SIM_STORE": str(tmp_path / "store"), "PADDLEX_NPU_SIM_LOCKS": str(tmp_path / "locks")}
    with ParallelExecutor(config, runtime="simulated", env=env, transform=_texts) as ex:
        (healthy,) = list(ex.map([page]))
    calls = int(healthy.timing["sim_calls"])  # device calls of one page in a fresh worker
    env["PADDLEX_NPU_SIM_DEVICE_LOST"] = str(calls + 1)  # the first call of the second page
    missing = str(tmp_path / "missing.png")
    budget = RestartBudget(1)
    with ParallelExecutor(config, runtime="simulated", env=env, transform=_texts, restarts=budget) as ex:
        first = ex.worker_pids
        got = list(ex.map([missing, page, page, page]))
        assert not got[0].ok and got[0].worker == first[0]  # an ordinary input error: the worker goes on
        assert got[1].ok and got[1].results == healthy.results and got[1].worker == first[0]
        assert not got[2].ok and got[2].error.type == "DeviceLostError", got[2].error
        assert "acl.rt.get_last_error) is 507015 (ACL_ERROR_RT_AICORE_EXCEPTION)" in got[2].error.message
        assert got[2].error.category == "device_lost" and got[2].worker == first[0] and got[2].attempts == 1
        assert got[3].ok and got[3].results == healthy.results and got[3].worker != first[0]  # a fresh process
        assert budget.used == 1
        with pytest.raises(ExecutorError, match="restart budget"):  # lost again, and the budget is spent
            list(ex.map([page, page]))


def _texts(result):
    return list(result.json["res"]["rec_texts"])
