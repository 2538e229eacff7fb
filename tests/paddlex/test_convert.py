"""paddlex-npu convert / inspect / doctor on real PP-OCRv4 Paddle folders; the ATC commands; bad inputs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.build.export import OnnxModel
from paddlex_npu.errors import ConfigError, ConvertError, ModelFileError
from paddlex_npu.om import manifest as mf
from paddlex_npu.samples import assets
from tests.helpers import CHINESE, ENGLISH, NPU_HPI, norm, run_ocr
from tests.paddlex.compat import ocr_modes_and_texts


@pytest.fixture(scope="module")
def paddle_only(asset_root, tmp_path_factory) -> Path:
    """PaddleX folders with only inference.yml + the Paddle model files (what users download)."""
    root = tmp_path_factory.mktemp("paddle_only")
    for model in (assets.DET, assets.REC):
        (root / model).mkdir()
        for name in ("inference.yml", "inference.pdmodel", "inference.pdiparams"):
            shutil.copyfile(asset_root / "paddle" / model / name, root / model / name)
    return root


@pytest.fixture(scope="module")
def packages(paddle_only, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packages")
    convert(paddle_only / assets.DET, out / assets.DET, "Ascend310P3", "dymshape", run=False)
    convert(paddle_only / assets.REC, out / assets.REC, "Ascend310B1", "gears", run=False)
    return out


def test_exported_onnx_matches_paddle(packages, paddle_only):
    from paddlex_npu.build.export import _paddle_outputs

    # the detection package's ONNX takes 8-bit pixels and normalises them itself, as PaddleX's NormalizeImage
    norm = mf.load(packages / assets.DET / mf.MANIFEST_NAME).normalisation
    pixels = np.random.default_rng(1).integers(0, 256, (1, 3, 320, 480), dtype=np.uint8)
    x = pixels.astype(np.float32) * np.float32(norm.alpha).reshape(1, 3, 1, 1) + np.float32(norm.beta).reshape(
        1, 3, 1, 1
    )
    (want,) = _paddle_outputs(paddle_only / assets.DET / "inference.pdmodel", paddle_only / assets.DET, {"x": x})
    (got,) = OnnxModel.open(packages / assets.DET / "inference.onnx").session.run(None, {"x": pixels})
    assert np.abs(got - want).max() <= 1e-4
    # the recognition package's ONNX carries the CTC reduction: argmax and max of Paddle's [N, T, classes]; it takes
    # 8-bit lines and their mask row (the second line 250 px wide, PaddleX's 0.0 after it)
    lines = np.zeros((2, 3, 49, 400), np.uint8)
    lines[:, :, :48] = np.random.default_rng(1).integers(0, 256, (2, 3, 48, 400), dtype=np.uint8)
    lines[1, :, :48, 250:] = 0
    lines[0, 0, 48], lines[1, 0, 48, :250] = 1, 1
    x = (lines[:, :, :48].astype(np.float32) / 255 - np.float32(0.5)) / np.float32(0.5)
    x[1, :, :, 250:] = 0.0
    (full,) = _paddle_outputs(paddle_only / assets.REC / "inference.pdmodel", paddle_only / assets.REC, {"x": x})
    indices, scores = OnnxModel.open(packages / assets.REC / "inference.onnx").session.run(None, {"x": lines})
    assert indices.dtype == np.int32 and indices.shape == scores.shape == full.shape[:2]
    assert np.mean(indices == full.argmax(-1)) >= 0.99 and np.abs(scores - full.max(-1)).max() <= 1e-4


def test_packages_hold_what_the_route_needs(packages):
    det = mf.load(packages / assets.DET / mf.MANIFEST_NAME)
    rec = mf.load(packages / assets.REC / mf.MANIFEST_NAME)
    # up to max_side_limit: what PaddleX's OCR pipelines (limit_type min) feed detection
    assert det.mode == "dymshape" and det.input_ranges()["x"] == [(1, 1), (3, 3), (32, 4000), (32, 4000)]
    assert rec.mode == "dymdims" and rec.inputs[0].shape == [-1, 3, 49, -1] and [6, 3200] in rec.gears
    for folder, man in ((packages / assets.DET, det), (packages / assets.REC, rec)):
        assert sorted(p.name for p in folder.iterdir()) == [
            "atc.sh",
            "inference.om.json",
            "inference.onnx",
            "inference.yml",
        ]
        assert man.onnx_sha256 == mf.sha256(folder / "inference.onnx")
        assert man.atc_command.startswith("atc --framework=5 ")
    assert not list(packages.glob(".*partial*"))


def test_converted_packages_read_text_on_the_npu_route(packages, images):
    modes, got = ocr_modes_and_texts(packages, images)
    assert modes == ("dymshape", "dymdims")
    assert norm(got["english"]["texts"]) == norm(ENGLISH)
    assert got["chinese"]["texts"] == CHINESE


def test_converted_dymshape_det_takes_the_pages_paddlex_default_pipeline_sends(asset_root, packages, tmp_path):
    """PaddleX's default OCR settings (limit_side_len 64, limit_type min, max_side_limit 4000) feed detection a
    page at its own size: the converted det's ranges reach max_side_limit, so a 1280-wide page runs as it is."""
    from paddlex import create_pipeline
    from PIL import Image

    page = assets.render_text_image(["Wide pages reach detection at their own size 2026"], tmp_path / "w.png", size=44)
    assert Image.open(page).size[0] > 1200  # above the model's own 960: the old ranges refused it
    root = tmp_path / "om"
    shutil.copytree(asset_root / "om", root)
    shutil.rmtree(root / assets.DET)
    shutil.copytree(packages / assets.DET, root / assets.DET)
    default = {"limit_side_len": 64, "limit_type": "min", "max_side_limit": 4000}
    got = {}
    hpi = {**NPU_HPI, "backend_config": {**NPU_HPI["backend_config"], "oversize": "error"}}  # no fit: runs as is
    for name, models in (("bundled", asset_root / "om"), ("converted", root)):
        config = assets.ocr_pipeline_config(models, **default)
        p = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=hpi)
        try:
            got[name] = run_ocr(p, {"w": page})["w"]
        finally:
            p.close()
    assert got["converted"]["texts"] == got["bundled"]["texts"] and len(got["bundled"]["texts"]) == 1
    np.testing.assert_allclose(got["converted"]["boxes"], got["bundled"]["boxes"], atol=1)


