"""The reference runtime enforces what each kind of OM accepts: batch, H/W and dims gears, static shapes."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.run.reference import InferSession
from tests.helpers import raises_acl_failure
from tests.onnx_models import two_input_model


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
    with pytest.raises(RuntimeError, match="not a dymhw model"):
        s.infer(_feeds(1), mode="dymhw")
    with raises_acl_failure(capsys, "set_dynamic_shape on a dymbatch OM"):
        s.infer(_feeds(1), mode="dymshape")


def test_reference_dymhw_and_dymdims(tmp_path, capsys):
    hw = _session(
        tmp_path,
        {
            "mode": "dymhw",
            "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}, {"name": "a", "dtype": "int32", "shape": [1, 2]}],
            "gears": [[8, 16], [16, 16]],
        },
    )
    assert hw.infer(_feeds(1, 8, 16), mode="dymhw")[0].shape == (1, 3, 8, 16)
    with raises_acl_failure(capsys, r"dymHW parameter 16,8 is not correct"):
        hw.infer(_feeds(1, 16, 8), mode="dymhw")
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
