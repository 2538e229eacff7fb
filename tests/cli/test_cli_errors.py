"""The command line refuses wrong arguments and paths up front: a message that names the cause and the fix, a
non-zero exit, never a traceback (argparse's own errors exit 2, paddlex-npu's exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def _refused(out: subprocess.CompletedProcess, code: int) -> str:
    """stderr of a run that was refused with ``code`` and no traceback."""
    assert out.returncode == code, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "a"], "argument --workers: 'a' is not a whole number"),
        (["--workers", "0"], "argument --workers: 0 is below 1"),
        (["--workers", "1,,0"], "argument --workers: 0 is below 1"),
        (["--workers", ","], "argument --workers: ',' holds no number"),
        (["--repeat", "0"], "argument --repeat: 0 is below 1"),
        (["--pages", "-2"], "argument --pages: -2 is below 1"),
        (["--serve", "--concurrency", "0"], "argument --concurrency: 0 is below 1"),
        (["--serve", "--concurrency", "4,x"], "argument --concurrency: 'x' is not a whole number"),
        (["--serve", "--seconds", "0"], "argument --seconds: 0 seconds: give a number above 0"),
        (["--serve", "--seconds", "nan"], "argument --seconds: nan seconds: give a number above 0"),
        (["--serve", "--warmup", "-1"], "argument --warmup: -1 seconds: give a number >= 0"),
        (["--serve", "--instances", "0"], "argument --instances: 0 is below 1"),
    ],
)
def test_benchmark_refuses_bad_numbers_before_running(args, message):
    assert f"paddlex-npu benchmark: error: {message}" in _refused(_cli("benchmark", *args), 2)


def test_benchmark_names_a_model_folder_that_does_not_exist(tmp_path):
    missing = tmp_path / "nonexist"
    err = _refused(_cli("benchmark", "--model", str(missing)), 1)
    assert err.startswith(f"paddlex-npu benchmark: model folder {missing} does not exist: give the folder of an OM")


def test_benchmark_names_a_model_folder_without_inference_yml(tmp_path):
    err = _refused(_cli("benchmark", "--model", str(tmp_path)), 1)
    assert f"{tmp_path} holds no inference.yml, so it is no PaddleX model folder" in err


def test_benchmark_names_missing_inputs_and_pipeline(tmp_path):
    err = _refused(_cli("benchmark", "--inputs", str(tmp_path / "pages")), 1)
    assert f"paddlex-npu benchmark: --inputs {tmp_path / 'pages'} is no folder" in err
    err = _refused(_cli("benchmark", "--inputs", str(tmp_path)), 1)
    assert f"--inputs {tmp_path} holds no files" in err
    err = _refused(_cli("benchmark", "--serve", "--pipeline", str(tmp_path / "ocr.yaml")), 1)
    assert f"paddlex-npu benchmark --serve: --pipeline {tmp_path / 'ocr.yaml'} does not exist" in err
    err = _refused(_cli("serve-bench", "--pipeline", str(tmp_path / "ocr.yaml")), 1)
    assert f"paddlex-npu serve-bench: --pipeline {tmp_path / 'ocr.yaml'} does not exist" in err


def test_benchmark_names_a_pipeline_paddlex_does_not_know_for_every_route(tmp_path):
    """No route can run: each says why (PaddleX's own refusal), and the command exits 1 without a traceback."""
    env = {**os.environ, "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")}
    args = ("--pages", "1", "--repeat", "1", "--workers", "1", "--engines", "onnxruntime", "--no-progress")
    err = _refused(_cli("benchmark", "--pipeline", "NOPE", *args, env=env), 1)
    assert "paddlex-npu benchmark: no route could run here (NPU serial: Exception: The pipeline (NOPE)" in err
    assert "PaddleX onnxruntime (CPU): Exception: The pipeline (NOPE) does not exist!" in err


def test_benchmark_refuses_package_choices_with_a_pipeline_of_its_own(tmp_path):
    err = _refused(_cli("benchmark", "--pipeline", "OCR", "--rec", "PP-OCRv6_small_rec"), 1)
    assert "paddlex-npu benchmark: --no-reduce, --no-device-normalise, --det and --rec choose the bundled" in err


