"""Optional third-party packages, imported where a feature needs them: when one is missing, the error names the
feature, the package and the pip command (the extras of setup.cfg), not an ImportError traceback."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Type

from .errors import ConfigError, PaddlexNpuError

# module -> (pip package, the paddlex-npu extra that brings it)
OPTIONAL = {
    "onnx": ("onnx", "convert"),
    "onnxruntime": ("onnxruntime", "reference"),
    "uvicorn": ("uvicorn", "serving"),
    "fastapi": ("fastapi", "serving"),
    "pytriton": ("nvidia-pytriton", "triton"),
    "ray": ("'ray[data,serve]>=2.56'", "ray"),
    "sympy": ("sympy", "convert"),  # solving output dims (run/shape_solver.py)
}


def require(module: str, feature: str, error: Type[PaddlexNpuError] = ConfigError) -> ModuleType:
    """``import module``, or ``error`` saying that ``feature`` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pip, extra = OPTIONAL[module.split(".")[0]]
        raise error(
            f"{feature} needs the Python package {pip}, which is not installed here: pip install {pip} "
            f"(or pip install 'paddlex-npu[{extra}]')"
        ) from exc
