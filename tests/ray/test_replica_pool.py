"""Ray Serve's replica pool (no cluster: the pool is the replica's own object) over the trivial pipeline of the
unit tests: what it promises (the Pool protocol: outcomes, a real status, refusal once the device is lost or it
closes) and what it does not (no timeout, no retry: Serve's to give)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from paddlex_npu.errors import PoolClosedError
from paddlex_npu.executor.worker import Cause
from paddlex_npu.ray.serving import ReplicaPool
from tests.unit.executor import trivial_pipeline as tp
from tests.unit.executor.test_pool import WAIT, wait_for


class JsonEcho(tp.Echo):
    """The trivial pipeline with results as PaddleX's serving app reads them (``json``, ``img``)."""

    def predict(self, item, **kwargs):
        for result in super().predict(item, **kwargs):
            yield SimpleNamespace(json={"res": result}, img={})


def test_the_replica_answers_outcomes_and_reports_its_status(tmp_path):
    pipeline = JsonEcho(0, None)
    pool = ReplicaPool(pipeline, 3, tp.calls(pipeline))
    gate = tmp_path / "gate"
    try:
        held = pool.submit(f"gate:{gate}")
        wait_for(Path(f"{gate}.started"))
        waiting = pool.submit(1)
        status = pool.status
        assert (status.size, status.ready, status.busy, status.queued) == (1, 1, 1, 1) and status.all_ready
        gate.touch()
        assert held.result(WAIT).results[0].json == {"res": "opened"}
        out = waiting.result(WAIT)
        assert out.ok and out.device_id == 3 and out.attempts == 1 and out.timing["calls"] == 1
        assert pool.status.busy == 0 and pool.status.queued == 0
        lost = pool.submit("lost").result(WAIT)
        assert lost.cause is Cause.DEVICE_LOST and "DeviceLostError" in pool.lost
        assert not pool.status.all_ready and "lost" in pool.status.last_error
        with pytest.raises(PoolClosedError, match="device path is lost"):
            pool.submit(1)
    finally:
        pool.close()
    assert pool.status.closing
    fresh = ReplicaPool(JsonEcho(0, None), 0)
    fresh.close()
    assert fresh.status.closing and not fresh.status.alive
    with pytest.raises(PoolClosedError, match="the replica is stopping"):
        fresh.submit(1)
