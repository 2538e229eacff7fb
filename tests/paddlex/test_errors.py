"""Each bad input gets a clear error naming the cause and the fix, and the process survives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import paddlex_npu
from paddlex_npu import UnsupportedPaddlexError
from paddlex_npu.errors import ConfigError, ModelFileError, RuntimeUnavailableError
from paddlex_npu.run.gears import InputShapeError
from tests.helpers import NPU_HPI, REPO
from tests.paddlex.compat import LEGACY, only_runner_layout, runner_of

DET = "PP-OCRv4_mobile_det"


def _create(model_dir, hpi=NPU_HPI, device="npu:0", **kw):
    from paddlex import create_predictor

    return create_predictor(DET, model_dir=str(model_dir), device=device, use_hpip=True, hpi_config=hpi, **kw)


def _copy(asset_root, tmp_path, drop=()):
    folder = tmp_path / DET
    shutil.copytree(asset_root / "om" / DET, folder)
    for name in drop:
        (folder / name).unlink()
    return folder


def test_missing_inference_om_on_the_device_runtime(asset_root, tmp_path):
    """The fixes come first: the CPU runtime without an NPU, ATC on an Ascend machine (the command, after)."""
    folder = _copy(asset_root, tmp_path)
    hpi = {**NPU_HPI, "backend_config": {"runtime": "ais_bench"}}
    with pytest.raises(ModelFileError) as info:
        _create(folder, hpi)
    first, detail = str(info.value).split("\n", 1)
    assert f"{folder} has no inference.om" in first and "set PADDLEX_NPU_RUNTIME=reference" in first
    assert "build the OM with ATC from its inference.onnx" in first and "atc --framework=5" in detail


def test_missing_inference_om_points_at_the_packages_own_atc_script(asset_root, tmp_path):
    """A package `convert` wrote without ATC carries atc.sh, with its own ranges: that is the fix, not convert."""
    folder = _copy(asset_root, tmp_path)
    (folder / "atc.sh").write_text("atc --framework=5 --model=inference.onnx ...\n")
    hpi = {**NPU_HPI, "backend_config": {"runtime": "ais_bench"}}
    with pytest.raises(ModelFileError) as info:
        _create(folder, hpi)
    first = str(info.value).splitlines()[0]
    assert first.endswith(f"build the OM with `bash {folder / 'atc.sh'}`.") and "convert" not in first


def test_missing_onnx_for_the_reference_runtime(asset_root, tmp_path):
    folder = _copy(asset_root, tmp_path, drop=["inference.onnx"])
    with pytest.raises(
        ModelFileError, match="has no inference.onnx: .*`paddlex-npu convert <paddle folder> -o <package>`"
    ):
        _create(folder)


def test_unreadable_model_file(asset_root, tmp_path):
    folder = _copy(asset_root, tmp_path)
    (folder / "inference.onnx").write_bytes(b"")
    with pytest.raises(ModelFileError, match="cannot be read"):
        _create(folder)


def test_missing_model_folder(tmp_path):
    # PaddleX's own check, before any route: FileNotFoundError on 3.5+, AssertionError on 3.0-3.4.
    with pytest.raises((FileNotFoundError, AssertionError), match="nowhere"):
        _create(tmp_path / "nowhere")


def test_ais_bench_not_installed(asset_root, tmp_path):
    folder = _copy(asset_root, tmp_path)
    (folder / "inference.om").write_bytes(b"OM placeholder")  # the folder is complete; the runtime is not
    hpi = {**NPU_HPI, "backend_config": {"runtime": "ais_bench"}}
    with pytest.raises(RuntimeUnavailableError) as info:
        _create(folder, hpi)
    first, detail = str(info.value).split("\n", 1)  # both fixes in the first line, the install steps after
    assert "ais_bench is not importable" in first and "set PADDLEX_NPU_RUNTIME=reference" in first
    assert "ais_bench and aclruntime wheels" in first and "pip install aclruntime-" in detail


def test_default_runtime_is_the_device_not_a_silent_fallback(asset_root, tmp_path, monkeypatch):
    """A complete package (inference.om + inference.onnx) and no runtime chosen: the device runtime is tried and
    refused for want of ais_bench; the ONNX beside it is never run instead."""
    folder = _copy(asset_root, tmp_path)
    (folder / "inference.om").write_bytes(b"OM placeholder")
    monkeypatch.delenv("PADDLEX_NPU_RUNTIME", raising=False)
    hpi = {k: v for k, v in NPU_HPI.items() if k != "backend_config"}
    with pytest.raises(RuntimeUnavailableError, match="ais_bench is not importable"):
        _create(folder, hpi)


def test_unknown_backend_config_key(asset_root):
    hpi = {**NPU_HPI, "backend_config": {"runtime": "reference", "custom_size": 10}}
    with pytest.raises(ConfigError, match="custom_size.*Valid keys: .*custom_sizes"):
        _create(asset_root / "om" / DET, hpi)


def test_unknown_runtime(asset_root, monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_RUNTIME", "gpu")
    hpi = {k: v for k, v in NPU_HPI.items() if k != "backend_config"}
    with pytest.raises(ConfigError, match="unknown runtime 'gpu'.*ais_bench, reference"):
        _create(asset_root / "om" / DET, hpi)


@only_runner_layout
def test_om_engine_on_a_cpu_device(asset_root):
    from paddlex import create_predictor

    with pytest.raises(ConfigError, match="engine 'om' runs OM models on an Ascend NPU"):
        create_predictor(DET, model_dir=str(asset_root / "om" / DET), device="cpu", engine="om")


def test_shape_outside_the_om_range(asset_root):
    import numpy as np

    predictor = _create(asset_root / "om" / DET)
    with pytest.raises(
        InputShapeError,
        match=r"\[1, 4, 64, 64\] is outside the OM's dymshape ranges.*: rebuild the OM with a wider --input_shape",
    ):
        runner_of(predictor)([np.zeros((1, 4, 64, 64), np.float32)])


def test_unsupported_paddlex_versions():
    from paddlex_npu.paddlex.patcher import select_adapter

    assert select_adapter("3.7.2") == "paddlex_35"
    assert select_adapter("3.5.0") == "paddlex_35"
    assert select_adapter("3.4.3") == "paddlex_34"
    assert select_adapter("3.0.0") == "paddlex_34"
    for version in ("2.1.0", "3.8.0", "4.0.0"):
        expected = rf"supports paddlex>=3.0,<3.8 .*installed PaddleX is {version}"
        with pytest.raises(UnsupportedPaddlexError, match=expected):
            select_adapter(version)


def test_a_newer_paddlex_is_refused_with_the_override_named_and_tried_when_allowed(monkeypatch):
    """A PaddleX above the tested range is refused at install time (pip lets it in: no upper bound) with the
    variable that allows it; allowed, the newest adapter is tried and the layout still checked: it loads on the
    3.7 layout, and is refused as an unknown layout on 3.4's."""
    from paddlex_npu.paddlex import patcher

    monkeypatch.setattr(patcher, "paddlex_version", lambda: "3.9.0")
    monkeypatch.delenv("PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX", raising=False)
    with pytest.raises(UnsupportedPaddlexError, match="PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX=1 to try this newer one"):
        patcher.adapter()
    monkeypatch.setenv("PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX", "1")
    if LEGACY:
        with pytest.raises(UnsupportedPaddlexError, match="unknown layout, not patched: install a tested PaddleX"):
            patcher.adapter()
    else:
        assert patcher.adapter().name == "paddlex_35"