def test_gears_auto_from_real_preprocessing(paddle_only, packages, images, tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    for key, path in images.items():
        shutil.copyfile(path, samples / f"{key}.png")
    src = tmp_path / "src"
    shutil.copytree(packages / assets.DET, src, ignore=shutil.ignore_patterns("*.json", "atc.sh"))
    result = convert(
        src,
        tmp_path / "det_auto",
        "Ascend310B1",
        "gears",
        run=False,
        gears="auto",
        samples=samples,
        max_gears=3,
        export_env="auto",
    )
    man = mf.load(result.package / mf.MANIFEST_NAME)
    assert man.mode == "dymhw" and 2 <= len(man.gears) <= 3
    assert any(n.startswith("planned") and "padded/real" in n for n in result.notes)
    assert any("--export-env auto was not used" in n and "has its inference.onnx" in n for n in result.notes)


@pytest.mark.parametrize(
    "options, says",
    [
        (
            {"mode": "gears", "gears": "641,640;960,960"},
            "the route would refuse at load: .*x:1,3,641,640 has H=641, not a multiple of 32",
        ),
        ({"mode": "static", "input_shape": "x:1,3,641,640"}, "static gear x:1,3,641,640 has H=641"),
        ({"mode": "dymshape", "input_shape": "x:1,3,-1"}, "x has 3 dims there and 4 in the model"),
    ],
    ids=["gear-not-32", "static-not-32", "rank"],
)
def test_options_the_route_would_refuse_at_load_are_refused_before_atc(packages, tmp_path, options, says):
    """convert writes no package that its own loader refuses: the load-time checks run before ATC."""
    src = tmp_path / "src"
    shutil.copytree(packages / assets.DET, src, ignore=shutil.ignore_patterns("*.json", "atc.sh"))
    mode = options.pop("mode")
    with pytest.raises(ConfigError, match=says):
        convert(src, tmp_path / "out", "Ascend310P3", mode, run=False, **options)
    assert not (tmp_path / "out").exists()


def test_bad_inputs_give_clear_errors_and_no_package(paddle_only, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "inference.yml").write_text("Global:\n  model_name: PP-OCRv4_mobile_det\n")
    cases = [
        (empty, {}, ModelFileError, "has no model to convert"),
        (tmp_path / "missing", {}, ModelFileError, "does not exist"),
        (paddle_only / assets.DET, {"mode": "gears", "gears": "640,640"}, ConfigError, "ATC accepts 2 to 100"),
        (
            paddle_only / assets.DET,
            {"mode": "gears", "gears": "auto", "samples": tmp_path, "max_gears": 1},
            ConfigError,
            "ATC accepts 2 to 100",
        ),
        (paddle_only / assets.DET, {"mode": "dymshape", "soc": "Ascend310"}, ConfigError, "Ascend310 has no dynamic"),
    ]
    for i, (src, kw, exc, match) in enumerate(cases):
        soc = kw.pop("soc", "Ascend310P3")
        with pytest.raises(exc, match=match):
            convert(src, tmp_path / f"out{i}", soc, run=False, **kw)
        assert not (tmp_path / f"out{i}").exists()
    unknown = tmp_path / "unknown"
    shutil.copytree(paddle_only / assets.DET, unknown)
    (unknown / "inference.yml").write_text("Global:\n  model_name: NotAPaddleXModel\n")
    with pytest.raises(ConvertError, match="PaddleX does not know the model 'NotAPaddleXModel'"):
        convert(unknown, tmp_path / "out_unknown", "Ascend310P3", run=False)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ConvertError, match="cannot write the package"):
        convert(paddle_only / assets.DET, blocker / "out", "Ascend310P3", run=False)
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_a_failing_atc_leaves_no_package(packages, tmp_path, monkeypatch):
    """`atc` on PATH that fails (here: exits 1): the error shows its log; nothing is left behind."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "atc").write_text(
        "#!/bin/sh\necho 'E10001: Value [x] for parameter [--input_shape] is invalid'\nexit 1\n"
    )
    (bin_dir / "atc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(ConvertError, match="(?s)atc failed \\(exit 1\\).*E10001"):
        convert(packages / assets.DET, tmp_path / "out", "Ascend310P3")
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_inspect_reports_mode_gears_and_checksum(packages, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "inspect", str(packages / assets.REC)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "mode        dymdims" in out.stdout and "dymdims gears x:1,3,49,320" in out.stdout  # mask row
    assert "[✓] checksum" in out.stdout and "soc_version Ascend310B1" in out.stdout
    assert "matches the ONNX the manifest records (no OM built yet)" in out.stdout  # no ATC here: no inference.om
    tampered = tmp_path / "tampered"
    shutil.copytree(packages / assets.DET, tampered)
    with open(tampered / "inference.onnx", "ab") as f:
        f.write(b"\0")
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "inspect", str(tampered)], capture_output=True, text=True, timeout=120
    )
    assert "[x] checksum" in out.stdout and "does NOT match" in out.stdout
    assert OnnxModel.open(packages / assets.DET / "inference.onnx").inputs[0][0] == "x"


def test_fixed_size_classifiers_vary_the_batch_only(asset_root, tmp_path):
    """ONNX reused from the folder; H, W taken from the classifier's own preprocessing in inference.yml."""
    for model, hw in ((assets.TEXTLINE_ORI, [48, 192]), (assets.DOC_ORI, [224, 224])):
        out = convert(asset_root / "om" / model, tmp_path / model, "Ascend310B1", "gears", run=False)
        man = mf.load(out.package / mf.MANIFEST_NAME)
        assert man.mode == "dymbatch" and man.inputs[0].shape == [-1, 3, *hw], model
        assert "--dynamic_batch_size=1,2,4,6" in man.atc_command
        dym = convert(asset_root / "om" / model, tmp_path / f"{model}_dym", "Ascend310P3", run=False)
        assert mf.load(dym.package / mf.MANIFEST_NAME).input_ranges()["x"] == [
            (1, 6),
            (3, 3),
            (hw[0],) * 2,
            (hw[1],) * 2,
        ]


