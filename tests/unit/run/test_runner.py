"""The OM runner: PaddleX's runner contract over an InferSession, with per-call output sizes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import DeviceCallError, InputMismatchError
from paddlex_npu.run.gears import InputShapeError
from paddlex_npu.run.runner import build_om_runner
from tests.helpers import spy_session
from tests.onnx_models import tiny_package


def make(package, **cfg):
    return build_om_runner(package, runtime="reference", device_id=0, config=OMBackendConfig(**cfg))


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
    with spy_session(runner.session) as calls:
        runner([a, np.zeros((1, 3, 32, 32), np.float32)])
        runner([a, np.zeros((1, 3, 32, 32), np.float32)])
        runner([a, np.zeros((1, 3, 256, 256), np.float32)])
    sizes = [c["custom_sizes"] for c in calls]
    assert all(c["mode"] == "dymshape" for c in calls)
    assert sizes[1][0] < sizes[2][0], sizes  # larger input, larger reservation
    assert sizes[2][0] >= 3 * 256 * 256 * 4  # enough for the real output
    assert sizes[1][0] < 1024 * 1024  # not a blanket constant


def test_a_failed_call_is_never_retried_and_names_the_option(package, capsys):
    """On a device a failed call leaks memory and says only "ACL: general failure": one call, then an error
    that names the model, the shapes, the sizes reserved and the option to raise."""
    runner = make(package, custom_sizes=[65536, 65536])
    big = np.zeros((1, 3, 256, 256), np.float32)  # x_out needs 786432 bytes
    with spy_session(runner.session) as calls, pytest.raises(DeviceCallError) as info:
        runner([np.zeros((1, 2), np.int32), big])
    assert len(calls) == 1
    text = str(info.value)
    assert text.startswith(f"{package.name}: the reference session failed")  # named after the model's folder
    assert "[-1][ACL: general failure]" in text and "[[1, 3, 256, 256], [1, 2]]" in text
    assert "[65536, 65536] bytes reserved for outputs ['Mul_0:0:x_out', 'Identity_1:0:a_out']" in text
    assert "custom_sizes" in text
    assert "needs 786432 bytes" in capsys.readouterr().out  # the detail went to the log, as on the device


def test_default_sizes_hold_the_first_call_of_any_size(package):
    runner = make(package)
    for side in (8, 512, 64):
        x_out, _ = runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, side, side), np.float32)])
        assert x_out.shape == (1, 3, side, side)


def test_inputs_are_checked_before_the_call(package):
    runner = make(package)
    with spy_session(runner.session) as calls, pytest.raises(
        InputShapeError, match=r"input 'a' of shape \[1, 3\] is outside"
    ):
        runner([np.zeros((1, 3), np.int32), np.zeros((1, 3, 8, 8), np.float32)])
    assert calls == []


def test_wrong_input_count(package):
    runner = make(package)
    with pytest.raises(InputMismatchError, match="1 inputs given, the model has 2 \\(x, a\\)"):
        runner([np.zeros((1, 3, 8, 8), np.float32)])


def test_warmup_and_close(package, caplog):
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        runner = make(package, warmup_runs=2)
    assert "2 warm-up run(s) done" in caplog.text
    session = runner.session
    runner.close()
    with pytest.raises(RuntimeError, match="freed"):
        session.get_inputs()
    with pytest.raises(RuntimeError, match="closed"):
        runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, 8, 8), np.float32)])


def test_data_dependent_outputs_run_in_dymshape_and_a_static_manifest_is_refused_at_load(tmp_path):
    import json

    from paddlex_npu.errors import ConfigError
    from tests.onnx_models import nonzero_model

    tiny_package(tmp_path, nonzero_model)
    runner = make(tmp_path)  # no manifest: fixed inputs, an output with -1 -> dymshape, idx data-dependent
    assert runner.mode == "dymshape" and runner.manifest.data_dependent == ["NonZero_0:0:idx"]  # as the OM names it
    idx, y = runner([np.array([[0, 3, 0, 5]], np.float32)])
    assert idx.tolist() == [[0, 0], [1, 3]]
    static = {"schema": "paddlex-npu/om-manifest/1", "mode": "static", "inputs": [{"name": "x", "shape": [1, 4]}]}
    (tmp_path / "inference.om.json").write_text(json.dumps(static))
    with pytest.raises(ConfigError, match=r"outputs \['NonZero_0:0:idx'\] whose shape is not fixed.*dymshape"):
        make(tmp_path)
    (tmp_path / "inference.om.json").write_text(
        json.dumps({**static, "outputs": ["idx", "y"], "data_dependent": ["idx"]})
    )
    with pytest.raises(ConfigError, match=r"data-dependent shapes.*only in dymshape"):
        make(tmp_path)


def _gear_package(tmp_path, gears):
    import json

    from tests.onnx_models import image_model

    tiny_package(tmp_path, image_model)
    manifest = {"schema": "paddlex-npu/om-manifest/1", "mode": "dymhw"}
    manifest.update(inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=gears)
    (tmp_path / "inference.om.json").write_text(json.dumps(manifest))
    return tmp_path


@pytest.fixture()
def load_spy(monkeypatch):
    """Every session call made while runners load (the spy is on from the session's creation)."""
    import contextlib

    from paddlex_npu.run import runner as runner_module

    calls, stack = [], contextlib.ExitStack()
    original = runner_module.open_session

    def open_and_spy(*args, **kwargs):
        opened = original(*args, **kwargs)
        calls.append(stack.enter_context(spy_session(opened.session)))
        return opened

    monkeypatch.setattr(runner_module, "open_session", open_and_spy)
    with stack:
        yield calls


def test_every_gear_reaches_the_session_once_at_load_and_is_logged(tmp_path, load_spy, caplog):
    gears = [[8, 8], [8, 16], [16, 16]]
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        runner = make(_gear_package(tmp_path, gears))
    (calls,) = load_spy
    assert [c["shapes"] for c in calls] == [[[1, 3, h, w]] for h, w in gears]
    assert all(c["mode"] == "dymhw" for c in calls)
    for gear in gears:
        assert f"warm-up of gear [[1, 3, {gear[0]}, {gear[1]}]] took" in caplog.text
    assert "3 gear(s) warmed up in" in caplog.text
    runner([np.ones((1, 3, 8, 16), np.float32)])  # a request after load: one more call
    assert [c["shapes"] for c in calls][3:] == [[[1, 3, 8, 16]]]


def test_gear_warmup_can_be_turned_off_and_dymshape_has_none(tmp_path, load_spy, package):
    make(_gear_package(tmp_path / "gears", [[8, 8], [16, 16]]), warmup_gears=False)
    make(package)  # dymshape: nothing to warm
    assert load_spy == [[], []]


def test_the_sessions_timing_log_is_cleared_as_calls_go_on(package, monkeypatch):
    """ais_bench appends one summary entry per execution for the life of the session; the runner clears it every
    TRIM_LOGS_EVERY calls, so a long-running process does not grow."""
    from paddlex_npu.run import runner as runner_module

    monkeypatch.setattr(runner_module, "TRIM_LOGS_EVERY", 4)
    runner = make(package)
    feeds = [np.zeros((1, 2), np.int32), np.zeros((1, 3, 8, 8), np.float32)]
    lengths = []
    for _ in range(10):
        runner(feeds)
        lengths.append(len(runner.session.summary().exec_time_list))
    assert lengths == [1, 2, 3, 1, 2, 3, 4, 1, 2, 3]  # cleared just before calls 4 and 8


def test_a_call_without_inputs_and_a_bare_array(tmp_path, package):
    with pytest.raises(TypeError, match="missing the inputs `x`"):
        make(package)()
    from tests.onnx_models import image_model

    one = make(tiny_package(tmp_path / "one", image_model))
    x = np.random.rand(2, 3, 8, 8).astype(np.float32)
    (y,) = one(x)  # a model of one input takes the array itself, not a list of its rows
    np.testing.assert_array_equal(y, 2 * x)


def test_feeds_the_om_does_not_take_never_reach_the_session(tmp_path, package):
    """The session call is checked in Python first (dtype, rank, fixed dims), whatever the caller: on the device a
    bad call only says "ACL: general failure"."""
    from tests.onnx_models import small_input_first_model

    runner = make(package)
    x, a = np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 2), np.int32)
    fixed = make(tiny_package(tmp_path / "fixed", small_input_first_model))
    bad = [
        (
            runner,
            [x.astype(np.float64), a],
            r"input 'x' is float64\[1, 3, 8, 8\], the OM takes float32\[-1, 3, -1, -1\]",
        ),
        (runner, [x, a[..., None]], r"input 'a' is int32\[1, 2, 1\], the OM takes int32\[-1, 2\] \(-1: any size\)"),
        (fixed, [np.zeros((2, 2), np.float32), x], r"input 's' is float32\[2, 2\], the OM takes float32\[1, 2\]"),
    ]
    for r, feeds, match in bad:
        with spy_session(r.session) as calls, pytest.raises(InputShapeError, match=match):
            r._run_session(feeds)
        assert calls == []


