"""The CTC reduction on the device (issue 35): ``convert`` appends ArgMax and ReduceMax over the classes of a
recognition model's CTC output; the route decodes the ``[N, T]`` indices and scores with PaddleX's own decode.

Checked on the reference runtime (ONNX Runtime runs the reduced ONNX the OM is built from): texts and scores
equal to PaddleX's own engine on a line set (Latin and Chinese, 1 to 60 words), word boxes equal to the
unreduced package's, for PP-OCRv4, v5 and v6 tiny/small, in dymshape, gear and static packages; the reduced
outputs equal argmax/max of the full output at a spread of widths 8-3200, sized by the same sizing code.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.paddlex.ctc_decode import decode_reduced
from paddlex_npu.run.runner import CTCReduced, OMRunner, build_om_runner
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI
from tests.paddlex.compat import LEGACY, runner_of

RECS = [assets.REC, assets.REC_V5] + ([] if LEGACY else [assets.REC_V6_TINY, assets.REC_V6_SMALL])
WORDS = "invoice total amount due order shipped warehouse payment within thirty days thank you".split()
ZH = "深度学习推理加速昇腾芯片识别文字的速度很快而且准确率也很高我们今天讨论模型部署与优化方法"
WIDTHS = (8, 9, 16, 31, 32, 100, 257, 320, 641, 1000, 1601, 2400, 3199, 3200)  # dymshape takes 32 up


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> List[str]:
    """Rendered lines from one word to one at PaddleX's 3200 px width limit, Latin and Chinese."""
    d = tmp_path_factory.mktemp("ctc_lines")
    texts = [" ".join(WORDS[(3 * k + j) % len(WORDS)] for j in range(n)) + f" {k}" for k, n in enumerate((1, 3, 8, 60))]
    out = [str(assets.render_text_image([t], d / f"en{k}.png", size=28)) for k, t in enumerate(texts)]
    out += [str(assets.render_text_image([ZH[:n]], d / f"zh{n}.png", cjk=True, size=30)) for n in (2, 9, 40)]
    return out


def _package(asset_root: Path, dest: Path, model: str, mode: str, **options) -> Path:
    convert(asset_root / "om" / model, dest / model, "Ascend310P3", mode, run=False, **options)
    return dest / model


@pytest.fixture(scope="module")
def dymshape(asset_root, tmp_path_factory) -> Callable[[str, bool], Path]:
    """``dymshape(model, reduce)``: the model's dymshape package, converted once for the module (two tests read
    the same ones), float32 in (``--no-device-normalise``: one test feeds it noise; 8-bit lines:
    tests/paddlex/test_rec_normalise.py)."""
    made: Dict[Tuple[str, bool], Path] = {}

    def package(model: str, reduce: bool = True) -> Path:
        if (model, reduce) not in made:
            dest = tmp_path_factory.mktemp(f"{model}-{'on' if reduce else 'off'}")
            made[model, reduce] = _package(asset_root, dest, model, "dymshape", reduce=reduce, device_normalise=False)
        return made[model, reduce]

    return package


def _read(model: str, folder: Path, lines: List[str], **kwargs) -> List[tuple]:
    from paddlex import create_model

    predictor = create_model(model, model_dir=str(folder), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        assert isinstance(runner_of(predictor), OMRunner)
        return [(r["rec_text"], r["rec_score"]) for r in predictor.predict(lines, batch_size=3, **kwargs)]
    finally:
        predictor.close()


def _paddlex_own(model: str, asset_root: Path, lines: List[str]) -> List[tuple]:
    """PaddleX's own engine on the CPU: onnxruntime (3.5+), Paddle Inference (3.0-3.4; PP-OCRv4's Paddle model)."""
    from paddlex import create_model

    if LEGACY:
        from paddlex.inference import PaddlePredictorOption

        kw = dict(device="cpu", pp_option=PaddlePredictorOption(run_mode="paddle"))
    else:
        kw = dict(device="cpu", engine="onnxruntime")
    predictor = create_model(model, model_dir=str(asset_root / "paddle" / model), **kw)
    try:
        return [(r["rec_text"], r["rec_score"]) for r in predictor.predict(lines, batch_size=3)]
    finally:
        predictor.close()


@pytest.mark.parametrize("model", RECS)
def test_reduced_packages_read_exactly_as_paddlex(model, asset_root, lines, dymshape):
    reduced, full = dymshape(model), dymshape(model, reduce=False)
    man = mf.load(reduced / mf.MANIFEST_NAME)
    assert man.outputs == list(mf.CTC_OUTPUTS) and man.reduction is not None and man.reduction.classes > 6000
    assert mf.load(full / mf.MANIFEST_NAME).reduction is None
    got = _read(model, reduced, lines)
    assert got == _read(model, full, lines)  # PaddleX's own decode on the full output, through the route
    if not LEGACY:  # PaddleX's onnxruntime engine runs the same ONNX: equal to the bit
        assert got == _paddlex_own(model, asset_root, lines)
    elif model == assets.REC:  # 3.4: Paddle Inference on PP-OCRv4's Paddle model, another kernel: same texts
        own = _paddlex_own(model, asset_root, lines)
        assert [t for t, _ in got] == [t for t, _ in own]
        assert [s for _, s in got] == pytest.approx([s for _, s in own], abs=1e-4)
    assert "invoice" in got[0][0].lower()  # the lines are read (the 60-word one squeezed past reading)
    if model in (assets.REC, assets.REC_V5):  # word boxes: PaddleX's own decode path, once per class count
        boxes = _read(model, reduced, lines[:4], return_word_box=True)
        assert boxes == _read(model, full, lines[:4], return_word_box=True)


@pytest.mark.once  # the packages' outputs through the runner; PaddleX's decode of them: the test above
@pytest.mark.parametrize(
    "model, mode",
    [
        (assets.REC, "gears"),
        (assets.REC_V5, "gears"),
        (assets.REC, "auto"),  # planned from the lines: the planner runs the model before the reduction
        pytest.param(assets.REC, "static", marks=pytest.mark.slow),
    ],
)
def test_gear_and_static_packages_read_as_their_full_twins(model, mode, asset_root, lines, tmp_path):
    gears = {"gears": "1,320;3,1600;3,3200"} if mode == "gears" else {}
    if mode == "auto":
        (tmp_path / "samples").mkdir()
        for line in lines:
            shutil.copy(line, tmp_path / "samples")
        gears = {"gears": "auto", "samples": tmp_path / "samples", "samples_are": "lines", "max_gears": 4}
        mode = "gears"
    reduced = _package(asset_root, tmp_path / "on", model, mode, **gears)
    full = _package(asset_root, tmp_path / "off", model, mode, reduce=False, **gears)
    assert mf.load(reduced / mf.MANIFEST_NAME).reduction is not None
    if mode == "static":  # every line padded to the one shape (3200 wide): three, the widest among them, suffice
        lines = lines[1::2]
    assert _read(model, reduced, lines) == _read(model, full, lines)


def _runner(folder: Path) -> OMRunner:
    return build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig(), task="TextRecPredictor")


