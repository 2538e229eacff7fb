"""The command line: every subcommand answers --help, the version, doctor and support as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paddlex_npu.cli import COMMANDS
from paddlex_npu.samples import assets
from paddlex_npu.version import __version__


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_version():
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"paddlex-npu {__version__}"


WRAPPERS = ("paddlex", "paddleocr")  # everything after them goes to PaddleX's / PaddleOCR's own parser


@pytest.mark.parametrize("command", [c.name for c in COMMANDS if c.name not in WRAPPERS])
def test_every_subcommand_has_help_without_rst_markup(command):
    out = _cli(command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: paddlex-npu " + command)
    assert "``" not in out.stdout


def test_paddleocr_wrapper_is_paddleocrs_own_cli():
    import importlib.util

    if importlib.util.find_spec("paddleocr") is None:  # not importorskip: importing it here would import PaddleX
        pytest.skip("PaddleOCR is not installed")  # into this process, and later tests install the route afresh
    out = _cli("paddleocr", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: paddleocr"), out.stderr[-2000:]


def test_doctor_says_what_is_missing_and_fails_without_an_npu():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND")}
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "doctor"], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 1
    assert "[x] CANN environment" in out.stdout and "set_env.sh" in out.stdout
    assert "[x] ais_bench" in out.stdout and "fix: install Ascend's ais_bench" in out.stdout
    assert "[✓] PaddleX" in out.stdout and "PADDLEX_NPU_RUNTIME=reference" in out.stdout


def test_support_command_prints_the_coverage_table():
    from paddlex_npu.reports.coverage import coverage, format_table

    out = _cli("support")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith(format_table(coverage()).splitlines()[-1])


def test_selftest_without_an_npu_says_what_it_cannot_check_and_fails(tmp_path, asset_root):
    import json

    out = _cli("selftest", "--om-root", str(asset_root / "om"), "--json", str(tmp_path / "report.json"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[FAIL] ais_bench: cannot run anything on an NPU here" in out.stdout
    assert "[SKIP] route PP-OCRv4_mobile_det: ais_bench vs reference: not run: no package" in out.stdout
    assert "selftest NOT passed" in out.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] is False and report["schema"] == "paddlex-npu/selftest/1"
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["ais_bench"] == "fail" and statuses["package PP-OCRv4_mobile_rec"] == "fail"  # no inference.om
    assert all(s != "pass" for n, s in statuses.items() if n.startswith(("route", "manifest")))


@pytest.mark.once
def test_benchmark_on_a_small_input_set(tmp_path, asset_root):
    """Runs every route end to end and writes its figures and chart (no speed assertion: figures are printed,
    not tested). PaddleX's onnxruntime engine exists on 3.5+ only: on 3.4 that route is skipped with the reason."""
    import json

    from PIL import Image

    out = _cli(
        "benchmark",
        "--pages",
        "2",
        "--repeat",
        "1",
        "--rounds",
        "2",
        "--workers",
        "1",
        "--json",
        str(tmp_path / "b.json"),
        "--plot",
        str(tmp_path / "b.png"),
        env={**os.environ, "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads((tmp_path / "b.json").read_text())
    routes = [r["route"] for r in figures["routes"]] + list(figures["skipped"])
    assert routes[:2] == ["NPU serial", "NPU executor, 1 worker"]
    assert sorted(routes[2:]) == ["PaddleX onnxruntime (CPU)", "PaddleX paddle_static (CPU)"]
    assert all(r["errors"] == 0 and r["computed"] == 0 for r in figures["routes"])
    # the serial route and PaddleX's engines time one pass; the executor's round gives its worker 8 inputs
    images = [r["images"] for r in figures["routes"]]
    assert images[:2] == [2, 8] and set(images[2:]) == {2}, figures["routes"]
    for r in figures["routes"]:
        assert r["model_ms"] > 0 and r["pre_ms"] > 0 and r["post_ms"] > 0 and r["cpu_percent"] > 0, r
    assert figures["routes"][0]["device_ms"] > 0
    for r in figures["routes"][:2]:  # two interleaved rounds of the NPU routes: the lower middle one is kept
        assert len(r["rounds_images_per_s"]) == 2 and r["images_per_s"] == min(r["rounds_images_per_s"]), r
    assert figures["rounds"] == 2 and "median of 2 interleaved rounds" in out.stdout
    assert all("3.5+" in why for why in figures["skipped"].values()), figures["skipped"]
    assert "img/s" in out.stdout and "bound" in out.stdout and "%|" in out.stderr  # the progress bar
    # what the chart's header and the planner read: models with their cost model, inputs, the bound's basis
    assert sorted(figures["models"]) == ["PP-OCRv4_mobile_det", "PP-OCRv4_mobile_rec"]
    assert all(m["calls"] > 0 and m["base_ms"] > 0 for m in figures["models"].values())
    # the route convert builds by default: the recogniser reduced on the device, PaddleX's engines on its source
    assert figures["reduced"] == {"PP-OCRv4_mobile_rec": True} and figures["cpu_unreduced"] == [
        "PP-OCRv4_mobile_det",
        "PP-OCRv4_mobile_rec",
    ]
    assert figures["models"]["PP-OCRv4_mobile_rec"]["bytes_out"] < 100_000, figures["models"]  # [N, T] twice
    pcie = figures["pcie_bytes_per_image"]
    assert pcie["bytes_in"] > 0 and pcie["bytes_out"] > 0
    assert "PP-OCRv4_mobile_rec CTC output reduced on the device (as convert builds it)" in out.stdout
    assert "across PCIe per image (simulated device, all models)" in out.stdout
    assert figures["input_desc"].startswith("2 inputs, 2 images of")
    assert figures["bound_limit"] in ("device", "host CPU")
    serial = figures["routes"][0]
    assert 0 < serial["sim_overhead_ms"] and serial["host_ms"] == serial["cpu_ms"] - serial["sim_overhead_ms"]
    assert "simulated device's own host work" in out.stdout and "without the simulator's own work" in out.stdout
    assert Image.open(tmp_path / "b.png").size[0] > 800


@pytest.mark.once
def test_benchmark_gives_a_document_pipeline_the_same_breakdown(tmp_path, asset_root, table_models):
    """``--document table``: table recognition (here on one sample table) with the route's stages, device time, bytes
    across PCIe, host CPU against PaddleX's own host work, and its results (texts and the tables' HTML) equal to
    PaddleX's engine on the source models. (``--document structure`` and ``layout`` differ only in the sample
    configs, which tests/paddlex/test_documents.py runs against PaddleX's engine.)"""
    import json

    from paddlex_npu.samples.tables import sample_tables

    kind = "table"
    tables = sample_tables(tmp_path / "tables")
    (tmp_path / "merged").mkdir()
    (tmp_path / "merged" / "merged.png").write_bytes(tables["merged"].read_bytes())  # one table: a short run
    out = _cli(
        "benchmark",
        "--document",
        kind,
        "--inputs",
        str(tmp_path / "merged"),
        "--det",
        assets.DET_V6_SMALL,
        "--rec",
        assets.REC_V6_SMALL,
        "--pages",
        "1",
        "--repeat",
        "1",
        "--workers",
        "1",
        "--engines",
        "onnxruntime",
        "--no-progress",
        "--json",
        str(tmp_path / "b.json"),
        env={**os.environ, "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads((tmp_path / "b.json").read_text())
    models = {"table": ["SLANet_plus"], "structure": ["PicoDet_layout_1x"]}[kind]
    assert set(models + [assets.DET_V6_SMALL, assets.REC_V6_SMALL]) <= set(figures["models"]), figures["models"]
    assert figures["input_desc"].startswith("1 inputs")
    serial = figures["routes"][0]
    assert serial["route"] == "NPU serial" and serial["device_ms"] > 0 and serial["host_ms"] > 0
    agree = figures["agreement"]["PaddleX onnxruntime (CPU)"]
    assert agree["pages"] == agree["texts_equal"] == 1, agree
    assert "x PaddleX onnxruntime's own host work" in out.stdout and "across PCIe per image" in out.stdout


def test_benchmark_compares_paddlex_on_the_source_of_a_reduced_package(tmp_path, asset_root):
    """A pipeline YAML over packages as convert builds them (the recogniser reduced): the NPU route runs them and
    PaddleX's onnxruntime engine runs the model they were built from (its CTCLabelDecode cannot take the reduced
    outputs: TypeError: object of type 'numpy.int64' has no len())."""
    import json

    import yaml

    from paddlex_npu.perf.serve_load import ocr_packages
    from paddlex_npu.samples import assets
    from tests.paddlex.compat import LEGACY

    if LEGACY:
        pytest.skip("PaddleX's onnxruntime engine is 3.5+")
    packages = ocr_packages(asset_root, tmp_path / "packages", assets.DET, assets.REC)
    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(assets.ocr_pipeline_config(packages)))
    args = ("--pages", "1", "--repeat", "1", "--workers", "1", "--engines", "onnxruntime", "--no-progress")
    out = _cli(
        "benchmark",
        "--pipeline",
        str(pipeline),
        *args,
        "--json",
        str(tmp_path / "b.json"),
        env={**os.environ, "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads((tmp_path / "b.json").read_text())
    assert figures["skipped"] == {}, figures["skipped"]
    assert [r["route"] for r in figures["routes"]][-1] == "PaddleX onnxruntime (CPU)"
    assert figures["reduced"] == {"PP-OCRv4_mobile_rec": True} and figures["cpu_unreduced"] == [
        "PP-OCRv4_mobile_det",
        "PP-OCRv4_mobile_rec",
    ]
    assert "PaddleX's CPU engines ran the models the packages were built from" in out.stdout
    # PaddleX's engine on the source model reads the page as the route does (the reduction changes no text)
    agreement = figures["agreement"]["PaddleX onnxruntime (CPU)"]
    assert agreement["pages"] == 1 and agreement["texts_equal"] == 1 and agreement["max_box_px"] <= 1, agreement
    assert "texts equal on 1 of 1 pages" in out.stdout
    ours, theirs = figures["host_ms_vs_paddlex"]  # PaddleX's host work: its thread's CPU outside its engine
    serial = figures["routes"][0]  # the route's measured as PaddleX's is: its pipeline thread, less the simulator's
    assert 0 < theirs < figures["routes"][-1]["cpu_ms"] and ours == serial["thread_ms"] - serial["sim_overhead_ms"]
    assert 0 < ours <= serial["host_ms"]  # the process CPU (the bound's) holds the thread's and its helpers'
    assert "x PaddleX onnxruntime's own host work (pre + post + rest:" in out.stdout
    assert (packages / "PP-OCRv4_mobile_rec" / "inference.om.json").is_file()  # the user's packages untouched


def test_assets_piped_into_head_prints_the_folder_and_no_traceback(asset_root):
    """The documented `ASSETS=$(paddlex-npu assets | head -1)`: head closes the pipe after one line."""
    cmd = f"{sys.executable} -m paddlex_npu.cli assets | head -1"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == str(asset_root), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_assets_samples_piped_into_head_writes_every_file(cache, asset_root, tmp_path):
    """The quickstart's `export ASSETS=$(paddlex-npu assets --samples . | head -1)`: head closes the pipe after the
    first line; the samples are written all the same, with the model folders built from nothing (cold: a new
    assets folder, the wheels from the cache) or already there (warm: a user's second try, nothing to build)."""
    root = tmp_path / "assets" if cache == "cold" else asset_root
    cmd = f"{sys.executable} -m paddlex_npu.cli assets {root} --samples . | head -1"
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0 and out.stdout.strip() == str(root), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*") if p.is_file() and p.suffix != ".log")
    assert written == ["ocr.yaml", "page.png"] and len(list((tmp_path / "lines").glob("line-*.png"))) == 3


def test_benchmark_without_paddlepaddle_skips_that_route_and_keeps_the_others(tmp_path, asset_root):
    """paddle_static needs paddlepaddle: where it cannot be imported, that route is skipped with the reason and
    the figures of the routes that ran are still printed and written (PaddleX 3.5+: 3.0-3.4 import paddle to
    pick any predictor's default device, so they need it installed whatever the route)."""
    import json

    from tests.paddlex.compat import LEGACY

    if LEGACY:
        pytest.skip("PaddleX 3.0-3.4 import paddle for every predictor (get_default_device): paddlepaddle is required")

    code = (
        "import sys; sys.modules['paddle'] = None\n"  # `import paddle` fails in this process
        "from paddlex_npu.cli import main\n"
        f"sys.exit(main(['benchmark', '--pages', '1', '--repeat', '1', '--workers', '1', '--engines', 'paddle_static',"
        f" '--no-progress', '--json', {str(tmp_path / 'b.json')!r}]))"
    )
    env = {**os.environ, "PADDLEX_NPU_SIM_STORE": str(tmp_path / "store")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads((tmp_path / "b.json").read_text())
    assert [r["route"] for r in figures["routes"]] == ["NPU serial", "NPU executor, 1 worker"]
    why = figures["skipped"]["PaddleX paddle_static (CPU)"]
    assert "paddlepaddle is not installed: `pip install paddlepaddle`" in why
    assert "paddlepaddle is not installed" in out.stdout


def test_serve_takes_every_runtime_of_the_route(tmp_path, monkeypatch):
    """``--runtime simulated`` (what ``benchmark --serve`` runs on) reaches the workers' backend_config, which
    takes it; the server itself is not started here."""
    import importlib.util

    from paddlex_npu import cli
    from paddlex_npu.config import OMBackendConfig, validate
    from paddlex_npu.paddlex.pipelines import hpi_config
    from paddlex_npu.serve import http

    if not all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")):
        pytest.skip("serve needs the serving extra (requirements/serving.txt; .venv only)")
    seen = []
    monkeypatch.setattr(http, "serve", lambda config, options, on_ready=None: seen.append(options.server.runtime))
    pipeline = tmp_path / "ocr.yaml"
    pipeline.write_text("pipeline_name: OCR\n")
    for runtime in ("ais_bench", "reference", "simulated"):
        assert cli.main(["serve", str(pipeline), "--runtime", runtime]) == 0
    assert seen == ["ais_bench", "reference", "simulated"]
    backend = hpi_config({}, 0, "simulated")["backend_config"]
    assert validate(OMBackendConfig, backend, "backend_config").runtime == "simulated"


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(
    "kind, says",
    [
        ("missing", "does not exist: write one with `paddlex-npu triton-repo PIPELINE.yaml"),
        ("file", "is not a folder: give the folder `paddlex-npu triton-repo` wrote"),
        ("empty", "holds no model (no <model>/config.pbtxt): write one with `paddlex-npu triton-repo PIPELINE.yaml"),
        ("no-config", "holds no model"),
    ],
)
def test_triton_serve_checks_the_repository_before_writing_or_starting_anything(tmp_path, kind, says):
    """A missing, empty or foreign folder is refused with the fix; nothing is written (no backend folder beside
    the repository or in the cache) and tritonserver is not started."""
    repo = tmp_path / "repo"
    if kind == "file":
        repo.write_text("not a repository")
    elif kind == "empty":
        repo.mkdir()
    elif kind == "no-config":
        (repo / "ocr" / "1").mkdir(parents=True)
    before = _listing(tmp_path)
    env = {**os.environ, "PADDLEX_NPU_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home")}
    out = _cli("triton-serve", str(repo), env=env)
    assert out.returncode == 1 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.startswith(f"paddlex-npu triton-serve: model repository {repo} ") and says in out.stderr
    assert _listing(tmp_path) == before
