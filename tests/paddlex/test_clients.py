"""Every documented way to ask PaddleX (and PaddleOCR, built on it) for HPI with backend ``om`` on an ``npu``
device takes the NPU route, and so does HPI with no backend when the model folder is an OM package.

Real PP-OCRv4 models (the bundled OM packages) read the rendered images; ways that a PaddleX generation does not
have (``engine``/``engine_config``: 3.5+) skip with the reason."""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import paddlex_npu
from paddlex_npu.errors import ModelFileError
from paddlex_npu.paddlex.patcher import patched_attributes
from paddlex_npu.run.runner import OMRunner
from paddlex_npu.samples import assets
from tests.helpers import EXPECTED, NPU_HPI, norm, run_ocr
from tests.paddlex.compat import LEGACY, only_runner_layout, runner_of

DET = assets.DET
HAS_PADDLEOCR = importlib.util.find_spec("paddleocr") is not None
needs_paddleocr = pytest.mark.skipif(
    not HAS_PADDLEOCR, reason="PaddleOCR is not installed (requirements/paddlex-*.txt install the matching one)"
)
OCR_OFF = dict(use_doc_orientation_classify=False, use_doc_unwarping=False, use_textline_orientation=False)


@pytest.fixture()
def reference_runtime(monkeypatch):
    """Calls that name no backend options run on the runtime PADDLEX_NPU_RUNTIME names."""
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "reference")


def _assert_om(*predictors):
    for predictor in predictors:
        runner = runner_of(predictor)
        assert isinstance(runner, OMRunner), type(runner)
        assert runner.runtime == "reference"


def _assert_reads(results):
    for key, got in results.items():
        assert norm(got["texts"]) == norm(EXPECTED[key]), key


# ---- module-level aliases of patched functions ------------------------------------------------------------------