def _no_partial(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if "partial" in p.name]


@pytest.fixture
def user_model(packages, tmp_path) -> Path:
    """A model folder as users keep it: models/det with the Paddle files beside the ONNX."""
    src = tmp_path / "models" / "det"
    shutil.copytree(packages / assets.DET, src, ignore=shutil.ignore_patterns("*.json", "atc.sh"))
    (src / "inference.pdmodel").write_bytes(b"model")
    (src / "inference.pdiparams").write_bytes(b"params")
    return src


def test_output_that_is_holds_or_is_inside_the_model_folder_is_refused(user_model, tmp_path):
    files = sorted(p.name for p in user_model.iterdir())
    link = tmp_path / "link"
    link.symlink_to(user_model)
    for out in (user_model, user_model.parent, user_model / "om", link, tmp_path / "models" / "." / "det"):
        with pytest.raises(ConvertError, match="is, holds or is inside the model folder") as err:
            convert(user_model, out, "Ascend310P3", run=False, overwrite=True)
        assert str(out) in str(err.value) and str(user_model) in str(err.value) and "Choose an -o" in str(err.value)
        assert sorted(p.name for p in user_model.iterdir()) == files
        assert (user_model / "inference.pdmodel").read_bytes() == b"model"
    assert sorted(p.name for p in user_model.parent.iterdir()) == ["det"] and _no_partial(tmp_path)


