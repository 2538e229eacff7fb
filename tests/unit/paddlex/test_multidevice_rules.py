"""Which multi-device pipelines go to the executor, the workers' create options, and PaddleX results as data that
crosses a process boundary (no PaddleX needed)."""

from __future__ import annotations

import pickle
import weakref

import numpy as np
import pytest

from paddlex_npu.devices import npu_ids
from paddlex_npu.errors import ConfigError
from paddlex_npu.paddlex.multidevice import asks_for_om, workers_per_device
from paddlex_npu.paddlex.pipelines import device_kwargs, portable_result, restore_result


class FakeResult(dict):
    """Like PaddleX's result objects: a dict subclass holding something that does not pickle."""

    def __init__(self, data):
        super().__init__(data)
        self._method = weakref.WeakMethod(self.copyable)

    def copyable(self):
        return dict(self)


def test_npu_ids():
    assert npu_ids("npu:0,1") == [0, 1] and npu_ids("npu:3") == [3]
    assert npu_ids("gpu:0,1") == [] and npu_ids(None) == [] and npu_ids("npu") == []


@pytest.mark.parametrize(
    "use_hpip, hpi, engine, engine_config, expected",
    [
        (True, {"backend": "om"}, None, None, True),
        (True, None, None, None, True),  # no backend: OM packages take the route
        (True, {"backend": "onnxruntime"}, None, None, False),
        (False, {"backend": "om"}, None, None, False),
        (False, None, "om", None, True),
        (False, None, "hpi", {"hpi": {"backend": "om"}}, True),
        (True, None, None, {"backend": "paddle"}, False),
        (False, None, "paddle_static", None, False),
        (False, None, None, None, False),
    ],
)
def test_which_pipelines_ask_for_the_om_route(use_hpip, hpi, engine, engine_config, expected):
    assert asks_for_om(use_hpip, hpi, engine, engine_config) is expected


def test_workers_per_device(monkeypatch):
    monkeypatch.delenv("PADDLEX_NPU_WORKERS_PER_DEVICE", raising=False)
    assert workers_per_device() == 1
    monkeypatch.setenv("PADDLEX_NPU_WORKERS_PER_DEVICE", "3")
    assert workers_per_device() == 3
    monkeypatch.setenv("PADDLEX_NPU_WORKERS_PER_DEVICE", "0")
    with pytest.raises(ConfigError, match="not a positive number"):
        workers_per_device()


def test_device_kwargs_set_the_device_and_the_route_buckets_only():
    flat = device_kwargs({"use_hpip": True, "hpi_config": {"backend": "om", "backend_config": {"x": 1}}}, 2)
    assert flat["device"] == "npu:2" and flat["hpi_config"]["device_id"] == 2
    buckets = {"engine_config": {"hpi": {"backend": "om"}, "paddle_static": {"run_mode": "paddle"}}}
    got = device_kwargs(buckets, 1)["engine_config"]
    assert got == {"hpi": {"backend": "om", "device_id": 1}, "paddle_static": {"run_mode": "paddle"}}
    assert "device_id" not in buckets["engine_config"]["hpi"]  # the caller's dict is not changed


def test_results_cross_processes_and_come_back_as_their_class():
    result = FakeResult({"texts": ["a"], "boxes": np.arange(4), "inner": FakeResult({"k": 1}), "plain": {"n": 2}})
    with pytest.raises(TypeError):
        pickle.dumps(result)
    back = restore_result(pickle.loads(pickle.dumps(portable_result(result))))
    assert type(back) is FakeResult and type(back["inner"]) is FakeResult and type(back["plain"]) is dict
    assert back["texts"] == ["a"] and back["boxes"].tolist() == [0, 1, 2, 3] and back["inner"]["k"] == 1