def _module_level_imports(package: str, names: set) -> set:
    """Modules of ``package`` (source scan) that bind one of ``names`` at module level with ``from x import``."""
    spec = importlib.util.find_spec(package)
    root = Path(spec.origin).parent
    found = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(n in text for n in names):
            continue
        tree = ast.parse(text)
        nodes = list(tree.body)
        while nodes:
            node = nodes.pop()
            if isinstance(node, (ast.If, ast.Try)):
                nodes += node.body + node.orelse + getattr(node, "finalbody", [])
                nodes += [s for h in getattr(node, "handlers", []) for s in h.body]
            elif isinstance(node, ast.ImportFrom) and any((a.asname or a.name) in names for a in node.names):
                rel = path.relative_to(root.parent).with_suffix("")
                found.add(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    return found


def test_every_module_level_alias_of_a_patched_function_is_patched_and_restored():
    """Fails when a PaddleX (or PaddleOCR) version binds a patched function somewhere the patch misses."""
    functions = {
        original: (name, replacement)
        for owner, name, original, replacement in patched_attributes()
        if isinstance(owner, types.ModuleType)
    }
    names = {name for name, _ in functions.values()}
    # the table matching on every version (table_match); create_predictor on 3.5+ (3.0-3.4 patch methods)
    assert names == {"match_table_and_ocr"} | (set() if LEGACY else {"create_predictor"})
    packages = ["paddlex"] + (["paddleocr"] if HAS_PADDLEOCR else [])
    aliases = {n: set().union(*(_module_level_imports(p, {n}) for p in packages)) for n in names}
    assert LEGACY or "paddlex.model" in aliases["create_predictor"]  # `from .inference import create_predictor`
    for module in sorted(set().union(*aliases.values())):
        importlib.import_module(module)

    def bindings(value):
        return {
            (m.__name__, n)
            for m in list(sys.modules.values())
            if isinstance(getattr(m, "__dict__", None), dict)
            for n, v in list(m.__dict__.items())
            if v is value
        }

    for original, (name, replacement) in functions.items():
        assert not bindings(original), f"unpatched aliases of {name}: {sorted(bindings(original))}"
        patched = bindings(replacement)
        assert {(m, name) for m in aliases[name]} <= patched
    try:
        assert paddlex_npu.uninstall()
        for original, (name, replacement) in functions.items():
            assert not bindings(replacement), f"{name} left patched: {sorted(bindings(replacement))}"
            assert {(m, name) for m in aliases[name]} <= bindings(original)
    finally:
        paddlex_npu.install()


# ---- single models: create_model / create_predictor --------------------------------------------------------------

PREDICTOR_WAYS = {
    "hpi_config": dict(use_hpip=True, hpi_config=NPU_HPI),
    "no backend, OM package": dict(use_hpip=True),
    "no backend, npu in hpi_config": dict(use_hpip=True, hpi_config={"device_type": "npu", "auto_config": False}),
    "engine hpi": pytest.param(dict(engine="hpi", engine_config=NPU_HPI), marks=only_runner_layout),
    "engine_config hpi bucket": pytest.param(
        dict(use_hpip=True, engine_config={"hpi": NPU_HPI}), marks=only_runner_layout
    ),
    "engine_config flat": pytest.param(dict(use_hpip=True, engine_config=NPU_HPI), marks=only_runner_layout),
    "PaddleOCR's paddle_static bucket + hpi_config": pytest.param(
        dict(use_hpip=True, engine_config={"paddle_static": {"run_mode": "paddle"}}, hpi_config=NPU_HPI),
        marks=only_runner_layout,
    ),
}


@pytest.mark.parametrize("api", ["create_model", "create_predictor"])
@pytest.mark.parametrize("kwargs", PREDICTOR_WAYS.values(), ids=PREDICTOR_WAYS.keys())
def test_single_model_takes_the_route(asset_root, images, reference_runtime, api, kwargs):
    import paddlex

    device = None if kwargs.get("hpi_config", {}).get("auto_config") is False else "npu:0"  # device_type alone
    model = getattr(paddlex, api)(model_name=DET, model_dir=str(asset_root / "om" / DET), device=device, **kwargs)
    predictor = getattr(model, "_predictor", model)  # create_model wraps the predictor
    _assert_om(predictor)
    (res,) = list(model.predict(str(images["english"])))
    assert len(res["dt_polys"]) == len(EXPECTED["english"])


def test_no_backend_logs_the_choice_once(asset_root, tmp_path, reference_runtime, caplog):
    import logging
    import shutil

    from paddlex import create_predictor

    folder = tmp_path / DET
    shutil.copytree(asset_root / "om" / DET, folder)
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        for _ in range(2):
            create_predictor(DET, model_dir=str(folder), device="npu:0", use_hpip=True)
    chosen = [r for r in caplog.records if "with no backend given" in r.getMessage()]
    assert len(chosen) == 1 and str(folder) in chosen[0].getMessage()


def test_no_backend_on_a_folder_that_is_no_om_package_says_how_to_build_one(asset_root):
    from paddlex import create_predictor

    paddle_dir = asset_root / "paddle" / DET
    with pytest.raises(ModelFileError) as err:
        create_predictor(DET, model_dir=str(paddle_dir), device="npu:0", use_hpip=True)
    msg = str(err.value).splitlines()[0]  # the cause and the fix in the first line
    assert "holds neither inference.om nor inference.om.json" in msg
    assert f"paddlex-npu convert {paddle_dir} -o <package>" in msg
    assert "ultra-infer" not in msg


def test_no_backend_off_the_npu_is_left_to_paddlex(asset_root):
    """HPI with no backend on the CPU is PaddleX's own business (its ultra-infer error here)."""
    from paddlex import create_predictor

    with pytest.raises(Exception) as err:
        create_predictor(DET, model_dir=str(asset_root / "om" / DET), device="cpu", use_hpip=True)
    assert not isinstance(err.value, paddlex_npu.PaddlexNpuError)


# ---- pipelines: create_pipeline, YAML, CLI ------------------------------------------------------------------------


def _with_hpi(config: dict, where: str) -> dict:
    config = copy.deepcopy(config)
    if where == "top":
        config.update(use_hpip=True, hpi_config=NPU_HPI)
    elif where == "submodules":
        for sub in config["SubModules"].values():
            sub.update(use_hpip=True, hpi_config=NPU_HPI)
    return config


PIPELINE_WAYS = {
    "YAML top level": ("top", {}),
    "YAML per SubModule": ("submodules", {}),
    "no backend, OM packages": (None, dict(use_hpip=True)),
    "engine_config hpi bucket": pytest.param(
        None, dict(use_hpip=True, engine_config={"hpi": NPU_HPI}), marks=only_runner_layout
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("where, kwargs", PIPELINE_WAYS.values(), ids=PIPELINE_WAYS.keys())
def test_pipeline_takes_the_route_and_reads_the_text(asset_root, images, reference_runtime, where, kwargs):
    from paddlex import create_pipeline

    config = _with_hpi(assets.ocr_pipeline_config(asset_root / "om"), where)
    pipeline = create_pipeline(config=config, device="npu:0", **kwargs)
    try:
        _assert_om(pipeline.text_det_model, pipeline.text_rec_model)
        _assert_reads(run_ocr(pipeline, images))
    finally:
        pipeline.close()


def _run_cli(args, tmp_path, env=None):
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PADDLEX_NPU_RUNTIME": "reference", **(env or {})},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "OM runner" in out.stderr, out.stderr[-3000:]
    return out


def _saved_texts(folder: Path, image: Path):
    (saved,) = folder.glob(f"{image.stem}*res.json")
    return json.loads(saved.read_text())["rec_texts"]


@pytest.mark.slow
@pytest.mark.parametrize("hpi", ["--hpi_config", "no backend"])
def test_paddlex_cli_use_hpip(asset_root, images, tmp_path, hpi):
    import yaml

    cfg = tmp_path / "ocr.yaml"
    cfg.write_text(yaml.safe_dump(assets.ocr_pipeline_config(asset_root / "om")))
    extra = ["--hpi_config", repr(NPU_HPI)] if hpi == "--hpi_config" else []
    args = ["paddlex", "--pipeline", str(cfg), "--input", str(images["page"]), "--device", "npu:0", "--use_hpip"]
    _run_cli([*args, *extra, "--save_path", str(tmp_path / "out")], tmp_path)
    assert norm(_saved_texts(tmp_path / "out", images["page"])) == norm(EXPECTED["page"])


# ---- PaddleOCR ----------------------------------------------------------------------------------------------------


def _model_args(root: Path) -> dict:
    return dict(
        text_detection_model_name=assets.DET,
        text_detection_model_dir=str(root / assets.DET),
        text_recognition_model_name=assets.REC,
        text_recognition_model_dir=str(root / assets.REC),
    )


def _paddleocr_reads(ocr, images):
    out = {}
    for key, path in images.items():
        (res,) = list(ocr.predict(str(path)))
        out[key] = {
            "texts": list(res["rec_texts"]),
            "scores": [float(s) for s in res["rec_scores"]],
            "boxes": [list(map(float, b)) for b in res["rec_boxes"]],
        }
    return out


OM_HPI = {"auto_config": False, "backend": "om", "backend_config": {"runtime": "reference"}}
PADDLEOCR_WAYS = {
    "enable_hpi, no backend": lambda root: dict(enable_hpi=True, **_model_args(root / "om")),
    "enable_hpi + engine_config": pytest.param(
        lambda root: dict(enable_hpi=True, engine_config={"hpi": OM_HPI}, **_model_args(root / "om")),
        marks=only_runner_layout,
    ),
    "paddlex_config per SubModule": lambda root: dict(
        enable_hpi=True,
        paddlex_config=_with_hpi(assets.ocr_pipeline_config(root / "om"), "submodules"),
        text_detection_model_name=assets.DET,
        text_recognition_model_name=assets.REC,
    ),
    "paddlex_config top level": lambda root: dict(
        enable_hpi=True,
        paddlex_config=_with_hpi(assets.ocr_pipeline_config(root / "om"), "top"),
        text_detection_model_name=assets.DET,
        text_recognition_model_name=assets.REC,
    ),
}


@needs_paddleocr
@pytest.mark.slow
@pytest.mark.parametrize("make_kwargs", PADDLEOCR_WAYS.values(), ids=PADDLEOCR_WAYS.keys())
def test_paddleocr_takes_the_route_and_reads_the_text(asset_root, images, reference_runtime, make_kwargs):
    from paddleocr import PaddleOCR

    ocr = PaddleOCR(device="npu:0", **OCR_OFF, **make_kwargs(asset_root))
    try:
        _assert_om(ocr.paddlex_pipeline.text_det_model, ocr.paddlex_pipeline.text_rec_model)
        _assert_reads(_paddleocr_reads(ocr, images))
    finally:
        ocr.close()


@needs_paddleocr
@pytest.mark.slow
def test_uninstalled_plugin_leaves_paddleocr_cpu_results_unchanged(asset_root, images):
    import paddleocr._models.base as pocr_models
    from paddleocr import PaddleOCR

    def cpu_run():
        ocr = PaddleOCR(device="cpu", enable_mkldnn=False, **OCR_OFF, **_model_args(asset_root / "paddle"))
        try:
            return _paddleocr_reads(ocr, images)
        finally:
            ocr.close()

    with_plugin = cpu_run()
    assert paddlex_npu.uninstall()
    try:
        assert not getattr(pocr_models.create_predictor, "__paddlex_npu_patched__", False)
        without = cpu_run()
    finally:
        paddlex_npu.install()
    assert without == with_plugin
    _assert_reads(without)


PADDLEOCR_CLI_WAYS = {"no backend": None, "YAML per SubModule": "submodules", "YAML top level": "top"}


@needs_paddleocr
@pytest.mark.slow
@pytest.mark.parametrize("where", PADDLEOCR_CLI_WAYS.values(), ids=PADDLEOCR_CLI_WAYS.keys())
def test_paddleocr_cli(asset_root, images, tmp_path, where):
    """``paddlex-npu paddleocr ocr ...`` is PaddleOCR's CLI with the route installed. PaddleOCR replaces the
    YAML's model names by its defaults unless they are given, hence the two ``--*_model_name``."""
    import yaml

    cfg = tmp_path / "ocr.yaml"
    cfg.write_text(yaml.safe_dump(_with_hpi(assets.ocr_pipeline_config(asset_root / "om"), where)))
    names = ["--text_detection_model_name", assets.DET, "--text_recognition_model_name", assets.REC]
    args = ["paddleocr", "ocr", "-i", str(images["page"]), "--device", "npu:0", "--enable_hpi", "True"]
    _run_cli([*args, "--paddlex_config", str(cfg), *names, "--save_path", str(tmp_path / "out")], tmp_path)
    assert norm(_saved_texts(tmp_path / "out", images["page"])) == norm(EXPECTED["page"])