def test_overwrite_replaces_a_package_and_nothing_else(user_model, tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ConvertError, match="has no inference.om.json, so it is not a paddlex-npu package"):
        convert(user_model, other, "Ascend310P3", run=False, overwrite=True)
    assert [p.name for p in other.iterdir()] == ["notes.txt"] and _no_partial(tmp_path)

    out = tmp_path / "pkg"
    convert(user_model, out, "Ascend310P3", run=False)
    mask = os.umask(0o022)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~mask  # not mkdtemp's 0700
    with pytest.raises(ConvertError, match="exists and is not empty: choose another -o or pass --overwrite"):
        convert(user_model, out, "Ascend310B1", "gears", run=False)
    (out / "stale.txt").write_text("old")
    convert(user_model, out, "Ascend310B1", "gears", run=False, overwrite=True)
    assert mf.load(out / mf.MANIFEST_NAME).soc_version == "Ascend310B1" and not (out / "stale.txt").exists()
    assert _no_partial(tmp_path)


@pytest.mark.parametrize(
    "soc, kw, match",
    [
        ("Ascend310P3", {"max_batch": 0}, "--max-batch 0: the largest batch the OM takes must be 1 or more"),
        ("Ascend310P3", {"max_side": -100}, "--max-side -100: .* give 32 or more"),
        ("Ascend310P3", {"gears": "640,640;960,960"}, "--gears '640,640;960,960' is used by --mode gears only"),
        ("Ascend310B1", {"mode": "gears", "gears": "640,640;960,960", "max_gears": 4}, "--max-gears 4 bounds"),
        ("Ascend310B1", {"mode": "gears", "max_gears": 4}, "--max-gears 4 bounds --gears auto only"),
        ("Ascend310B1", {"mode": "gears", "samples": Path(".")}, "--samples . is used by --gears auto only"),
        ("Ascend310B1", {"mode": "gears", "gears": "auto"}, "--gears auto needs --samples DIR"),
        ("Ascend310B1", {"mode": "gears", "pipeline_config": Path("o.yaml")}, "--pipeline-config o.yaml is used by"),
        ("Ascend310B1", {"mode": "gears", "max_width": 800}, "--max-width 800 is used by --gears auto only"),
        ("Ascend310B1", {"mode": "gears", "samples_are": "lines"}, "--samples-are lines is used by --gears auto"),
        (
            "Ascend310B1",
            {"mode": "gears", "gears": "auto", "samples": Path("."), "max_width": 5000},
            "--max-width 5000: text recognition widths run from 32 to 3200",
        ),
        (
            "Ascend310B1",
            {"mode": "gears", "gears": "auto", "samples": Path("."), "det_package": Path("nowhere")},
            "--det-package nowhere has no inference.onnx",
        ),
        ("NotAChip", {}, "--soc-version 'NotAChip' is not an Ascend chip ATC builds for: use one of Ascend310, "),
        ("ascend310p3", {}, "is not an Ascend chip"),
        ("Ascend310P9", {}, "is not an Ascend chip"),
    ],
)
def test_options_that_make_a_package_that_cannot_run_are_refused_before_any_work(
    paddle_only, tmp_path, monkeypatch, soc, kw, match
):
    def no_work(*args, **kwargs):
        raise AssertionError("a temporary folder was made before the options were checked")

    monkeypatch.setattr("paddlex_npu.build.convert.tempfile.mkdtemp", no_work)
    with pytest.raises(ConfigError, match=match):
        convert(paddle_only / assets.DET, tmp_path / "out", soc, kw.pop("mode", "dymshape"), run=False, **kw)
    assert list(tmp_path.iterdir()) == []


