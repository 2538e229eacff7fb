"""ais_bench's model-path checks, made at load by the runner and by the reference runtime alike (om/paths.py)."""

from __future__ import annotations

import os
import shutil

import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.om import paths
from paddlex_npu.om.package import resolve_om_package
from paddlex_npu.run.reference import InferSession
from paddlex_npu.run.runner import build_om_runner
from tests.onnx_models import tiny_package


def _package(folder):
    return tiny_package(folder)


def _refused_everywhere(folder, match):
    """The runner at load, the reference session itself, both with ais_bench's ValueError shape and our fix."""
    for load in (
        lambda: build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig()),
        lambda: InferSession(0, str(folder / "inference.om")),
    ):
        with pytest.raises(ValueError, match=r"^The path:.+ is illegal\. .*" + match):
            load()


def test_a_legal_package_loads(tmp_path):
    build_om_runner(_package(tmp_path), runtime="reference", device_id=0, config=OMBackendConfig()).close()


def test_characters_outside_the_whitelist_are_refused(tmp_path):
    folder = _package(tmp_path / "my models")
    _refused_everywhere(folder, r"characters ' '.*move or copy the package")


def test_a_symlinked_model_is_refused_with_copy_instead(tmp_path):
    real = _package(tmp_path / "real")
    folder = tmp_path / "linked"
    folder.mkdir()
    shutil.copyfile(real / "inference.yml", folder / "inference.yml")
    os.symlink(real / "inference.onnx", folder / "inference.onnx")
    _refused_everywhere(folder, r"symbolic link.*copy the file instead of linking it")
    os.symlink(real / "inference.onnx", folder / "inference.om")  # on the device: the OM itself
    with pytest.raises(ValueError, match="symbolic link"):
        resolve_om_package(folder, "ais_bench")


def test_group_or_other_writable_files_are_refused_with_chmod(tmp_path):
    folder = _package(tmp_path)
    os.chmod(folder / "inference.onnx", 0o664)
    _refused_everywhere(folder, r"writable by its group or others \(mode 664.*chmod go-w")


def test_a_file_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    folder = _package(tmp_path)
    uid = os.geteuid() + 4242
    monkeypatch.setattr(paths.os, "geteuid", lambda: uid)
    monkeypatch.setattr(paths.os, "getgroups", lambda: [])
    _refused_everywhere(folder, r"neither you nor one of your groups.*chown")


def test_a_file_over_10_gb_is_refused(tmp_path):
    folder = _package(tmp_path)
    (folder / "inference.om").write_bytes(b"")
    with open(folder / "inference.om", "r+b") as f:
        f.truncate(paths.OM_MODEL_MAX_SIZE + 1)  # sparse
    with pytest.raises(ValueError, match=r"^The file:\S+ size is larger than 10737418240"):
        resolve_om_package(folder, "ais_bench")
