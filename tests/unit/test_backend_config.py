"""The OM backend's options (config.py): defaults, the bounds of each value, and the error's key/value/allowed."""

from __future__ import annotations

import pytest

from paddlex_npu.config import MAX_CUSTOM_SIZE, OMBackendConfig, OMEngineConfig, SimulationConfig, validate
from paddlex_npu.errors import ConfigError


def test_defaults_are_the_documented_ones():
    c = OMBackendConfig()
    assert c.runtime is None and c.simulation is None and c.custom_sizes is None
    assert c.data_dependent_max == 1000 and c.warmup_runs == 0 and c.warmup_gears is True
    assert c.warmup_shapes is None and c.manifest is None and c.memory_budget is None
    assert c.pad_value == 0.0 and c.oversize == "fit" and c.acl_json_path is None and c.debug is False
    e = OMEngineConfig()
    assert e.device_type == "npu" and e.device_id == 0 and e.oversize == "fit"
    s = SimulationConfig()
    assert (s.base_ms, s.ms_per_melem, s.store, s.lock_dir) == (None, None, None, None)


@pytest.mark.parametrize("size", [1, MAX_CUSTOM_SIZE, [1, MAX_CUSTOM_SIZE]])
def test_custom_sizes_at_ais_bench_s_limits_are_taken(size):
    assert validate(OMBackendConfig, {"custom_sizes": size}, "b").custom_sizes == size


@pytest.mark.parametrize(
    "size, match",
    [
        (0, r"0 bytes is outside \(0, 17179869184\]"),
        (MAX_CUSTOM_SIZE + 1, "17179869185 bytes is outside"),
        ([5, -1], "-1 bytes is outside"),
        ([], "an empty list"),
        ("5", "valid integer"),
        (5.0, "valid integer"),
    ],
)
def test_custom_sizes_outside_them_are_refused(size, match):
    with pytest.raises(ConfigError, match=rf"invalid b: custom_sizes.*{match}"):
        validate(OMBackendConfig, {"custom_sizes": size}, "b")


@pytest.mark.parametrize(
    "model, raw, key",
    [
        (OMBackendConfig, {"data_dependent_max": 0}, "data_dependent_max"),
        (OMBackendConfig, {"warmup_runs": -1}, "warmup_runs"),
        (OMBackendConfig, {"memory_budget": 0}, "memory_budget"),
        (OMBackendConfig, {"warmup_shapes": {"x": [1, 0]}}, "warmup_shapes.x.1"),
        (OMBackendConfig, {"oversize": "crop"}, "oversize"),
        (OMBackendConfig, {"runtime": "gpu"}, "runtime"),
        (OMBackendConfig, {"simulation": {"base_ms": -0.5}}, "simulation.base_ms"),
        (OMBackendConfig, {"simulation": {"ms_per_melem": -1}}, "simulation.ms_per_melem"),
        (OMEngineConfig, {"device_id": 256}, "device_id"),
        (OMEngineConfig, {"device_id": -1}, "device_id"),
        (OMEngineConfig, {"device_type": "gpu"}, "device_type"),
    ],
)
def test_values_out_of_bounds_name_the_key_and_the_value(model, raw, key):
    value = raw[key.split(".")[0]]
    while isinstance(value, dict):
        value = next(iter(value.values()))
    value = value[-1] if isinstance(value, list) else value
    with pytest.raises(ConfigError, match=rf"^invalid here: {key}: .*\(got {value!r}\)"):
        validate(model, raw, "here")


def test_values_at_their_bounds_are_taken():
    c = validate(
        OMBackendConfig,
        {
            "data_dependent_max": 1,
            "warmup_runs": 0,
            "memory_budget": 1,
            "simulation": {"base_ms": 0, "ms_per_melem": 0},
        },
        "b",
    )
    assert c.data_dependent_max == 1 and c.memory_budget == 1 and c.simulation.base_ms == 0
    assert validate(OMEngineConfig, {"device_id": 255}, "b").device_id == 255
    assert validate(OMBackendConfig, {"runtime": "simulated", "oversize": "error"}, "b").oversize == "error"


def test_unknown_keys_list_the_valid_keys_of_their_level():
    with pytest.raises(ConfigError, match=r"^invalid b: bogus: .*\(got 1\)\. Valid keys: acl_json_path, custom_sizes"):
        validate(OMBackendConfig, {"bogus": 1}, "b")
    with pytest.raises(
        ConfigError,
        match=r"simulation\.x: .*Valid keys of simulation: aicpu_us, base_ms, free_us, lock_dir, malloc_us, memcpy_us, "
        r"ms_per_melem, pcie_gbps, store$",
    ):
        validate(OMBackendConfig, {"simulation": {"x": 1}}, "b")
    with pytest.raises(ConfigError, match=r"runtime: .*\(got 'x'\); warmup_runs: .*\(got -1\)$"):
        validate(OMBackendConfig, {"warmup_runs": -1, "runtime": "x"}, "b")
