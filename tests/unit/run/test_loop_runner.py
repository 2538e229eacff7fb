"""The runner of a model split around its Loop (run/runner.py, run/loop.py) on the CPU reference runtime: a tiny
decoder Loop split as ``convert`` splits it (build/loop_convert.py), loaded behind one runner, gives the whole
model's outputs; the whole graph is refused at load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from paddlex_npu.build.loop_convert import split_parts
from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError, InputShapeError
from paddlex_npu.om import manifest as mf
from paddlex_npu.run.runner import build_om_runner
from tests.helpers import spy_session
from tests.onnx_models import loop_model, tiny_package

YML = "Global:\n  model_name: loop\n"


@pytest.fixture(scope="module")
def split_package(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("split")
    whole = loop_model(work / "whole.onnx")
    parts, spec, notes = split_parts(whole, work, {"x": [1, 4]}, "Ascend310P3", "fp16")
    assert "split into encoder (this package), step/ and tail/" in notes[0] and spec.first is None
    for part in parts:
        man = part.manifest.model_copy(update={"loop": spec}) if not part.folder else part.manifest
        man.save(work / part.folder / mf.MANIFEST_NAME)
        (work / part.folder / "inference.yml").write_text(YML)
    return work


def _load(folder: Path):
    return build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig(), model_name="loop")


def _whole(package: Path, x: np.ndarray):
    return ort.InferenceSession(str(package / "whole.onnx")).run(None, {"x": x})


def test_the_split_runner_gives_the_whole_model_outputs_one_step_call_per_step(split_package):
    runner = _load(split_package)
    try:
        x = np.array([[0.9, 0.1, 0.7, 0.2]], np.float32)
        with spy_session(runner.loop.step.session) as steps, spy_session(runner.loop.tail.session) as tails:
            out, steps_out = runner(x=[x])
        want_out, want_steps = _whole(split_package, x)
        np.testing.assert_array_equal(out, want_out)
        np.testing.assert_array_equal(steps_out, want_steps)
        assert len(steps) == 3 == len(want_steps) and len(tails) == 1
    finally:
        runner.close()
    assert runner.loop.step._opened is None and runner.loop.tail._opened is None  # the parts are freed too


def test_a_batch_is_refused_when_the_outputs_are_not_one_row_per_input(split_package):
    runner = _load(split_package)
    try:
        with pytest.raises(InputShapeError, match=r"outputs \['steps'\] are not one row per input"):
            runner(x=[np.ones((2, 4), np.float32)])
    finally:
        runner.close()


def test_batch_rows_are_padded_with_zeros_to_the_longest_decode():
    from paddlex_npu.run.loop import _stack

    short, long = np.ones((1, 3, 2), np.float32), np.full((1, 5, 2), 2, np.float32)
    both = _stack([short, long])
    assert both.shape == (2, 5, 2) and both[0, 3:].sum() == 0 and both[0, :3].sum() == 6 and both[1].sum() == 20
    assert _stack([short]) is short


def test_the_whole_loop_graph_is_refused_at_load_naming_the_node(tmp_path):
    folder = tiny_package(tmp_path / "whole", loop_model, name="loop")
    with pytest.raises(ConfigError, match=r"decoder \(Loop\): ATC's ONNX parser does not parse.*paddlex-npu convert"):
        _load(folder)
