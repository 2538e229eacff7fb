"""dtype tables (run/dtypes.py): ONNX Runtime's type strings and ACL's codes to numpy."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.run.dtypes import ONNX_TYPES, dtype, numpy_dtype, onnx_numpy_dtype


@pytest.mark.parametrize(
    "onnx_type, want",
    [
        ("tensor(float)", np.float32),
        ("tensor(float16)", np.float16),
        ("tensor(int64)", np.int64),
        ("tensor(bool)", np.bool_),
    ],
)
def test_onnx_type_strings_give_their_numpy_dtype(onnx_type, want):
    assert onnx_numpy_dtype(onnx_type) == np.dtype(want)


def test_every_onnx_type_maps_to_the_acl_code_of_its_numpy_dtype():
    for onnx_type, code in ONNX_TYPES.items():
        assert numpy_dtype(code) == onnx_numpy_dtype(onnx_type)
    assert numpy_dtype(int(dtype.double)) == np.float64
    with pytest.raises(KeyError):
        onnx_numpy_dtype("tensor(string)")
