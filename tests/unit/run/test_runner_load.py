"""What :func:`build_om_runner` does at load: the runner's name and device, the package's promises checked before a
session opens (the task's gear rule, on the NPU the chip), the session options passed on, the manifest from
backend_config, output_dims matched to the OM's outputs, and the one line that says what runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.run import ais
from paddlex_npu.run.runner import build_om_runner
from tests.fake_ascend import FakeAcl, install, session_class
from tests.onnx_models import image_model, tiny_package

DYMSHAPE = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 3, -1, -1]}]}


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """An image model package (``y = 2x``, [N, 3, H, W]), built once; tests give their manifest in the config."""
    return tiny_package(tmp_path_factory.mktemp("runner_load") / "image", image_model)


def _load(folder: Path, runtime: str = "reference", **kw: Any):
    cfg = {k: kw.pop(k) for k in list(kw) if k in OMBackendConfig.model_fields}
    return build_om_runner(
        folder, runtime=runtime, device_id=kw.pop("device_id", 0), config=OMBackendConfig(**cfg), **kw
    )


def _load_lines(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("OM runner for")]


def test_the_runner_is_named_after_its_folder_unless_a_model_name_is_given(image, caplog):
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        assert _load(image).name == "image"
        named = _load(image, model_name="PP-Test", device_id=1)
    assert named.name == "PP-Test" and named.device_id == 1
    assert _load_lines(caplog)[-1] == (
        "OM runner for PP-Test: inference.onnx (dymshape, the ONNX the OM is built from) on npu:1 via reference "
        "(inputs ['x'])"
    )


def test_the_task_gear_rule_is_checked_before_a_session_opens(image):
    gears = {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[32, 32], [32, 40]]}
    with pytest.raises(ConfigError, match=r"^m: the dymhw gear x:1,3,32,40 has W=40, not a multiple of 32"):
        _load(image, manifest=gears, task="TextDetPredictor", model_name="m")
    _load(image, manifest=gears, model_name="m", warmup_gears=False)  # no such rule for other tasks


def test_outputs_of_another_rank_than_the_task_gives_are_refused_naming_them(image):
    with pytest.raises(ConfigError, match=r"^m: output 0 \(Mul_0:0:y\) has rank 4 \(\[-1, 3, -1, -1\]\), text rec"):
        _load(image, task="TextRecPredictor", model_name="m")


def test_a_static_om_with_an_unfixed_output_is_refused_naming_the_model(tmp_path):
    from tests.onnx_models import nonzero_model

    tiny_package(tmp_path, nonzero_model)
    static = {"mode": "static", "inputs": [{"name": "x", "shape": [1, 4]}]}
    with pytest.raises(ConfigError, match=r"^m: this static OM has outputs \['NonZero_0:0:idx'\] whose shape"):
        _load(tmp_path, manifest=static, model_name="m")


def test_an_empty_output_dim_of_a_static_om_is_a_fixed_dim(tmp_path):
    """Only -1 marks an output the input values shape: a static OM's [1, 0] output loads and comes back empty."""
    from tests.onnx_models import empty_output_model

    tiny_package(tmp_path, empty_output_model)
    static = {"mode": "static", "inputs": [{"name": "x", "shape": [1, 4]}]}
    runner = _load(tmp_path, manifest=static, custom_sizes=4096)
    assert [d.shape for d in runner.session.get_outputs()] == [[1, 0]]
    assert runner([np.ones((1, 4), np.float32)])[0].shape == (1, 0)


def test_a_bad_manifest_in_backend_config_is_named_as_such(image):
    with pytest.raises(ConfigError, match=r"invalid OM manifest in backend_config\['manifest'\]: mode"):
        _load(image, manifest={"mode": "dymfoo", "inputs": DYMSHAPE["inputs"]})


@pytest.mark.parametrize(
    "extra",
    [{}, {"outputs": ["Mul:0:y"]}],  # no output names, or an OM's "op:index:name": output_dims go by position
)
def test_output_dims_without_the_oms_output_names_go_by_position(image, extra: Dict[str, Any]):
    runner = _load(image, manifest={**DYMSHAPE, **extra, "output_dims": [["d0_0", 3, "d0_2", "d0_3"]]})
    x = np.ones((2, 3, 64, 96), np.float32)
    assert runner.output_sizes([x]) == [x.nbytes]
    np.testing.assert_array_equal(runner([x])[0], 2 * x)


def test_session_options_reach_the_session(image, tmp_path):
    acl_json = str(tmp_path / "acl.json")
    runner = _load(image, acl_json_path=acl_json, debug=True)
    assert runner.session.acl_json_path == acl_json and runner.session.debug is True
    with pytest.raises(ValueError, match="is not a json file"):  # ais_bench's own check, on the path given
        _load(image, acl_json_path=str(tmp_path / "acl.txt"))


def test_the_simulated_device_gets_its_options_and_the_task(image, tmp_path):
    from paddlex_npu.run.simulated import default_cost

    simulation = {"base_ms": 7.5, "store": str(tmp_path / "store"), "lock_dir": str(tmp_path / "locks")}
    runner = _load(image, "simulated", simulation=simulation, task="TextDetPredictor", warmup_gears=False)
    try:
        det = default_cost("TextDetPredictor")
        assert det.ms_per_melem != default_cost(None).ms_per_melem
        assert (runner.session.cost.base_ms, runner.session.cost.ms_per_melem) == (7.5, det.ms_per_melem)
    finally:
        runner.close()


@pytest.fixture()
def device(monkeypatch, image, tmp_path) -> Path:
    """ais_bench and pyACL stand-ins (tests/fake_ascend.py) on a chip that says it is an Ascend910B4, and a copy of
    the image package with its inference.om."""
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    monkeypatch.setattr(ais, "_BORROWS", {}, raising=False)
    acl = FakeAcl()
    acl.get_soc_name = lambda: "Ascend910B4"
    install(monkeypatch, acl, session_class(acl))
    folder = tiny_package(tmp_path / "pkg", image_model)
    (folder / "inference.om").write_bytes(b"om")
    return folder


def test_on_the_npu_an_om_built_for_another_chip_is_refused_before_it_loads(device):
    with pytest.raises(ConfigError, match=rf"^{device / 'inference.om'} was built for Ascend310P3, but this machine"):
        _load(device, "ais_bench", manifest={**DYMSHAPE, "soc_version": "Ascend310P3"})
    # the CPU runtimes run the ONNX, on whatever chip: no check there
    _load(device, manifest={**DYMSHAPE, "soc_version": "Ascend310P3"}).close()


def test_on_the_npu_the_load_line_names_the_om(device, caplog, monkeypatch):
    monkeypatch.setattr(ais.logger, "warning", lambda *a, **k: None)  # the fake session's context notes
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        runner = _load(device, "ais_bench", model_name="m", manifest={**DYMSHAPE, "soc_version": "Ascend910B4"})
    runner.close()
    assert _load_lines(caplog) == ["OM runner for m: inference.om (dymshape) on npu:0 via ais_bench (inputs ['x'])"]
