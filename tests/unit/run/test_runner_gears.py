"""The OM runner on gear OMs: inputs padded up to a gear with ``pad_value``, outputs cut back to what the model
gives for the real input (the manifest's solved dims, a reduced CTC output as its two [N, T] outputs), oversize
inputs fitted with one warning per model, and the device path where only the OM's descriptors size the outputs.
Values are checked against the ONNX model run directly by ONNX Runtime on the unpadded input."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import InputShapeError
from paddlex_npu.om import manifest as mf
from paddlex_npu.om.package import resolve_om_package
from paddlex_npu.run.runner import CTCReduced, OMRunner, build_om_runner
from paddlex_npu.run.session import open_session
from tests.helpers import spy_session
from tests.onnx_models import ctc_reduced_model, gelu_model, image_model, rec_model, tiny_package

REC = "TextRecPredictor"
REC_GEARS = {"mode": "dymdims", "inputs": [{"name": "x", "shape": [1, 3, 8, -1]}], "gears": [[16], [32]]}
T_DIMS = {"outputs": ["y"], "output_dims": [["d0_0", "ceiling(d0_3/4)", 3]]}  # T = ceil(W / 4), what rec_model gives


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Dict[str, Path]:
    """One package folder per tiny model, built once for the module."""
    root = tmp_path_factory.mktemp("runner_gears")
    build = {"rec": rec_model, "ctc": ctc_reduced_model, "image": image_model, "gelu": gelu_model}
    return {name: tiny_package(root / name, model) for name, model in build.items()}


def _load(folder: Path, manifest: Dict[str, Any], task: str = REC, **cfg: Any) -> OMRunner:
    config = OMBackendConfig(manifest=manifest, warmup_gears=False, **cfg)
    return build_om_runner(folder, runtime="reference", device_id=0, config=config, model_name="m", task=task)


def _onnx(folder: Path, x: np.ndarray) -> List[np.ndarray]:
    """The model's own outputs for ``x``, by ONNX Runtime."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "inference.onnx"), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _line(w: int, n: int = 1) -> np.ndarray:
    """A positive line image (a max over padded columns then equals the max over the real ones)."""
    return (np.random.default_rng(w).random((n, 3, 8, w)) + 0.5).astype(np.float32)


@pytest.mark.parametrize("pad_value", [0.0, -1.0])
def test_a_line_is_padded_to_its_gear_and_its_steps_cut_to_the_solved_dims(models, pad_value):
    """W 10 runs in gear 16 (T 4); the manifest's ``ceiling(d0_3/4)`` cuts T back to 3, what the model gives for
    W 10 (a stride guess from T 4 at W 16 would say 2)."""
    runner = _load(models["rec"], {**REC_GEARS, **T_DIMS}, pad_value=pad_value)
    x = _line(10)
    with spy_session(runner.session) as calls:
        out = runner([x])
    assert type(out) is list and len(out) == 1
    (want,) = _onnx(models["rec"], x)
    assert out[0].shape == (1, 3, 3) == want.shape
    np.testing.assert_array_equal(out[0], want)
    (fed,) = calls[0]["feeds"]
    assert calls[0]["shapes"] == [[1, 3, 8, 16]] and calls[0]["mode"] == "dymdims"
    np.testing.assert_array_equal(fed[..., :10], x)
    assert (fed[..., 10:] == pad_value).all()


def test_a_reduced_ctc_output_is_cut_back_as_the_ctc_output_was(models):
    """Manifest ``reduction``: two [N, T] outputs, each cropped on T as the full CTC output would be, returned as
    :class:`CTCReduced`; a batch above the largest gear is split and joined."""
    manifest = {
        "mode": "dymdims",
        "inputs": [{"name": "x", "shape": [-1, 3, 8, -1]}],
        "gears": [[1, 16], [2, 16]],
        "outputs": ["ctc_indices", "ctc_scores"],
        "reduction": {"kind": "ctc_greedy", "source": "softmax_0.tmp_0", "classes": 3},
    }
    runner = _load(models["ctc"], manifest)
    x = _line(10, n=3)
    with spy_session(runner.session) as calls:
        out = runner([x])
    assert isinstance(out, CTCReduced) and len(out) == 2
    indices, scores = _onnx(models["ctc"], x)
    assert out[0].dtype == np.int32 and out[0].shape == (3, 10)
    np.testing.assert_array_equal(out[0], indices)
    np.testing.assert_allclose(out[1], scores, rtol=1e-6)
    assert [c["shapes"] for c in calls] == [[[2, 3, 8, 16]], [[1, 3, 8, 16]]]


def _fit_warnings(caplog) -> List[str]:
    return [r.getMessage() for r in caplog.records if "oversize 'fit'" in r.getMessage()]


