"""One device parser (paddlex_npu/devices.py) for the routing, the multi-device pipelines and the servers."""

from __future__ import annotations

import pytest

from paddlex_npu.devices import Device, npu_ids, parse_device
from paddlex_npu.errors import ConfigError
from paddlex_npu.paddlex import routing
from paddlex_npu.serve.route import parse_devices


@pytest.mark.parametrize(
    "text, device",
    [
        ("npu:0,1", Device("npu", (0, 1))),
        ("NPU:3", Device("npu", (3,))),
        (" npu : 2 ", Device("npu", (2,))),
        ("npu", Device("npu", ())),
        (None, Device(None, ())),
        ("", Device(None, ())),
        ("gpu:1", Device("gpu", (1,))),
        ("cpu", Device("cpu", ())),
    ],
)
def test_parse_device(text, device):
    assert parse_device(text) == device


@pytest.mark.parametrize(
    "bad, says", [("npu:a", "whole numbers"), ("npu:0,0", "names an NPU twice"), ("npu:-1", "whole")]
)
def test_bad_npu_ids_are_refused_with_the_fix(bad, says):
    with pytest.raises(ConfigError, match=says):
        parse_device(bad)


def test_every_reader_agrees():
    assert routing.parse_device("npu:1,2") == ("npu", 1) and routing.parse_device("npu") == ("npu", None)
    assert npu_ids("npu:0,1") == [0, 1] and npu_ids("gpu:0,1") == [] and npu_ids("npu") == []
    assert parse_devices("npu:0,1") == [0, 1] and parse_devices("npu") == [0] and parse_devices(None) == [0]
    with pytest.raises(ConfigError, match="serving runs on the NPU route"):
        parse_devices("gpu:0")
