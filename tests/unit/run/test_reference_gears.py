"""The reference runtime enforces what each kind of OM accepts: batch, H/W and dims gears, static shapes."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.run.reference import InferSession
from tests.helpers import raises_acl_failure
from tests.onnx_models import image_model, nonzero_model, small_input_first_model, two_input_model


def _session(tmp_path, manifest):
    two_input_model(tmp_path / "inference.onnx")
    return InferSession(0, str(tmp_path / "inference.om"), manifest=manifest)


def _feeds(n=1, h=8, w=8):
    return [np.zeros((n, 3, h, w), np.float32), np.zeros((n, 2), np.int32)]


def test_reference_dymbatch(tmp_path, capsys):
    s = _session(
        tmp_path,
        {
            "mode": "dymbatch",
            "inputs": [{"name": "x", "shape": [-1, 3, 8, 8]}, {"name": "a", "dtype": "int32", "shape": [-1, 2]}],
            "gears": [[1], [4]],
        },
    )
    assert s.get_inputs()[0].size == 4 * 3 * 8 * 8 * 4 and s.get_max_dym_batchsize() == 4
    assert s.infer(_feeds(4), mode="dymbatch")[0].shape == (4, 3, 8, 8)
    with raises_acl_failure(capsys, r"dymBatch parameter 2 is not correct, the OM's batch gears are \[1, 4\]"):
        s.infer(_feeds(2), mode="dymbatch")
    with pytest.raises(IndexError):  # ais_bench's dymhw scan reads shape[2] of a's rank-2 descriptor
        s.infer(_feeds(1), mode="dymhw")
    with raises_acl_failure(capsys, "set_dynamic_shape on a dymbatch OM"):
        s.infer(_feeds(1), mode="dymshape")


def test_reference_dymhw_and_dymdims(tmp_path, capsys):
    image_model(tmp_path / "image" / "inference.onnx")
    hw = InferSession(
        0,
        str(tmp_path / "image" / "inference.om"),
        manifest={"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[8, 16], [16, 16]]},
    )
    assert hw.infer(_feeds(1, 8, 16)[:1], mode="dymhw")[0].shape == (1, 3, 8, 16)
    with raises_acl_failure(capsys, r"dymHW parameter 16,8 is not correct"):
        hw.infer(_feeds(1, 16, 8)[:1], mode="dymhw")
    dims = _session(
        tmp_path,
        {
            "mode": "dymdims",
            "inputs": [{"name": "x", "shape": [-1, 3, 8, -1]}, {"name": "a", "dtype": "int32", "shape": [-1, 2]}],
            "gears": [[1, 8, 1], [2, 16, 2]],
        },
    )
    assert dims.infer(_feeds(2, 8, 16), mode="dymdims")[0].shape == (2, 3, 8, 16)
    with raises_acl_failure(capsys, "dynamic_dims parameter .* is not correct"):
        dims.infer(_feeds(2, 8, 8), mode="dymdims")


def test_reference_static_om_has_fixed_shapes(tmp_path, capsys):
    s = _session(
        tmp_path,
        {
            "mode": "static",
            "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}, {"name": "a", "dtype": "int32", "shape": [1, 2]}],
        },
    )
    assert s.get_inputs()[0].size == 768 and s.get_outputs()[0].size == 768
    assert s.infer(_feeds(1))[1].shape == (1, 2)
    with raises_acl_failure(capsys, "needsize:768 not match"):
        s.infer(_feeds(1, 8, 16))


def test_dymhw_with_a_non_image_input_is_refused_as_atc_would(tmp_path):
    with pytest.raises(ConfigError, match=r"needs --input_format NCHW, but inputs \['a \(ND, rank 2\)'\].*dymdims"):
        _session(
            tmp_path,
            {
                "mode": "dymhw",
                "inputs": [
                    {"name": "x", "shape": [1, 3, -1, -1]},
                    {"name": "a", "dtype": "int32", "format": "ND", "shape": [1, 2]},
                ],
                "gears": [[8, 16], [16, 16]],
            },
        )


def test_dymhw_scan_indexes_every_input_until_the_image_as_ais_bench(tmp_path):
    """ais_bench's _dymhw_prepare reads desc.shape[2] of each input in order: a rank-2 input first raises
    IndexError, whatever the OM is."""
    small_input_first_model(tmp_path / "inference.onnx")
    s = InferSession(0, str(tmp_path / "inference.om"))  # dymshape (x has -1 dims)
    with pytest.raises(IndexError):
        s.infer([np.zeros((1, 2), np.float32), np.zeros((1, 3, 8, 8), np.float32)], mode="dymhw")


def test_static_mode_on_gear_oms_is_what_the_cpp_does(tmp_path, capsys):
    """set_staticbatch chooses no gear: on a batch-gear OM static execution runs the gear set last (realsize
    unchanged) and is refused before any gear; on a dims-gear OM it is refused (SetInputsData)."""
    image_model(tmp_path / "inference.onnx")
    om = str(tmp_path / "inference.om")
    batch = InferSession(
        0, om, manifest={"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 8, 8]}], "gears": [[1], [4]]}
    )
    x4 = np.ones((4, 3, 8, 8), np.float32)
    with raises_acl_failure(capsys, "static execution of a dymbatch OM before any gear"):
        batch.infer([x4], mode="static")  # no "largest gear" invented
    batch.infer([x4[:1]], mode="dymbatch")
    batch.set_staticbatch()
    assert batch.get_inputs()[0].realsize == 3 * 8 * 8 * 4  # left as the last gear set it
    assert batch.infer([x4[:1]], mode="static")[0].shape == (1, 3, 8, 8)
    with raises_acl_failure(capsys, "needsize:768 not match"):
        batch.infer([x4], mode="static")
    dims = InferSession(
        0,
        om,
        manifest={"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 8, -1]}], "gears": [[1, 8], [2, 16]]},
    )
    dims.infer([np.ones((1, 3, 8, 8), np.float32)], mode="dymdims")
    with raises_acl_failure(capsys, "dym gearcount:2 but dymtype:static not set"):
        dims.infer([np.ones((1, 3, 8, 8), np.float32)], mode="static")


def test_dims_text_over_30_characters_is_refused_as_in_cpp(tmp_path):
    image_model(tmp_path / "inference.onnx")
    s = InferSession(0, str(tmp_path / "inference.om"))
    s.set_dynamic_shape("x:1,3,8,8")
    with pytest.raises(RuntimeError, match="^Input dymShpae out of length$"):
        s.set_dynamic_shape("x:100000000,300000000,800000000,8")  # 31 characters after "x:"
    with pytest.raises(RuntimeError, match="dynamic shape string is illegal"):
        s.set_dynamic_shape("x:01,3,8,8")  # C++ wants [1-9] first


def test_data_dependent_output_comes_back_as_the_whole_buffer_outside_dymshape(tmp_path, capsys):
    """ACL knows a data-dependent output's real shape only in dymshape; in static mode ais_bench returns the whole
    reserved buffer as a 1-D array (GetCurOutputShape fails, the shape falls back to realLen / itemsize)."""
    nonzero_model(tmp_path / "inference.onnx")
    x = np.array([[0, 3, 0, 5]], np.float32)
    dym = InferSession(0, str(tmp_path / "inference.om"))  # no manifest: fixed inputs, an output with -1: dymshape
    assert dym.manifest.mode == "dymshape" and dym.manifest.data_dependent == ["idx"]
    idx, y = dym.infer([x], mode="dymshape", custom_sizes=64)
    assert idx.tolist() == [[0, 0], [1, 3]] and y.tolist() == [[1, 4, 1, 6]]
    static = InferSession(
        0, str(tmp_path / "inference.om"), manifest={"mode": "static", "inputs": [{"name": "x", "shape": [1, 4]}]}
    )
    assert static.get_outputs()[0].size == 0 and static.get_outputs()[1].shape == [1, 4]
    static.set_custom_outsize([64, 16])
    flat, y = static.infer([x], mode="static")
    assert flat.dtype == np.int64 and flat.shape == (8,)  # 64 bytes of int64, 1-D
    assert flat[:4].tolist() == [0, 0, 1, 3] and y.shape == (1, 4)
