"""The package check at load names a gear the model cannot take (and the rule) or a model other than the one
the manifest and inference.yml describe, instead of ONNX Runtime's broadcast/Concat errors at the first call."""

from __future__ import annotations

import shutil

import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import ConfigError
from paddlex_npu.run.runner import build_om_runner
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI, om_package


def _hw(*gears):
    return {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [list(g) for g in gears]}


def _load(folder, task=None):
    return build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig(), task=task)


def test_text_detection_gears_not_multiples_of_32_are_named_with_the_rule(asset_root, tmp_path):
    from paddlex import create_predictor

    folder = om_package(asset_root, assets.DET, tmp_path, _hw((480, 640), (500, 960)))
    with pytest.raises(ConfigError) as info:
        create_predictor(assets.DET, model_dir=str(folder), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    message = str(info.value)
    assert "the dymhw gear x:1,3,500,960 has H=500, not a multiple of 32" in message, message
    assert "text detection needs 32-multiples" in message and "paddlex-npu convert" in message


def test_a_gear_the_model_cannot_take_is_named_without_a_task(asset_root, tmp_path):
    folder = om_package(asset_root, assets.DET, tmp_path, _hw((480, 640), (100, 100)))
    with pytest.raises(ConfigError, match=r"cannot take the dymhw gear x:1,3,100,100 \(.*Incompatible dimensions"):
        _load(folder)


def test_another_models_onnx_is_named(asset_root, tmp_path):
    folder = om_package(asset_root, assets.DET, tmp_path, _hw((480, 640), (960, 960)))
    shutil.copyfile(asset_root / "om" / assets.REC / "inference.onnx", folder / "inference.onnx")
    with pytest.raises(ConfigError, match=r"output 0 \([^)]*softmax_11.tmp_0\) has rank 3 .* text detection"):
        _load(folder, task="TextDetPredictor")
    manifest = {**_hw((480, 640), (960, 960)), "outputs": ["sigmoid_0.tmp_0"], "onnx_sha256": "0" * 64}
    om_package(asset_root, assets.DET, tmp_path, manifest)
    shutil.copyfile(asset_root / "om" / assets.REC / "inference.onnx", folder / "inference.onnx")
    with pytest.raises(ConfigError) as info:
        _load(folder)
    message = str(info.value)
    assert "its sha256 is not the manifest's onnx_sha256" in message
    assert "the manifest's outputs are ['sigmoid_0.tmp_0'], the ONNX's ['softmax_11.tmp_0']" in message


def test_a_manifest_with_other_dtypes_or_inputs_is_named(asset_root, tmp_path):
    bad_dtype = {**_hw((480, 640), (960, 960))}
    bad_dtype["inputs"] = [{"name": "x", "dtype": "float16", "shape": [1, 3, -1, -1]}]
    with pytest.raises(ConfigError, match="input 'x' is float16 in the manifest, float32 in the ONNX"):
        _load(om_package(asset_root, assets.DET, tmp_path / "a", bad_dtype))
    bad_name = {**_hw((480, 640), (960, 960)), "inputs": [{"name": "image", "shape": [1, 3, -1, -1]}]}
    with pytest.raises(ConfigError, match=r"the manifest's inputs are \['image'\], the ONNX's \['x'\]"):
        _load(om_package(asset_root, assets.DET, tmp_path / "b", bad_name))
    bad_rank = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [3, -1, -1]}]}
    with pytest.raises(ConfigError, match=r"input 'x' has shape \[3, -1, -1\] in the manifest, \[-1, 3, -1, -1\]"):
        _load(om_package(asset_root, assets.DET, tmp_path / "c", bad_rank))
