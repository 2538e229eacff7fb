"""The OM runner: PaddleX's runner contract over an InferSession, with per-call output sizes."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx_models import two_input_model

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import InputMismatchError
from paddlex_npu.runner import OMRunner, build_om_runner, sort_inputs


@pytest.fixture()
def package(tmp_path):
    two_input_model(tmp_path / "inference.onnx")
    (tmp_path / "inference.yml").write_text("Global:\n  model_name: test\n")
    return tmp_path


class RecordingRunner(OMRunner):
    """Records what reaches the session (the real reference session still runs)."""

    def infer(self, feeds, learn=True):
        calls = self.__dict__.setdefault("calls", [])
        original = self.session.infer

        def spy(f, mode, custom_sizes):
            calls.append((mode, list(custom_sizes)))
            return original(f, mode=mode, custom_sizes=custom_sizes)

        self.session.infer = spy
        try:
            return super().infer(feeds, learn)
        finally:
            self.session.infer = original


def make(package, **cfg):
    return build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig(**cfg),
                           runner_cls=RecordingRunner)


def test_sort_inputs_matches_paddlex():
    try:
        from paddlex.inference.models.runners.utils import sort_inputs as pdx_sort
    except ImportError:  # PaddleX 3.0-3.4
        from paddlex.inference.models.common.static_infer import _sort_inputs as pdx_sort

    names = ["x", "a", "im_shape", "scale_factor"]
    given = sorted(names)
    assert sort_inputs(given, names) == pdx_sort(given, names) == names


def test_inputs_sorted_by_name_reach_the_model_in_its_order(package):
    runner = make(package)
    x = np.random.rand(1, 3, 8, 8)  # float64: cast to the model's float32
    a = np.array([[3, 4]], dtype=np.int64)  # int64: cast to int32
    x_out, a_out = runner(x=[a, x])  # PaddleX passes inputs sorted by name: a, x
    assert x_out.dtype == np.float32 and a_out.dtype == np.int32
    np.testing.assert_allclose(x_out, (x * 2).astype(np.float32))
    np.testing.assert_array_equal(a_out, a)
    assert runner([a, x])[1].tolist() == [[3, 4]]  # positional form


def test_custom_sizes_follow_the_input_shapes(package):
    runner = make(package)
    a = np.zeros((1, 2), np.int32)
    runner([a, np.zeros((1, 3, 32, 32), np.float32)])
    runner([a, np.zeros((1, 3, 32, 32), np.float32)])
    runner([a, np.zeros((1, 3, 256, 256), np.float32)])
    sizes = [s for _, s in runner.calls]
    assert all(mode == "dymshape" for mode, _ in runner.calls)
    assert sizes[1][0] < sizes[2][0], sizes  # larger input, larger reservation
    assert sizes[2][0] >= 3 * 256 * 256 * 4  # enough for the real output
    assert sizes[1][0] < 1024 * 1024  # not a blanket constant


def test_too_small_output_grows_and_retries_once(package, caplog):
    runner = make(package, custom_sizes=[65536, 65536])
    big = np.zeros((1, 3, 256, 256), np.float32)  # x_out needs 786432 bytes
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        x_out, _ = runner([np.zeros((1, 2), np.int32), big])
    assert x_out.shape == (1, 3, 256, 256)
    assert len(runner.calls) == 2 and runner.calls[1][1][0] >= 786432
    assert "retrying once" in caplog.text


def test_wrong_input_count(package):
    runner = make(package)
    with pytest.raises(InputMismatchError, match="1 inputs given, the model has 2 \\(x, a\\)"):
        runner([np.zeros((1, 3, 8, 8), np.float32)])


def test_warmup_and_close(package):
    runner = make(package, warmup_runs=2)
    assert len(runner.calls) == 2
    session = runner.session
    runner.close()
    with pytest.raises(RuntimeError, match="freed"):
        session.get_inputs()
    with pytest.raises(RuntimeError, match="closed"):
        runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, 8, 8), np.float32)])
