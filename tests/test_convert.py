"""paddlex-npu convert / inspect / doctor on real PP-OCRv4 Paddle folders; the ATC commands; bad inputs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from compat import runner_of
from conftest import CHINESE, ENGLISH, NPU_HPI, norm, run_ocr

from paddlex_npu import assets
from paddlex_npu import manifest as mf
from paddlex_npu.convert import ConvertError, atc_args, check_against_paddle, convert, onnx_inputs
from paddlex_npu.errors import ConfigError, ModelFileError
from paddlex_npu.planner import padding_ratio, plan_gears


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
    for model, shape in ((assets.DET, (1, 3, 320, 480)), (assets.REC, (2, 3, 48, 400))):
        x = np.random.default_rng(1).random(shape, dtype=np.float32)
        assert check_against_paddle(paddle_only / model, packages / model / "inference.onnx", {"x": x}) <= 1e-4


def test_packages_hold_what_the_route_needs(packages):
    det = mf.load(packages / assets.DET / mf.MANIFEST_NAME)
    rec = mf.load(packages / assets.REC / mf.MANIFEST_NAME)
    assert det.mode == "dymshape" and det.input_ranges()["x"] == [(1, 1), (3, 3), (32, 960), (32, 960)]
    assert rec.mode == "dymdims" and rec.inputs[0].shape == [-1, 3, 48, -1] and [6, 3200] in rec.gears
    for folder, man in ((packages / assets.DET, det), (packages / assets.REC, rec)):
        assert sorted(p.name for p in folder.iterdir()) == ["atc.sh", "inference.om.json", "inference.onnx",
                                                           "inference.yml"]  # fmt: skip
        assert man.onnx_sha256 == mf.sha256(folder / "inference.onnx")
        assert man.atc_command.startswith("atc --framework=5 ")
    assert not list(packages.glob(".*partial*"))


def test_converted_packages_read_text_on_the_npu_route(packages, images):
    from paddlex import create_pipeline

    p = create_pipeline(config=assets.ocr_pipeline_config(packages), device="npu:0", use_hpip=True,
                        hpi_config=NPU_HPI)  # fmt: skip
    try:
        assert runner_of(p.text_det_model).mode == "dymshape" and runner_of(p.text_rec_model).mode == "dymdims"
        got = run_ocr(p, {"english": images["english"], "chinese": images["chinese"]})
    finally:
        p.close()
    assert norm(got["english"]["texts"]) == norm(ENGLISH)
    assert got["chinese"]["texts"] == CHINESE


ATC = re.compile(
    r"^atc --framework=5 --model=\S+\.onnx --output=\S+ --soc_version=Ascend\w+ --input_format=(NCHW|ND) "
    r"--input_shape=\w+:[-\d~,]+(;\w+:[-\d~,]+)*"
    r"( --dynamic_batch_size=\d+(,\d+)+| --dynamic_image_size=\d+,\d+(;\d+,\d+)+"
    r"| --dynamic_dims=\d+(,\d+)*(;\d+(,\d+)*)+)?"
    r" --precision_mode_v2=(fp16|origin)$"
)


@pytest.mark.parametrize("manifest, expect", [
    ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 3, -1, -1],
                                      "range": [[1, 1], [3, 3], [32, 960], [32, 960]]}]},
     "--input_shape=x:1,3,32~960,32~960"),
    ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}]}, "--input_shape=x:-1,3,48,-1"),
    ({"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 224, 224]}], "gears": [[1], [2], [4], [8]]},
     "--input_shape=x:-1,3,224,224 --dynamic_batch_size=1,2,4,8"),
    ({"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[480, 640], [960, 960]]},
     "--input_shape=x:1,3,-1,-1 --dynamic_image_size=480,640;960,960"),
    ({"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], "gears": [[1, 320], [6, 3200]]},
     "--input_format=ND --input_shape=x:-1,3,48,-1 --dynamic_dims=1,320;6,3200"),
    ({"mode": "static", "inputs": [{"name": "image", "shape": [1, 3, 800, 608]},
                                   {"name": "scale_factor", "shape": [1, 2]}]},
     "--input_format=ND --input_shape=image:1,3,800,608;scale_factor:1,2"),
])  # fmt: skip
def test_atc_commands_follow_atc_syntax(manifest, expect):
    man = mf.parse(manifest, "test")
    command = shlex.join(atc_args(Path("m/inference.onnx"), Path("out/inference"), "Ascend310P3", man, "fp16"))
    plain = command.replace("'", "")
    assert ATC.match(plain), plain
    assert expect in plain


def test_planner_beats_a_single_shape():
    rng = np.random.default_rng(0)
    samples = [[int(rng.integers(2, 30)) * 32, int(rng.integers(4, 30)) * 32] for _ in range(200)]
    gears = plan_gears(samples, 6)
    top = [[max(h for h, _ in samples), max(w for _, w in samples)]]
    assert 2 <= len(gears) <= 6 and top[0] in gears
    assert padding_ratio(samples, gears) < 0.75 * padding_ratio(samples, top)
    with pytest.raises(ConfigError, match="ATC accepts 2 to 100 gears"):
        plan_gears(samples, 101)


def test_gears_auto_from_real_preprocessing(paddle_only, packages, images, tmp_path, capsys):
    samples = tmp_path / "samples"
    samples.mkdir()
    for key, path in images.items():
        shutil.copyfile(path, samples / f"{key}.png")
    src = tmp_path / "src"
    shutil.copytree(packages / assets.DET, src, ignore=shutil.ignore_patterns("*.json", "atc.sh"))
    out = convert(src, tmp_path / "det_auto", "Ascend310B1", "gears", run=False, gears="auto", samples=samples,
                  max_gears=3)  # fmt: skip
    man = mf.load(out / mf.MANIFEST_NAME)
    assert man.mode == "dymhw" and 2 <= len(man.gears) <= 3
    assert "planned" in capsys.readouterr().out


def test_bad_inputs_give_clear_errors_and_no_package(paddle_only, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "inference.yml").write_text("Global:\n  model_name: PP-OCRv4_mobile_det\n")
    cases = [
        (empty, {}, ModelFileError, "has no model to convert"),
        (tmp_path / "missing", {}, ModelFileError, "does not exist"),
        (paddle_only / assets.DET, {"mode": "gears", "gears": "640,640"}, ConfigError, "ATC accepts 2 to 100"),
        (paddle_only / assets.DET, {"mode": "gears", "gears": "auto", "samples": tmp_path, "max_gears": 1},
         ConfigError, "ATC accepts 2 to 100"),
        (paddle_only / assets.DET, {"mode": "dymshape", "soc": "Ascend310"}, ConfigError, "Ascend310 has no dynamic"),
    ]  # fmt: skip
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
    (bin_dir / "atc").write_text("#!/bin/sh\necho 'E10001: Value [x] for parameter [--input_shape] is invalid'\n"
                                 "exit 1\n")
    (bin_dir / "atc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with pytest.raises(ConvertError, match="(?s)atc failed \\(exit 1\\).*E10001"):
        convert(packages / assets.DET, tmp_path / "out", "Ascend310P3")
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_inspect_reports_mode_gears_and_checksum(packages, tmp_path):
    out = subprocess.run([sys.executable, "-m", "paddlex_npu.cli", "inspect", str(packages / assets.REC)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "mode        dymdims" in out.stdout and "dymdims gears x:1,3,48,320" in out.stdout
    assert "[✓] checksum" in out.stdout and "soc_version Ascend310B1" in out.stdout
    tampered = tmp_path / "tampered"
    shutil.copytree(packages / assets.DET, tampered)
    with open(tampered / "inference.onnx", "ab") as f:
        f.write(b"\0")
    out = subprocess.run([sys.executable, "-m", "paddlex_npu.cli", "inspect", str(tampered)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert "[x] checksum" in out.stdout and "does NOT match" in out.stdout
    assert onnx_inputs(packages / assets.DET / "inference.onnx")[0][0] == "x"


def test_doctor_says_what_is_missing_and_fails_without_an_npu():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND")}
    out = subprocess.run([sys.executable, "-m", "paddlex_npu.cli", "doctor"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 1
    assert "[x] CANN environment" in out.stdout and "set_env.sh" in out.stdout
    assert "[x] ais_bench" in out.stdout and "fix: install Ascend's ais_bench" in out.stdout
    assert "[✓] PaddleX" in out.stdout and "PADDLEX_NPU_RUNTIME=reference" in out.stdout


def test_fixed_size_classifiers_vary_the_batch_only(asset_root, tmp_path):
    """ONNX reused from the folder; H, W taken from the classifier's own preprocessing in inference.yml."""
    for model, hw in ((assets.TEXTLINE_ORI, [48, 192]), (assets.DOC_ORI, [224, 224])):
        out = convert(asset_root / "om" / model, tmp_path / model, "Ascend310B1", "gears", run=False)
        man = mf.load(out / mf.MANIFEST_NAME)
        assert man.mode == "dymbatch" and man.inputs[0].shape == [-1, 3, *hw], model
        assert "--dynamic_batch_size=1,2,4,6" in man.atc_command
        dym = convert(asset_root / "om" / model, tmp_path / f"{model}_dym", "Ascend310P3", run=False)
        assert mf.load(dym / mf.MANIFEST_NAME).input_ranges()["x"] == [(1, 6), (3, 3), (hw[0],) * 2, (hw[1],) * 2]