def test_unknown_layout_is_refused(monkeypatch):
    from paddlex_npu.paddlex import patcher

    name = patcher.adapter().name
    adapter = patcher.load_adapter(name)
    if LEGACY:
        from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

        monkeypatch.delattr(BasePredictor, "_prepare_pp_option")
    else:
        from paddlex.inference.models.bindings import default_registry

        monkeypatch.delattr(default_registry, "_registry")
    assert adapter.requires()
    with pytest.raises(UnsupportedPaddlexError, match="unknown layout, not patched"):
        patcher.load_adapter(name)


def test_the_other_generation_s_layout_is_refused():
    """Each adapter refuses the other generation's PaddleX (its hook points are missing)."""
    from paddlex_npu.paddlex import patcher

    other = "paddlex_35" if LEGACY else "paddlex_34"
    with pytest.raises(UnsupportedPaddlexError, match="unknown layout, not patched"):
        patcher.load_adapter(other)


def test_unsupported_version_refused_on_install(monkeypatch):
    from paddlex_npu.paddlex import patcher

    was = paddlex_npu.is_installed()
    paddlex_npu.uninstall() if was else None
    monkeypatch.setattr(patcher, "paddlex_version", lambda: "2.1.0")
    try:
        with pytest.raises(UnsupportedPaddlexError, match="supports paddlex>=3.0,<3.8"):
            paddlex_npu.install()
        assert not paddlex_npu.is_installed()
    finally:
        monkeypatch.undo()
        if was:
            paddlex_npu.install()