def test_an_unreadable_sample_is_named(packages, tmp_path, images):
    samples = tmp_path / "samples"
    samples.mkdir()
    shutil.copyfile(images["english"], samples / "a.png")
    (samples / "broken.png").write_bytes(b"not an image")
    with pytest.raises(ConfigError, match="cannot use the sample input .*broken.png .*remove it from --samples"):
        convert(
            packages / assets.DET, tmp_path / "out", "Ascend310B1", "gears", run=False, gears="auto", samples=samples
        )
    assert not (tmp_path / "out").exists() and _no_partial(tmp_path)


STUB_ATC = {  # an `atc` that names its OM as ATC may (inference_<os>_<arch>.om), and one that writes nothing
    "arch_name": '#!/bin/sh\nfor a in "$@"; do case "$a" in --output=*) o="${a#--output=}";; esac; done\n'
    'echo OM > "${o}_linux_x86_64.om"\n',
    "no_om": "#!/bin/sh\necho 'ATC run success'\nexit 0\n",
}


def _stub_atc(tmp_path: Path, kind: str) -> Path:
    bin_dir = tmp_path / f"bin_{kind}"
    bin_dir.mkdir()
    (bin_dir / "atc").write_text(STUB_ATC[kind])
    (bin_dir / "atc").chmod(0o755)
    return bin_dir


def test_the_om_atc_names_by_platform_becomes_inference_om(packages, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{_stub_atc(tmp_path, 'arch_name')}:{os.environ['PATH']}")
    result = convert(packages / assets.DET, tmp_path / "out", "Ascend310P3")
    assert result.atc_ran and (tmp_path / "out" / "inference.om").read_text() == "OM\n"
    assert sorted(p.name for p in (tmp_path / "out").glob("*.om")) == ["inference.om"]


def test_atc_that_writes_no_om_fails_and_leaves_no_package(packages, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{_stub_atc(tmp_path, 'no_om')}:{os.environ['PATH']}")
    with pytest.raises(ConvertError, match="(?s)atc exited 0 but wrote no inference\\*.om.*ATC run success"):
        convert(packages / assets.DET, tmp_path / "out", "Ascend310P3")
    assert not (tmp_path / "out").exists() and _no_partial(tmp_path)


def test_atc_sh_names_the_om_and_fails_without_one(packages, tmp_path):
    out = convert(packages / assets.DET, tmp_path / "out", "Ascend310P3", run=False).package
    (out / "inference.om").write_text("an older OM")

    def atc_sh(kind: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PATH": f"{_stub_atc(tmp_path, kind)}:{os.environ['PATH']}"}
        return subprocess.run(["bash", str(out / "atc.sh")], capture_output=True, text=True, env=env, timeout=60)

    run = atc_sh("arch_name")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.glob("*.om")) == ["inference.om"] and (out / "inference.om").read_text() == "OM\n"
    run = atc_sh("no_om")
    assert run.returncode == 1 and "atc exited 0 but wrote no inference*.om" in run.stderr
    assert (out / "inference.om").read_text() == "OM\n"  # a failed build puts the previous OM back
    assert not (out / ".previous-om").exists()


def test_a_model_with_data_dependent_outputs_converts_to_dymshape_only(asset_root, tmp_path):
    """PicoDet layout (boxes [M, 6] after NMS): gears and static are refused with the reason, Ascend 310/310B
    cannot run it at all, dymshape marks boxes as data-dependent and uses ND for image + scale_factor."""
    layout = asset_root / "paddle" / assets.LAYOUT
    for mode in ("gears", "static"):
        with pytest.raises(ConvertError, match=rf"--mode {mode}: the model's outputs \['boxes'\] have data-dependent"):
            convert(layout, tmp_path / mode, "Ascend310P3", mode, run=False)
    with pytest.raises(ConvertError, match="this model cannot run on Ascend310B1"):
        convert(layout, tmp_path / "b1", "Ascend310B1", "gears", run=False)
    assert not any(p.name in ("gears", "static", "b1") for p in tmp_path.iterdir())
    out = convert(layout, tmp_path / "dym", "Ascend310P3", "dymshape", run=False)
    man = mf.load(out.package / mf.MANIFEST_NAME)
    assert man.mode == "dymshape" and man.data_dependent == ["boxes"]
    assert "--input_format=ND '--input_shape=image:1,3,800,608;scale_factor:1,2'" in out.atc_command
