"""A new user's first hour (issue 32.3-4): what the commands say when the first run goes wrong, on real parts.

serve refuses a port in use before loading anything; a worker's start-up failure has its cause and fix on the
first and last lines; a SubModule without model_dir and an unknown pipeline are one line each; assets writes the
sample page, its lines and ocr.yaml with its time; benchmark keeps the routes that finished at Ctrl-C and states
its expected time; capacity says when its self-check fails; no project target reaches the user's output.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from paddlex_npu.cli import main
from paddlex_npu.cli.serve import cause_first_and_last
from paddlex_npu.errors import ConfigError, WorkerStartError
from paddlex_npu.paddlex.pipelines import check_route_config, load_config
from paddlex_npu.samples import assets

DATA = Path(__file__).resolve().parents[1] / "data"


def _cli(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "paddlex_npu.cli", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def ocr_yaml(asset_root, tmp_path) -> Path:
    path = tmp_path / "ocr.yaml"
    path.write_text(yaml.safe_dump(assets.ocr_pipeline_config(asset_root / "om", rec=assets.REC_V5)))
    return path


def test_serve_refuses_a_port_in_use_before_loading_anything(ocr_yaml):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = _cli("serve", str(ocr_yaml), "--port", str(port), "--runtime", "reference")
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"paddlex-npu serve: cannot listen on 127.0.0.1:{port}" in out.stderr and "another --port" in out.stderr
    assert "loading the pipeline" not in out.stdout and "Creating model" not in out.stderr, out.stderr[-2000:]


def test_a_start_up_failure_has_its_cause_and_fix_first_and_last(ocr_yaml):
    from paddlex_npu.serve.workers import create_pool

    pool = create_pool(load_config(ocr_yaml), [0], 1, runtime="ais_bench")  # no NPU here, no inference.om
    with pytest.raises(WorkerStartError) as caught:
        pool.start(timeout=600)
    pool.close(wait=False)
    raw = str(caught.value)
    lines = cause_first_and_last(raw).splitlines()
    head = "a worker on npu:0 could not create the pipeline: ModelFileError: model folder "
    assert lines[0].startswith(head), lines[0]
    assert "PADDLEX_NPU_RUNTIME=reference" in lines[0] and lines[-1] == lines[0].split("pipeline: ", 1)[1]
    assert "PADDLEX_NPU_RUNTIME=reference" not in raw.splitlines()[0]  # the pool's own summary: the atc example


def test_a_submodule_without_model_dir_is_one_line_naming_the_fix(ocr_yaml):
    config = load_config(ocr_yaml)
    check_route_config(config)
    broken = copy.deepcopy(config)
    del broken["SubModules"]["TextRecognition"]["model_dir"]
    with pytest.raises(ConfigError) as caught:
        check_route_config(broken, "ocr.yaml")
    text = str(caught.value)
    assert "\n" not in text and "SubModules.TextRecognition has no model_dir" in text and "OM package" in text


def test_an_unknown_pipeline_name_is_one_line_with_the_names(ocr_yaml):
    config = load_config(ocr_yaml)
    config["pipeline_name"] = "ocr"
    with pytest.raises(ConfigError) as caught:
        check_route_config(config, "ocr.yaml")
    text = str(caught.value)
    assert "\n" not in text and "did you mean 'OCR'" in text and "table_recognition" in text


def test_serve_says_it_for_a_yaml_without_model_dir(ocr_yaml, tmp_path):
    pytest.importorskip("fastapi", reason="serve needs the serving extra (checked before the config)")
    config = load_config(ocr_yaml)
    del config["SubModules"]["TextDetection"]["model_dir"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(config))
    out = _cli("serve", str(broken), "--port", "0", "--runtime", "reference")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith(f"paddlex-npu serve: {broken}: SubModules.TextDetection")


def test_assets_writes_the_sample_page_its_lines_and_ocr_yaml(asset_root, tmp_path, capsys):
    assert main(["assets", "--samples", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == str(asset_root) and "assets ready in" in err
    assert (tmp_path / "page.png").stat().st_size > 1000 and len(list((tmp_path / "lines").glob("*.png"))) == 3
    config = load_config(tmp_path / "ocr.yaml")
    check_route_config(config)
    assert Path(config["SubModules"]["TextRecognition"]["model_dir"]).parent == asset_root / "om"


def test_benchmark_keeps_the_routes_that_finished_at_ctrl_c(asset_root, tmp_path):
    from paddlex_npu.perf.benchmark import INTERRUPTED, SERIAL, run_benchmark

    page = assets.render_pages(tmp_path, 1)[0]

    def interrupt_after_serial(route: str, n: int) -> None:
        if route != SERIAL:
            raise KeyboardInterrupt

    config = assets.ocr_pipeline_config(asset_root / "om")
    env = {"PADDLEX_NPU_SIM_LOCKS": str(tmp_path / "locks"), "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")}
    report = run_benchmark(config, [str(page)], workers=[1], repeat=1, env=env, progress=interrupt_after_serial)
    assert [r.route for r in report.routes] == [SERIAL] and INTERRUPTED in report.skipped
    assert report.routes[0].images_per_s > 0


def test_benchmark_states_its_expected_time_and_quick_shortens_it():
    from paddlex_npu.cli import build_parser
    from paddlex_npu.cli.perf import _apply_quick, expected_time

    full = build_parser().parse_args(["benchmark"])
    quick = build_parser().parse_args(["benchmark", "--quick", "--repeat", "2"])
    _apply_quick(full)
    _apply_quick(quick)
    assert (quick.pages, quick.repeat, quick.workers, quick.engines) == (2, 2, [1, 2], "onnxruntime")
    cpu = {e: None for e in full.engines.split(",")}
    minutes = [
        int(expected_time(a, a.pages, c).split("about ")[1].split(" min")[0]) for a, c in ((full, cpu), (quick, {}))
    ]
    assert minutes[0] > minutes[1] >= 1


def test_capacity_says_when_its_self_check_fails(tmp_path, capsys):
    assert main(["capacity", str(DATA / "benchmark-2cores-20261201.json")]) == 0
    assert "self-check passed" in capsys.readouterr().out
    data = json.loads((DATA / "benchmark-2cores-20261201.json").read_text())
    for route in data["routes"]:
        if route["route"] != "NPU serial":
            route["images_per_s"] *= 2  # measured twice what the planner predicts from the same costs
    off = tmp_path / "off.json"
    off.write_text(json.dumps(data))
    assert main(["capacity", str(off)]) == 0
    out = capsys.readouterr().out
    assert "self-check FAILED" in out and "do not trust the predictions" in out and "target" not in out


def test_no_project_target_in_the_benchmark_report(capsys):
    from paddlex_npu.cli.perf import _print_report
    from paddlex_npu.perf.benchmark import BenchmarkReport

    report = BenchmarkReport.from_dict(json.loads((DATA / "benchmark-2cores-20261201.json").read_text()))
    assert any("target" in line for line in report.summary_lines())  # the library's lines hold them
    _print_report(report)
    out = capsys.readouterr().out
    assert "bound" in out and "target" not in out


def test_convert_of_a_file_says_it_is_a_file(tmp_path, capsys):
    page = tmp_path / "page.png"
    page.write_bytes(b"\x89PNG\r\n")
    assert main(["convert", str(page), "-o", str(tmp_path / "out"), "--soc-version", "Ascend310P3"]) == 1
    err = capsys.readouterr().err
    assert f"{page} is a file, not a model folder" in err and "does not exist" not in err


def test_a_plain_onnx_folder_on_the_reference_runtime_is_said_to_be_no_om_package(asset_root, tmp_path, caplog):
    import shutil

    from paddlex_npu.om.package import resolve_om_package

    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("inference.yml", "inference.onnx"):
        shutil.copyfile(asset_root / "om" / "PP-OCRv4_mobile_rec" / name, plain / name)
        (plain / name).chmod(0o644)
    with caplog.at_level("WARNING", logger="paddlex_npu"):
        resolve_om_package(asset_root / "om" / "PP-OCRv4_mobile_rec", "reference")  # a package: nothing said
        assert not caplog.records
        resolve_om_package(plain, "reference")
    assert f"{plain} is no OM package" in caplog.text and "paddlex-npu convert" in caplog.text