@pytest.mark.once
@pytest.mark.parametrize("model", [assets.REC, RECS[-1]])
@pytest.mark.parametrize("mode", ["dymshape", pytest.param("gears", marks=pytest.mark.slow)])
def test_reduced_outputs_are_argmax_and_max_at_every_width(model, mode, asset_root, tmp_path, dymshape):
    if mode == "dymshape":
        on, off = _runner(dymshape(model)), _runner(dymshape(model, reduce=False))
    else:
        gears = {"gears": "1,320;2,1600;2,3200", "device_normalise": False}  # float32 noise in
        on = _runner(_package(asset_root, tmp_path / "on", model, mode, **gears))
        off = _runner(_package(asset_root, tmp_path / "off", model, mode, reduce=False, **gears))
    rng = np.random.default_rng(35)
    try:
        for k, width in enumerate(w for w in WIDTHS if mode == "gears" or w >= 32):
            x = rng.standard_normal((1 + k % 2, 3, 48, width), dtype=np.float32)
            indices, scores = got = on(x=[x])
            (full,) = off(x=[x])
            assert isinstance(got, CTCReduced) and indices.dtype == np.int32 and scores.dtype == np.float32
            assert np.array_equal(indices, full.argmax(-1)) and np.array_equal(scores, full.max(-1)), width
            if mode == "dymshape":  # the same sizing code: the shapes it reserves for are the outputs' own
                assert on._sizer.shapes_for([list(x.shape)]) == [list(indices.shape), list(scores.shape)]
                assert on.output_sizes([x]) == [max(64 << 10, -(-indices.nbytes // 4096) * 4096)] * 2
                assert indices.nbytes * full.shape[-1] == full.nbytes * 1  # 4 bytes each: C times fewer
    finally:
        on.close()
        off.close()


def test_decode_takes_the_indices_it_is_given():
    """The decode reads the reduced arrays, not something else: other indices give other texts."""
    from paddlex.inference.models.text_recognition.processors import CTCLabelDecode

    decoder = CTCLabelDecode(character_list=list("abc"))
    indices = np.array([[1, 1, 0, 2, 3, 3, 0, 1]], np.int32)
    scores = np.array([[0.5, 0.9, 0.1, 0.7, 0.8, 0.6, 0.2, 0.4]], np.float32)
    assert decoder(CTCReduced([indices, scores])) == (["abca"], [float(np.mean(scores[0, [0, 3, 4, 7]]))])
    assert decode_reduced(decoder, CTCReduced([indices[:, ::-1].copy(), scores]))[0] == ["acba"]
    full = np.zeros((1, 8, 5), np.float32)
    full[0, np.arange(8), indices[0]] = scores[0]
    assert decoder([full]) == decoder(CTCReduced([indices, scores]))  # PaddleX's own path on the full output


def test_manifests_without_a_reduction_still_load_and_a_wrong_one_is_refused(asset_root):
    old = mf.load(asset_root / "om" / assets.REC / mf.MANIFEST_NAME)
    assert old.reduction is None
    raw = {**old.model_dump(by_alias=True), "reduction": {"kind": "ctc_greedy", "source": "x", "classes": 5}}
    with pytest.raises(ConfigError, match="ctc_greedy reduction's outputs"):
        mf.parse(raw, "test")


def test_no_reduce_and_other_tasks_keep_their_outputs(asset_root, tmp_path):
    det = _package(asset_root, tmp_path, assets.DET, "dymshape")
    cls = _package(asset_root, tmp_path, assets.TEXTLINE_ORI, "dymshape")
    for folder in (det, cls):
        man, source = (mf.load(f / mf.MANIFEST_NAME) for f in (folder, asset_root / "om" / folder.name))
        assert man.reduction is None and man.outputs == source.outputs
    shutil.rmtree(det)