def test_an_oversize_line_is_squeezed_into_the_largest_gear_with_one_warning(models, caplog):
    runner = _load(models["rec"], {**REC_GEARS, **T_DIMS})
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"), spy_session(runner.session) as calls:
        out = runner([_line(40)])
        runner([_line(48)])
    assert calls[0]["shapes"] == [[1, 3, 8, 32]] and out[0].shape == (1, 8, 3)  # the squeezed line's 8 steps
    (warning,) = _fit_warnings(caplog)
    assert "m: an input of shape [1, 3, 8, 40]" in warning and "resized it to [1, 3, 8, 32] (width squeezed)" in warning
    assert (
        "which may read less well. Add a larger gear (paddlex-npu convert --gears auto plans one that holds every "
        "input) or set backend_config oversize: 'error'" in warning
    )
    refusing = _load(models["rec"], {**REC_GEARS, **T_DIMS}, oversize="error")
    with pytest.raises(InputShapeError, match=r"fit none of the OM's"):
        refusing([_line(40)])


def test_an_oversize_line_is_squeezed_into_the_ranges_of_a_dymshape_om(models, caplog):
    ranges = {
        "mode": "dymshape",
        "inputs": [{"name": "x", "shape": [1, 3, 8, -1], "range": [[1, 1], [3, 3], [8, 8], [4, 32]]}],
    }
    runner = _load(models["rec"], ranges)
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"), spy_session(runner.session) as calls:
        out = runner([_line(40)])
        runner([_line(48)])
    assert calls[0]["shapes"] == [[1, 3, 8, 32]] and out[0].shape == (1, 8, 3)
    (warning,) = _fit_warnings(caplog)
    assert (
        "which may read less well. Rebuild the OM with wider ranges (paddlex-npu convert with a larger --max-side, "
        "or none) or set backend_config oversize: 'error'" in warning
    )
    refusing = _load(models["rec"], ranges, oversize="error")
    with pytest.raises(InputShapeError, match=r"outside the OM's"):
        refusing([_line(40)])


def test_on_the_device_path_a_gear_om_is_sized_by_its_descriptors(models):
    """Only the OM (no ONNX for the runner, no output_dims): a gear OM reports its outputs' size at the largest gear,
    which holds every gear's outputs, so it loads and runs."""
    manifest = mf.parse(
        {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[8, 8], [16, 16]]}, "t"
    )
    opened = open_session("reference", resolve_om_package(models["image"], "reference"), 0, manifest)
    runner = OMRunner(opened, manifest, OMBackendConfig(), name="m", onnx_path=None)
    try:
        x = np.ones((1, 3, 8, 8), np.float32)
        assert runner.output_sizes([x]) == [3 * 16 * 16 * 4] and runner.device_id == 0
        np.testing.assert_array_equal(runner([x])[0], 2 * x)
    finally:
        runner.close()


def test_a_gear_output_the_om_cannot_size_gets_its_buffer_set_before_the_call(models):
    """Outside dymshape ais_bench applies custom_sizes only through set_custom_outsize: an output of size 0 (ONNX
    shape inference does not know Gelu) gets the size the manifest's output_dims give."""
    manifest = {
        "mode": "dymbatch",
        "inputs": [{"name": "x", "shape": [-1, 4]}],
        "gears": [[1], [4]],
        "outputs": ["y"],
        "output_dims": [["d0_0", 4]],
    }
    runner = _load(models["gelu"], manifest, task=None)
    assert [d.size for d in runner.session.get_outputs()] == [0]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    (y,) = runner([x])
    np.testing.assert_allclose(y, _onnx(models["gelu"], x)[0], rtol=1e-6)


def _count_outsize_calls(session: Any) -> List[Any]:
    """Record the ``set_custom_outsize`` calls made on ``session`` from outside its ``infer`` (in dymshape the
    session's own infer sets the sizes it was given, as ais_bench's does); the real methods still run."""
    calls: List[Any] = []
    setter, infer, inside = session.set_custom_outsize, session.infer, []

    def counted_setter(sizes: Any) -> Any:
        if not inside:
            calls.append(list(sizes))
        return setter(sizes)

    def marked_infer(*args: Any, **kwargs: Any) -> Any:
        inside.append(1)
        try:
            return infer(*args, **kwargs)
        finally:
            inside.pop()

    session.set_custom_outsize, session.infer = counted_setter, marked_infer
    return calls


@pytest.mark.parametrize(
    "model, manifest",
    [
        # a gear OM whose outputs the OM sizes itself: nothing to set
        ("rec", {**REC_GEARS, **T_DIMS}),
        # a dymshape OM that cannot size its output: ais_bench takes custom_sizes with the call, not the setter
        ("gelu", {"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 4], "range": [[1, 4], [4, 4]]}]}),
    ],
)
def test_the_sticky_output_size_setter_is_used_only_for_a_gear_output_the_om_cannot_size(models, model, manifest):
    runner = _load(models[model], manifest, task=REC if model == "rec" else None)
    calls = _count_outsize_calls(runner.session)
    x = _line(10) if model == "rec" else np.ones((2, 4), np.float32)
    with spy_session(runner.session) as infers:
        out = runner([x])
    assert calls == []
    assert len(infers) == 1
    np.testing.assert_allclose(out[0], _onnx(models[model], x)[0][..., : out[0].shape[-1]], rtol=1e-6)
