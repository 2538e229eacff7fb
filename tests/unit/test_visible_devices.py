"""ASCEND_RT_VISIBLE_DEVICES read as CANN reads it (CANN environment variable reference, envref_07_0028
"ASCEND_RT_VISIBLE_DEVICES", and the CANN 6.3 PyTorch migration guide's table of the same variable): its documented
examples, device 0 under the variable (what every Ray actor uses), and physical_npu's remapping."""

from __future__ import annotations

import pytest

from paddlex_npu.errors import ConfigError, NpuDeviceUnavailableError
from paddlex_npu.run import ais, device_ids
from tests.fake_ascend import FakeAcl, install, session_class


@pytest.mark.parametrize(
    "value, chips, ids",
    [
        ("1", None, [1]),  # "export ASCEND_RT_VISIBLE_DEVICES=1": one chip, index 0 is chip 1
        ("1,2,3", None, [1, 2, 3]),  # index 0 is chip 1
        ("1, 2,3", None, [1]),  # "2 has a space before it ... only the device ID before the space is read, that is, 1"
        ("1,3,8", 8, [1, 3]),  # "8 is an invalid device ID ... only 1 and 3 are read" (8 chips: ids 0..7)
        ("1,2,-1,3", None, [1, 2]),  # CANN 6.3: "only the device IDs before the invalid value -1 are usable"
        ("0,1,a,3", None, [0, 1]),
        ("", None, []),
    ],
)
def test_cann_documented_examples(value, chips, ids):
    assert device_ids.parse_visible_devices(value, chips) == ids


def test_an_id_cann_does_not_read_is_not_counted(monkeypatch):
    """The old reading stripped spaces and counted every entry, so device 1 passed with "4, 5" although ACL has
    only chip 4 (device 0)."""
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4, 5")
    assert device_ids.visible_devices() == ["4"]
    with pytest.raises(ConfigError, match=r"makes visible only \[4\]: .*ASCEND_RT_VISIBLE_DEVICES=4,5"):
        device_ids.check_device_id(1)


def test_ids_not_ascending_are_refused(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3,1")
    with pytest.raises(
        ConfigError, match="only ascending, distinct chip ids here: write ASCEND_RT_VISIBLE_DEVICES=1,3 "
    ):
        device_ids.check_device_id(0)
    with pytest.raises(ConfigError, match="only ascending"):
        device_ids.physical_npu(0)


@pytest.mark.parametrize("value", ["0", "5", "2,3", "6,7"])
def test_device_0_is_the_first_visible_chip(monkeypatch, value):
    """Device 0 is what every Ray actor and every pod given one chip uses."""
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", value)
    device_ids.check_device_id(0)  # no error
    assert device_ids.physical_npu(0) == int(value.split(",")[0])


def test_device_0_opens_an_ais_bench_session_under_the_variable(monkeypatch):
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais.logger, "warning", lambda *a: None)
    acl = FakeAcl()
    install(monkeypatch, acl, session_class(acl))
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "5")
    assert ais.open_session("m.om", 0).raw is not None
    with pytest.raises(NpuDeviceUnavailableError, match="device id 1 names no visible chip"):
        ais.open_session("m.om", 1)


def test_physical_npu_maps_logical_ids_to_the_listed_chips(monkeypatch):
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    assert [device_ids.physical_npu(i) for i in (0, 3, 7)] == [0, 3, 7]
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,6,7")
    assert [device_ids.physical_npu(i) for i in (0, 1, 2)] == [4, 6, 7]
    with pytest.raises(ConfigError, match="npu:3 is not among the devices ASCEND_RT_VISIBLE_DEVICES=4,6,7"):
        device_ids.physical_npu(3)
    with pytest.raises(ConfigError, match="npu:-1 is not among"):
        device_ids.physical_npu(-1)


def test_a_value_that_makes_no_chip_visible_says_so(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "-1")
    assert device_ids.visible_devices() == []
    assert "makes no chip visible" in device_ids.device_hint(0)
    with pytest.raises(ConfigError):
        device_ids.check_device_id(0)


def test_visible_devices_stops_at_an_id_past_the_chips(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1,3,8")
    assert device_ids.visible_devices() == ["1", "3", "8"]  # the number of chips unknown: every id counts
    assert device_ids.visible_devices(chips=8) == ["1", "3"]  # ids 0..7 on 8 chips: CANN stops at 8
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert device_ids.visible_devices(chips=8) is None


def test_device_hint_gives_the_range_of_logical_ids(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,6,7")
    assert device_ids.device_hint(3) == (
        "device ids are logical, counted after ASCEND_RT_VISIBLE_DEVICES='4,6,7', which makes 3 chip(s) visible "
        "(ids 0..2): use a device id in 0..2, or widen ASCEND_RT_VISIBLE_DEVICES"
    )
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    assert device_ids.device_hint(5).startswith("device 5 is a logical id: 0 .. chips - 1")
