"""The Python that a Triton model instance's child processes run (the PDF renderers' forkserver): the stub's
``sys.executable`` where it is a Python (the venv's ``python3``, which the embedded CPython finds first on the
``PATH`` that ``triton-serve`` sets: checked against the real stub in test_triton_faults.py), else the interpreter
of ``sys.prefix``; none is an error naming the fix."""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing import spawn

import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.triton import model


@pytest.fixture
def executable():
    saved = spawn.get_executable()
    yield
    multiprocessing.set_executable(saved)


def test_a_python_sys_executable_is_kept(executable):
    assert model.python_for_children() == sys.executable


def test_a_stub_binary_as_sys_executable_gives_the_prefixs_python(executable, tmp_path, monkeypatch):
    stub = tmp_path / "backends" / "python" / "triton_python_backend_stub"
    stub.parent.mkdir(parents=True)
    stub.write_bytes(b"")
    python = tmp_path / "venv" / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stub))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert model.python_for_children() == str(python)
    assert spawn.get_executable() in (str(python), str(python).encode())  # what multiprocessing starts now


def test_no_python_at_all_is_an_error_naming_the_fix(executable, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    with pytest.raises(ConfigError, match="paddlex-npu triton-serve"):
        model.python_for_children()
