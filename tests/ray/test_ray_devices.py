"""Device ids on Ray: an actor holding one NPU sees it as device 0 (Ray sets ``ASCEND_RT_VISIBLE_DEVICES``), and
the simulated device keys its lock by the physical chip behind it: two actors on two NPUs overlap, two sharing
one NPU (half an NPU each) never do. Proved from the device intervals each session recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.ray.devices import logical_id
from tests.onnx_models import two_input_model

pytestmark = [pytest.mark.ray]

CALLS, CALL_MS = 5, 120.0


class Device:
    """A simulated session on the NPU Ray assigned to this actor."""

    def __init__(self, om: str, store: str, locks: str) -> None:
        import os

        from paddlex_npu.config import SimulationConfig
        from paddlex_npu.ray.devices import assigned_device_id
        from paddlex_npu.run.simulated import SimulatedSession

        self.device_id = assigned_device_id()
        self.visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
        sim = SimulationConfig(base_ms=CALL_MS, ms_per_melem=0.0, store=store, lock_dir=locks)
        self.session = SimulatedSession(self.device_id, om, simulation=sim)

    def where(self) -> tuple:
        return self.device_id, self.visible, self.session.device.path.name

    def run(self) -> list:
        feeds = [np.ones((1, 3, 8, 8), np.float32), np.zeros((1, 2), np.int32)]
        for _ in range(CALLS):
            self.session.infer(feeds, mode="dymshape", custom_sizes=[10000, 1000])
        return list(self.session.device_intervals)


def _overlap(a, b) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


def _pair(cluster, node, npu: float, tmp_path: Path):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    om = two_input_model(tmp_path / "m" / "inference.onnx").with_suffix(".om")
    where = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
    actor = ray.remote(num_cpus=0, resources={"NPU": npu}, scheduling_strategy=where)(Device)
    locks = str(tmp_path / "locks")
    pair = [actor.remote(str(om), str(tmp_path / "store"), locks) for _ in range(2)]
    placed = ray.get([a.where.remote() for a in pair], timeout=120)
    intervals = ray.get([a.run.remote() for a in pair], timeout=120)  # both start at once
    for a in pair:
        ray.kill(a)
    return placed, intervals


def test_two_actors_on_two_npus_overlap(cluster, tmp_path):
    placed, (a, b) = _pair(cluster, cluster.head_node, 1, tmp_path)
    assert sorted(placed) == [(0, "0", "npu0.lock"), (0, "1", "npu1.lock")]  # device 0 each, two chips
    assert len(a) == len(b) == CALLS and _overlap(a, b)


def test_two_actors_sharing_one_npu_never_overlap(cluster, tmp_path):
    node = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
    placed, (a, b) = _pair(cluster, node, 0.5, tmp_path)
    assert placed[0] == placed[1] and placed[0][0] == 0 and placed[0][1] in CHIPS_OF_SECOND_NODE
    assert placed[0][2] == f"npu{placed[0][1]}.lock"  # the physical chip, not the logical 0
    assert len(a) == len(b) == CALLS and not _overlap(a, b)


CHIPS_OF_SECOND_NODE = ("2", "3")


@pytest.mark.parametrize(
    "npu, visible, want",
    [("3", "3", 0), ("3", "0,1,2,3", 3), ("5", "", 5), ("2", "4, 2", 1)],
)
def test_logical_id_follows_ascend_rt_visible_devices(npu, visible, want):
    assert logical_id(npu, visible) == want


def test_a_chip_hidden_by_ascend_rt_visible_devices_is_named():
    from paddlex_npu.errors import ConfigError

    with pytest.raises(ConfigError, match="Ray assigned NPU 3, which ASCEND_RT_VISIBLE_DEVICES=0,1 hides"):
        logical_id("3", "0,1")


def test_the_simulated_lock_follows_the_physical_chip(monkeypatch, tmp_path):
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.run import simulated

    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "6,7")
    assert simulated.device_lock(tmp_path, 1).path.name == "npu7.lock"
    with pytest.raises(ConfigError, match="npu:2 is not among the devices ASCEND_RT_VISIBLE_DEVICES=6,7"):
        simulated.device_lock(tmp_path, 2)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert simulated.device_lock(tmp_path, 1).path.name == "npu1.lock"
