"""ASCEND_RT_VISIBLE_DEVICES read as CANN reads it: CANN runtime's parser (hicann/runtime @681ef761
``src/runtime/core/src/runtime.cc``, ``SplitString`` :4725-4768, ``GetVisibleDevices`` :4951-5068), the CANN
environment variable reference's examples (envref_07_0028, and the CANN 6.3 PyTorch migration guide's table), device
0 under the variable (what every Ray actor uses), and physical_npu's remapping."""

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


@pytest.mark.parametrize(
    "value, chips, ids, ignored",
    [
        ("0,1 ", None, [0, 1], " "),  # :4743-4753: a non-digit pushes the digits before it, a non-comma stops
        ("0;1", None, [0], ";1"),
        ("0 ", 8, [0], " "),
        ("0,", 8, [0], ""),  # :4756-4760: a comma, then the end: nothing lost
        ("0,,1", 8, [0], ",1"),  # :4756-4759: a second comma in a row stops (errCnt > 1)
        ("01,2", 8, [1, 2], ""),  # :5010 stoi
        ("1,3,8", 8, [1, 3], "8"),  # :5015-5018: an id above deviceCnt - 1 stops the list
        ("0,1,2", 2, [0, 1], "2"),  # :5052-5054: as many ids as chips
        ("6,7", 8, [6, 7], ""),
    ],
)
def test_the_runtime_parser(value, chips, ids, ignored):
    reading = device_ids.read_visible_devices(value, chips)
    assert (reading.ids, reading.error, reading.ignored) == (ids, None, ignored)


@pytest.mark.parametrize(
    "value, chips, error",
    [
        ("3,1", None, "ascending"),  # :5022-5029 RT_ALL_ORDER_ERROR: every device fails
        ("1,1", None, "must not repeat"),  # :5030-5036 RT_ALL_DUPLICATED_ERROR
        ("", None, "names no chip id"),  # :4729-4731 not a digit first; :5058-5063 RT_ALL_DATA_ERROR
        (" 0", None, "names no chip id"),
        ("8", 8, "names no chip id below 8"),
    ],
)
def test_values_with_which_cann_fails_every_device(value, chips, error):
    reading = device_ids.read_visible_devices(value, chips)
    assert reading.ids == [] and error in reading.error


def test_values_cann_reads_whole_are_accepted(monkeypatch):
    warned = []
    monkeypatch.setattr(device_ids, "_WARNED", set())
    monkeypatch.setattr("paddlex_npu.log.logger.warning", lambda msg, *a: warned.append(msg % a))
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1 ")  # the trailing space costs nothing
    device_ids.check_device_id(1)
    assert device_ids.physical_npu(1) == 1 and warned == []
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0;1")  # CANN reads 0: device 0 works, 1 is ignored (warned)
    device_ids.check_device_id(0)
    assert warned == [
        "ASCEND_RT_VISIBLE_DEVICES='0;1': CANN reads only 0 and ignores ';1' (it stops at a character other than a "
        "digit or a single comma, and at an id past the chips): device ids 0..0 are those chips"
    ]


def test_ids_at_or_above_the_chip_count_are_not_counted(monkeypatch):
    monkeypatch.setattr(device_ids, "chip_count", lambda: 2)  # two /dev/davinci<N> nodes
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1,2,3")
    assert device_ids.visible_devices() == ["1"]
    with pytest.raises(NpuDeviceUnavailableError, match="device id 1 names no visible chip"):
        device_ids.check_device_id(1)


def test_an_id_cann_does_not_read_is_not_counted(monkeypatch):
    """The old reading stripped spaces and counted every entry, so device 1 passed with "4, 5" although ACL has
    only chip 4 (device 0)."""
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4, 5")
    assert device_ids.visible_devices() == ["4"]
    with pytest.raises(NpuDeviceUnavailableError, match=r"device id 1 names no visible chip"):
        device_ids.check_device_id(1)


def test_ids_not_ascending_are_refused(monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3,1")
    with pytest.raises(
        ConfigError, match=r"CANN makes every device fail with it \(its ids must be in ascending order\): .*=1,3,"
    ):
        device_ids.check_device_id(0)
    with pytest.raises(ConfigError, match="ascending"):
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