def test_serve_bench_refuses_package_choices_with_a_pipeline_of_its_own(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # where a work folder would be made
    err = _refused(_cli("serve-bench", "--pipeline", "OCR", "--no-reduce", env=env), 1)
    assert "paddlex-npu serve-bench: --no-reduce, --no-device-normalise, --det and --rec choose the bundled" in err
    assert "convert your models with `paddlex-npu convert --no-reduce`" in err
    _refused(_cli("serve-bench", "--pipeline", str(tmp_path / "missing.yaml"), env=env), 1)
    assert not list(tmp_path.glob("paddlex-npu-serve-load-*")), "a refused run left its work folder behind"


@pytest.mark.parametrize("command", [["serve-bench"], ["benchmark", "--serve"]])
def test_serve_bench_and_its_alias_refuse_bad_numbers(command):
    err = _refused(_cli(*command, "--concurrency", "0"), 2)
    assert "argument --concurrency: 0 is below 1" in err


def _folder(root: Path, *names: str) -> Path:
    root.mkdir()
    for name in names:
        (root / name).write_bytes(b"x")
    return root


@pytest.mark.parametrize(
    "files",
    [
        ("inference.yml", "inference.pdmodel", "inference.pdiparams"),
        ("inference.yml", "inference.json", "inference.pdiparams"),  # PIR
    ],
)
def test_inspect_says_a_paddlex_model_folder_is_no_om_package_and_how_to_convert_it(tmp_path, files):
    folder = _folder(tmp_path / "model", *files)
    out = _cli("inspect", str(folder))
    err = _refused(out, 1)
    assert f"paddlex-npu inspect: {folder} is a PaddleX model folder" in err and "not an OM package" in err
    assert f"`paddlex-npu convert {folder} -o OUT --soc-version SOC`" in err
    assert "manifest" not in out.stdout and "dymshape" not in out.stdout + err


def test_inspect_points_a_folder_with_onnx_at_the_onnx(tmp_path):
    folder = _folder(tmp_path / "model", "inference.yml", "inference.pdmodel", "inference.pdiparams", "inference.onnx")
    err = _refused(_cli("inspect", str(folder)), 1)
    assert "is a PaddleX model folder" in err and f"`paddlex-npu inspect {folder / 'inference.onnx'}`" in err


def test_inspect_names_a_path_that_does_not_exist_and_a_folder_of_something_else(tmp_path):
    err = _refused(_cli("inspect", str(tmp_path / "nonexist")), 1)
    assert err.startswith(f"paddlex-npu inspect: {tmp_path / 'nonexist'} does not exist")
    folder = _folder(tmp_path / "photos", "a.png")
    err = _refused(_cli("inspect", str(folder)), 1)
    assert f"{folder} is not an OM package: it holds neither inference.om nor inference.om.json" in err
    assert "(it holds: a.png)" in err


def test_inspect_still_reads_an_om_package_without_a_manifest(tmp_path):
    folder = _folder(tmp_path / "pkg", "inference.yml", "inference.om")
    out = _cli("inspect", str(folder))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"OM package {folder}") and "no manifest: the OM is taken as dymshape" in out.stdout


def test_selftest_names_an_om_root_that_does_not_exist(tmp_path):
    out = _cli("selftest", "--om-root", str(tmp_path / "nonexist"))
    err = _refused(out, 1)
    assert err.startswith(f"paddlex-npu selftest: the OM root {tmp_path / 'nonexist'} does not exist")
    assert "subfolders named PP-OCRv4_mobile_det and PP-OCRv4_mobile_rec" in err
    assert out.stdout == ""  # no per-model check lists missing files


def test_selftest_names_the_missing_model_subfolder(tmp_path):
    out = _cli("selftest", "--om-root", str(tmp_path))
    assert out.returncode == 1, out.stderr
    for model in ("PP-OCRv4_mobile_det", "PP-OCRv4_mobile_rec"):
        assert f"[FAIL] package {model}: {tmp_path} has no {model} folder: give a folder holding" in out.stdout


def test_the_docs_name_the_selftest_model_subfolders():
    from paddlex_npu.reports.selftest import MODELS

    page = (REPO / "docs" / "hardware-acceptance.md").read_text(encoding="utf-8")
    assert "--om-root DIR" in page and "-o DIR/$m" in page
    for model in MODELS:
        assert f"`{model}`" in page


def test_info_flags_an_invalid_runtime():
    out = _cli("info", env={**os.environ, "PADDLEX_NPU_RUNTIME": "cpu"})
    assert out.returncode == 1, out.stderr
    flagged = "- runtime: cpu [x] INVALID: PADDLEX_NPU_RUNTIME=cpu is none of ais_bench, reference, simulated"
    assert flagged in out.stdout


def test_info_shows_a_valid_runtime():
    out = _cli("info", env={**os.environ, "PADDLEX_NPU_RUNTIME": "reference"})
    assert out.returncode == 0, out.stderr
    assert "- runtime: reference (" in out.stdout and "INVALID" not in out.stdout


def test_serve_without_the_serving_extra_names_the_extra(tmp_path):
    """`pip install paddlex-npu` brings no web server: `serve` says which extra does, before reading anything."""
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('fastapi', 'uvicorn'):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
from paddlex_npu import cli
sys.exit(cli.main(['serve', 'missing.yaml']))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    err = _refused(out, 1)
    assert err.startswith("paddlex-npu serve: paddlex-npu serve needs the Python package fastapi"), err
    assert "pip install 'paddlex-npu[serving]'" in err