def test_npu_device_without_om_raises_instead_of_aborting(asset_root):
    """Stock PaddleX aborts the process (SIGABRT in Paddle Inference); with the plugin it is an exception.
    Run in a child process so that a regression shows as a failed test, not a dead test session."""
    code = textwrap.dedent(f"""
        import paddlex_npu
        from paddlex import create_predictor
        try:
            create_predictor({DET!r}, model_dir={str(asset_root / "paddle" / DET)!r}, device="npu:0")
        except paddlex_npu.NpuDeviceUnavailableError as e:
            print("RAISED:", e)
        print("ALIVE")
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAISED: device='npu:0' asks Paddle Inference for an Ascend NPU" in out.stdout
    assert "hpi_config={'backend': 'om'" in out.stdout and "ALIVE" in out.stdout


def test_paddleocr_on_npu_without_hpi_and_without_paddle_says_how_to_take_the_route(asset_root):
    """PaddleOCR(device="npu:0") with no HPI, where paddlepaddle cannot be imported: the documented
    NpuDeviceUnavailableError, its fix in its first line, not a ModuleNotFoundError from inside the route."""
    code = textwrap.dedent(f"""
        import sys

        sys.modules["paddle"] = None  # this environment has no paddlepaddle: `import paddle` fails
        import paddlex_npu
        from paddleocr import PaddleOCR

        try:
            PaddleOCR(
                device="npu:0",
                text_detection_model_name={DET!r},
                text_detection_model_dir={str(asset_root / "paddle" / DET)!r},
                text_recognition_model_name="PP-OCRv4_mobile_rec",
                text_recognition_model_dir={str(asset_root / "paddle" / "PP-OCRv4_mobile_rec")!r},
                use_doc_orientation_classify=False,
                use_doc_unwarping=False,
                use_textline_orientation=False,
            )
        except paddlex_npu.NpuDeviceUnavailableError as e:
            print("RAISED:", str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0 and "RAISED:" in out.stdout, out.stderr[-3000:]
    first = out.stdout.split("RAISED: ", 1)[1].splitlines()[0]
    assert "but paddlepaddle is not installed: take paddlex-npu's OM route instead" in first
    assert "enable_hpi=True" in first


@pytest.mark.parametrize(
    "device, hpi, where",
    [
        ("cpu", NPU_HPI, "device='cpu'"),
        (None, {**NPU_HPI, "device_type": "gpu"}, "hpi_config\\['device_type'\\]='gpu'"),
    ],
)
def test_backend_om_on_a_device_that_is_not_an_npu(asset_root, device, hpi, where):
    from paddlex import create_predictor

    with pytest.raises(ConfigError, match=rf"hpi backend 'om' runs OM models on an Ascend NPU, but {where}"):
        create_predictor(DET, model_dir=str(asset_root / "om" / DET), device=device, use_hpip=True, hpi_config=hpi)


def test_device_and_hpi_device_id_disagree_warns_once(asset_root, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        predictor = _create(asset_root / "om" / DET, {**NPU_HPI, "device_id": 0}, device="npu:1")
    assert runner_of(predictor).device_id == 1
    notes = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert notes == ["device='npu:1' and hpi_config device_id=0 disagree: device wins (npu:1)"]
