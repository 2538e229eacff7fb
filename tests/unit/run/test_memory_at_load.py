"""Loading a gear or static OM package runs no model beyond the configured warm-up (every gear once, by
default), and a gear whose buffers
exceed the memory budget is refused at load, naming the gear and the budget."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.run import reference_om
from paddlex_npu.run.runner import build_om_runner


@pytest.fixture()
def runs(monkeypatch):
    """Every model run of the reference runtime, by input shapes."""
    calls = []
    original = reference_om.ReferenceOM.run

    def run(self, feed):
        calls.append([list(v.shape) for v in feed.values()])
        return original(self, feed)

    monkeypatch.setattr(reference_om.ReferenceOM, "run", run)
    return calls


def _manifest(*gears):
    """H/W gears of x beside a second, non-image input: ATC's --dynamic_dims (dymhw needs images only)."""
    return {
        "mode": "dymdims",
        "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}, {"name": "a", "dtype": "int32", "shape": [1, 2]}],
        "gears": [list(g) for g in gears],
    }


def _load(package, **cfg):
    return build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig(**cfg))


def test_loading_runs_no_model_and_output_sizes_come_from_shape_inference(package, runs):
    runner = _load(package, manifest=_manifest((8, 8), (64, 128)), warmup_gears=False)
    assert runs == []  # nothing ran at load
    assert [d.size for d in runner.session.get_outputs()] == [3 * 64 * 128 * 4, 2 * 4]  # the largest gear's
    out = runner([np.ones((1, 2), np.int32), np.ones((1, 3, 8, 8), np.float32)])
    assert out[0].shape == (1, 3, 8, 8) and runs == [[[1, 3, 8, 8], [1, 2]]]


def test_warmup_runs_only_what_is_configured(package, runs):
    _load(package, manifest=_manifest((8, 8), (64, 128)), warmup_runs=2, warmup_gears=False)
    assert len(runs) == 2
    runs.clear()
    _load(package, manifest=_manifest((8, 8), (64, 128)))  # the default: each gear once
    assert runs == [[[1, 3, 8, 8], [1, 2]], [[1, 3, 64, 128], [1, 2]]]


def test_a_gear_above_the_memory_budget_is_refused_at_load(package, runs, monkeypatch):
    monkeypatch.delenv("PADDLEX_NPU_MEMORY_BUDGET", raising=False)
    with pytest.raises(ConfigError) as info:
        _load(package, manifest=_manifest((32, 32), (20000, 20000)))
    message = str(info.value)
    assert message.startswith(f"{package.name}: the gear")
    assert "the gear x:1,3,20000,20000;a:1,2 needs 4577.6 MiB of input buffers + 4577.6 MiB of output" in message
    assert "above the memory budget of 1024.0 MiB (the default" in message and runs == []
    with pytest.raises(ConfigError, match=r"x:1,3,64,64;a:1,2 needs 48.0 KiB .* budget of 58.6 KiB \(backend_config"):
        _load(package, manifest=_manifest((32, 32), (64, 64)), memory_budget=60_000)
    monkeypatch.setenv("PADDLEX_NPU_MEMORY_BUDGET", str(6 * 1024**3))
    with pytest.raises(ConfigError, match=r"budget of 6144.0 MiB \(\$PADDLEX_NPU_MEMORY_BUDGET\)"):
        _load(package, manifest=_manifest((32, 32), (20000, 20000)))
    big = _manifest((32, 32), (20000, 20000))
    _load(package, manifest=big, memory_budget=10 * 1024**3, warmup_gears=False)  # loads, runs nothing
    assert runs == []
    monkeypatch.setenv("PADDLEX_NPU_MEMORY_BUDGET", "lots")
    with pytest.raises(ConfigError, match="PADDLEX_NPU_MEMORY_BUDGET='lots' is not a positive number of bytes"):
        _load(package, manifest=_manifest((32, 32), (64, 64)))


def test_a_static_om_is_checked_too(package, monkeypatch):
    monkeypatch.delenv("PADDLEX_NPU_MEMORY_BUDGET", raising=False)
    static = {"mode": "static", "inputs": [{"name": "x", "shape": [8, 3, 8000, 8000]}, _manifest()["inputs"][1]]}
    with pytest.raises(ConfigError, match="the gear x:8,3,8000,8000;a:1,2 needs"):
        _load(package, manifest=static)


def test_dymshape_output_sizes_follow_the_model_from_the_first_call(tmp_path):
    """A dymshape OM reports output size 0; the sizes come from the model for each call's shapes (here ONNX shape
    inference: the package's manifest has no output_dims), never from a multiple of the input bytes, and a
    data-dependent output is sized for ``data_dependent_max`` rows."""
    from paddlex_npu.om import manifest as mf
    from paddlex_npu.run.buffers import MIN_BYTES
    from tests.onnx_models import image_model, nonzero_model

    image_model(tmp_path / "inference.onnx")
    (tmp_path / "inference.yml").write_text("Global:\n  model_name: test\n")
    runner = _load(tmp_path, warmup_gears=False)
    page = np.zeros((1, 3, 4000, 4000), np.float32)
    assert runner.output_sizes([page]) == [page.nbytes]  # y = 2x: exactly its own bytes
    nz = tmp_path / "nz"
    nonzero_model(nz / "inference.onnx")
    (nz / "inference.yml").write_text("Global:\n  model_name: test\n")
    man = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 4]}], "data_dependent": ["idx"]}
    x = np.zeros((1, 4), np.float32)
    assert _load(nz, manifest=man, data_dependent_max=51200).output_sizes([x]) == [2 * 51200 * 8, MIN_BYTES]
    dims = mf.parse({**man, "outputs": ["idx", "y"], "output_dims": [[2, None], [1, 4]]}, "t")
    assert _load(nz, manifest=dims.model_dump(by_alias=True)).output_sizes([x]) == [MIN_BYTES, MIN_BYTES]
