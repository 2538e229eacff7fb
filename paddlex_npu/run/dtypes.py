"""Data types as ais_bench reports them (``aclruntime.dtype``, i.e. aclDataType codes) and their numpy twins."""

from __future__ import annotations

import enum
from typing import Union

import numpy as np


class dtype(enum.IntEnum):  # noqa: N801 - mirrors ``aclruntime.dtype``
    """Mirror of ``aclruntime.dtype``: the values are aclDataType codes."""

    float32 = 0
    float16 = 1
    int8 = 2
    int32 = 3
    uint8 = 4
    int16 = 6
    uint16 = 7
    uint32 = 8
    int64 = 9
    uint64 = 10
    double = 11
    bool = 12


NUMPY_OF = {
    dtype.float32: np.float32,
    dtype.float16: np.float16,
    dtype.int8: np.int8,
    dtype.int32: np.int32,
    dtype.uint8: np.uint8,
    dtype.int16: np.int16,
    dtype.uint16: np.uint16,
    dtype.uint32: np.uint32,
    dtype.int64: np.int64,
    dtype.uint64: np.uint64,
    dtype.double: np.float64,
    dtype.bool: np.bool_,
}

# ONNX Runtime's type strings (``NodeArg.type``) -> aclDataType.
ONNX_TYPES = {
    "tensor(float)": dtype.float32,
    "tensor(float16)": dtype.float16,
    "tensor(int8)": dtype.int8,
    "tensor(int32)": dtype.int32,
    "tensor(uint8)": dtype.uint8,
    "tensor(int16)": dtype.int16,
    "tensor(uint16)": dtype.uint16,
    "tensor(uint32)": dtype.uint32,
    "tensor(int64)": dtype.int64,
    "tensor(uint64)": dtype.uint64,
    "tensor(double)": dtype.double,
    "tensor(bool)": dtype.bool,
}


def numpy_dtype(code: Union[dtype, int]) -> np.dtype:
    """numpy dtype of an aclDataType code (real ``aclruntime.dtype`` values work too)."""
    return np.dtype(NUMPY_OF[dtype(int(code))])


def onnx_numpy_dtype(onnx_type: str) -> np.dtype:
    """numpy dtype of an ONNX Runtime type string such as ``tensor(float)``."""
    return numpy_dtype(ONNX_TYPES[onnx_type])
