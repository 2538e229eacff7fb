"""Fixtures of the unit layer (no PaddleX): the tiny model package most runner and session tests load."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.onnx_models import tiny_package


@pytest.fixture()
def package(tmp_path) -> Path:
    """A tiny two-input model folder (``inference.yml`` + ``inference.onnx``; see :func:`tiny_package`)."""
    return tiny_package(tmp_path)
