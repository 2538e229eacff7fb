"""A device-fatal error ends the executor's worker after its answer: the pool starts a fresh process."""

from __future__ import annotations

import pytest

from paddlex_npu.paddlex.parallel import ParallelExecutor
from paddlex_npu.samples import assets


def test_a_worker_whose_device_is_lost_answers_then_is_replaced(asset_root, images, tmp_path):
    """The simulated device's fault knob (PADDLEX_NPU_SIM_DEVICE_LOST=N: the Nth device call of a process and
    every later one fail as ais_bench's infer fails, "[-1][ACL: general failure] ", the code only through the
    simulated pyACL's acl.rt.get_last_error on the failing thread): run/ asks it and the input that hits it is
    retried once on a fresh worker (issue 54: a lost device costs at most the input that met it, here not even
    that), the lost worker exits; an ordinary input error does not end the worker; the restart budget bounds a
    device that keeps failing."""
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
    budget = RestartBudget(2)
    with ParallelExecutor(config, runtime="simulated", env=env, transform=_texts, restarts=budget) as ex:
        first = ex.worker_pids
        got = list(ex.map([missing, page, page, page]))
        assert not got[0].ok and got[0].worker == first[0]  # an ordinary input error: the worker goes on
        assert got[1].ok and got[1].results == healthy.results and got[1].worker == first[0]
        # the second page of each worker meets the loss: retried on a fresh process, whose first page it is
        for out in got[2:]:
            assert out.ok and out.results == healthy.results and out.attempts == 2, out.error
        assert len({first[0], got[2].worker, got[3].worker}) == 3
        assert budget.used == 2
        with pytest.raises(ExecutorError, match="restart budget") as info:  # lost again, and the budget is spent
            list(ex.map([page, page]))
        assert "acl.rt.get_last_error) is 507015 (ACL_ERROR_RT_AICORE_EXCEPTION)" in str(info.value)


def _texts(result):
    return list(result.json["res"]["rec_texts"])
