"""Output sizes of a package without ``output_dims`` (:func:`onnx_shape_inference`): ONNX shape inference per input
shape, data-dependent dims at ``data_dependent_max``, and where onnx cannot tell (an op it has no schema for) the
dims solved once from the graph (:mod:`paddlex_npu.run.shape_solver`, which needs sympy).

The solver's answer is put in its per-file cache (``shape_solver._SOLVED``) as it would solve it: the unit layer has
no sympy, so the solver itself does not run here; its own tests are in the PaddleX layers."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.om.graph import load_graph
from paddlex_npu.run import runner as runner_module
from paddlex_npu.run import shape_solver
from paddlex_npu.run.runner import build_om_runner, onnx_shape_inference
from tests.onnx_models import contrib_model, tiny_package

BOUND = 51200  # data_dependent_max
MANIFEST = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 4]}], "data_dependent": ["idx"]}
SOLVED = [["d0_0", 4], [1, 2, None]]  # what the solver gives for contrib_model: y [N, 4], idx [1, 2, K]


@pytest.fixture(scope="module")
def contrib(tmp_path_factory) -> Path:
    """``y`` = Gelu(x) [N, 4] (onnx cannot size it), ``idx`` [1, 2, K] (data-dependent)."""
    return tiny_package(tmp_path_factory.mktemp("runner_sizes") / "contrib", contrib_model)


@pytest.fixture()
def no_sympy(monkeypatch) -> None:
    """sympy missing, as in the unit layer's environment (and wherever it runs), with the solver's cache empty."""
    monkeypatch.setitem(sys.modules, "sympy", None)
    monkeypatch.setattr(shape_solver, "_SOLVED", {})


def _solved(monkeypatch, onnx: Path, loose: List[str], dims: List[Optional[list]]) -> None:
    monkeypatch.setitem(shape_solver._SOLVED, f"{mf.sha256(onnx)}:{','.join(sorted(loose))}", dims)


def _load(folder: Path, **cfg: Any):
    config = OMBackendConfig(data_dependent_max=BOUND, **cfg)
    return build_om_runner(folder, runtime="reference", device_id=0, config=config, model_name="m")


def test_where_onnx_cannot_tell_the_solved_dims_size_the_output(contrib, no_sympy, monkeypatch, caplog):
    """y from the solver ([N, 4], exact), idx from ONNX ([1, 2, K] with K at the bound); the solver runs once,
    the graph is read once, whatever the number of input shapes."""
    _solved(monkeypatch, contrib / "inference.onnx", ["idx"], SOLVED)
    reads = []
    monkeypatch.setattr(runner_module, "load_graph", lambda p: reads.append(p) or load_graph(p))
    runner = _load(contrib, manifest=MANIFEST)
    x = np.zeros((8192, 4), np.float32)
    x[::1000, 1] = 1.5
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        assert runner.output_sizes([x]) == [8192 * 4 * 4, 1 * 2 * BOUND * 8]
        assert runner.output_sizes([x[:3]]) == [64 * 1024, 1 * 2 * BOUND * 8]  # at least 64 KiB
    assert len(reads) == 1
    assert [r.getMessage() for r in caplog.records].count(
        "m: solving the output dims from inference.onnx (rebuild the package with `paddlex-npu convert` to have them "
        "in its manifest)"
    ) == 1
    import onnxruntime as ort

    want = ort.InferenceSession(str(contrib / "inference.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    y, idx = runner([x])
    np.testing.assert_array_equal(idx, np.array(np.nonzero(x))[None])
    np.testing.assert_array_equal(idx, want[1])
    np.testing.assert_array_equal(y, want[0])


def test_without_the_solver_the_error_names_custom_sizes(contrib, no_sympy):
    runner = _load(contrib)
    with pytest.raises(ConfigError, match=r"^Gelu_0:0:y: its size for inputs \[\[2, 4\]\] cannot be derived.*sizes"):
        runner.output_sizes([np.zeros((2, 4), np.float32)])


def test_a_model_onnx_sizes_whole_never_asks_the_solver(package, caplog):
    """Dims of 1 (batch 1) are known dims, not unknown ones."""
    runner = _load(package)
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        sizes = runner.output_sizes([np.zeros((1, 3, 128, 128), np.float32), np.zeros((1, 2), np.int32)])
    assert sizes == [3 * 128 * 128 * 4, 64 * 1024]
    assert not [r for r in caplog.records if "solving the output dims" in r.getMessage()]


def test_an_oms_output_names_and_the_onnxs_both_mark_data_dependent_outputs(contrib, no_sympy, monkeypatch):
    """On the device the OM names its outputs "op:index:name" while the ONNX beside it says "name"; the manifest's
    data_dependent may use either."""
    onnx = contrib / "inference.onnx"
    names = ["Gelu:0:y", "Unsqueeze:1:idx"]
    for loose, solved in ((["idx"], SOLVED), (["Unsqueeze:1:idx"], [["d0_0", 4], None])):
        _solved(monkeypatch, onnx, loose, solved)
        infer = onnx_shape_inference(onnx, mf.parse({**MANIFEST, "data_dependent": loose}, "t"), names, 10, "m")
        assert infer([[2, 4]]) == [[2, 4], [1, 2, 10]], loose


def test_when_onnx_gives_up_on_the_graph_the_solver_answers(contrib, no_sympy, monkeypatch):
    """onnx gives up on some graphs (over 2 GB): no dims at all, every output asks the solver (a data-dependent one
    is its bound)."""
    _solved(monkeypatch, contrib / "inference.onnx", ["idx"], SOLVED)
    monkeypatch.setattr(runner_module, "output_dims", lambda proto, shapes, names: None)
    infer = onnx_shape_inference(contrib / "inference.onnx", mf.parse(MANIFEST, "t"), ["y", "idx"], 10, "m")
    assert infer([[2, 4]]) == [[2, 4], [10]]