def test_one_custom_size_for_every_output(package):
    runner = make(package, custom_sizes=1 << 20)
    assert runner.output_sizes([np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 2), np.int32)]) == [1 << 20] * 2


def test_warmup_runs_on_the_shapes_configured_else_the_first_gear_else_64(tmp_path, load_spy):
    from tests.onnx_models import gray_model

    gray = tiny_package(tmp_path / "gray", gray_model)  # x [N, 1, H, W]: a fixed dim of 1 after the batch
    make(gray, warmup_runs=1)
    make(gray, warmup_runs=1, warmup_shapes={"x": [2, 1, 8, 16]})
    make(_gear_package(tmp_path / "gears", [[8, 16], [16, 16]]), warmup_runs=2, warmup_gears=False)
    assert [[c["shapes"] for c in calls] for calls in load_spy] == [
        [[[1, 1, 64, 64]]],
        [[[2, 1, 8, 16]]],
        [[[1, 3, 8, 16]], [[1, 3, 8, 16]]],
    ]


def test_gear_warmup_times_are_each_gears_own(tmp_path):
    import time

    runner = make(_gear_package(tmp_path, [[8, 8], [16, 16]]), warmup_gears=False)
    t0 = time.perf_counter()
    times = runner.warmup_gears()
    assert len(times) == 2 and 0 < sum(times) <= time.perf_counter() - t0
