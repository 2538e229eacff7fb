"""Options that could only fail later are refused when the model loads, naming the value and what is allowed."""

from __future__ import annotations

import logging

import pytest

from paddlex_npu.config import OMBackendConfig, validate
from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.run.runner import build_om_runner

WHERE = "hpi_config['backend_config']"


@pytest.mark.parametrize(
    "value, match",
    [
        (-1, r"-1 bytes is outside \(0, 17179869184\]"),
        (0, r"0 bytes is outside \(0, 17179869184\]"),
        (2**40, r"1099511627776 bytes is outside"),
        ([], "an empty list: give one size per output"),
        ("100", r"valid integer \(got '100'\)"),
        (True, r"valid integer \(got True\)"),
        ([100, 2.5], r"valid integer \(got 2.5\)"),
    ],
)
def test_bad_custom_sizes_are_refused_at_load(value, match):
    with pytest.raises(ConfigError, match=rf"invalid hpi_config\['backend_config'\]: custom_sizes.*{match}"):
        validate(OMBackendConfig, {"custom_sizes": value}, WHERE)


def test_custom_sizes_list_must_match_the_outputs(package):
    with pytest.raises(ConfigError, match=r"3 sizes, the model has 2 outputs \(Mul_0:0:x_out, Identity_1:0:a_out\)"):
        build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig(custom_sizes=[1, 2, 3]))


def test_warmup_shapes_must_name_inputs(package):
    config = OMBackendConfig(warmup_runs=1, warmup_shapes={"image": [1, 3, 8, 8]})
    with pytest.raises(ConfigError, match=r"names \['image'\], which are not inputs .*\(its inputs: x, a\)"):
        build_om_runner(package, runtime="reference", device_id=0, config=config)
    with pytest.raises(ConfigError, match="warmup_shapes.*greater than 0"):
        validate(OMBackendConfig, {"warmup_shapes": {"x": [1, 3, 0, 8]}}, WHERE)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"name": "x", "dtype": "complex", "shape": [1, 3, -1, -1]}, "dtype 'complex' is not one an OM takes"),
        ({"name": "x", "shape": [1, 3, -1, -1], "range": [[1, 1], [3, 3], [64, 32], [32, 64]]}, r"range \[64, 32\]"),
        ({"name": "x", "shape": [1, 3, -1, -1], "range": [[1, 1], [4, 4], [32, 64], [32, 64]]}, "fixed at 3"),
        ({"name": "x", "shape": [1, 3, 0, -1]}, "neither positive nor -1"),
    ],
)
def test_impossible_manifests_are_refused(spec, match):
    with pytest.raises(ConfigError, match=match):
        mf.parse({"mode": "dymshape", "inputs": [spec]}, "test")


def test_a_manifest_for_another_onnx_gives_one_warning(package, caplog):
    man = mf.default_for(["x", "a"], [[-1, 3, -1, -1], [-1, 2]], ["float32", "int32"], [])
    man.model_copy(update={"onnx_sha256": "0" * 64}).save(package / mf.MANIFEST_NAME)
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig())
    warnings = [r for r in caplog.records if "is not the ONNX the OM was built from" in r.getMessage()]
    assert len(warnings) == 1 and "paddlex-npu convert" in warnings[0].getMessage()


def test_the_load_line_names_the_file_that_runs(package, caplog):
    """On the CPU runtimes the log names inference.onnx (no OM need exist), not inference.om."""
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("OM runner for")]
    assert (
        len(lines) == 1
        and ": inference.onnx (dymshape, the ONNX the OM is built from) on npu:0 via reference" in lines[0]
    )
    assert not (package / "inference.om").exists()


def test_the_docs_document_every_backend_option():
    """docs/backend-options.md's backend_config table names every option the backend accepts (and no other)."""
    import re
    from pathlib import Path

    from paddlex_npu.config import OMBackendConfig

    page = (Path(__file__).resolve().parents[3] / "docs" / "backend-options.md").read_text(encoding="utf-8")
    table = page.split("| key | default | meaning |", 1)[1].split("\n\n", 1)[0]
    keys = {k for row in table.splitlines()[2:] for k in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert keys == set(OMBackendConfig.model_fields), keys ^ set(OMBackendConfig.model_fields)


def test_an_unknown_nested_key_lists_the_keys_of_its_own_level():
    from paddlex_npu.config import OMBackendConfig, validate
    from paddlex_npu.errors import ConfigError

    with pytest.raises(ConfigError, match=r"simulation\.bogus.*Valid keys of simulation: aicpu_us, base_ms, free_us"):
        validate(OMBackendConfig, {"simulation": {"bogus": 1}}, "backend_config")
    with pytest.raises(ConfigError, match=r"Valid keys: acl_json_path, custom_sizes"):
        validate(OMBackendConfig, {"bogus": 1}, "backend_config")
