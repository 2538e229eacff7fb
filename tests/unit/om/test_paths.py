"""ais_bench's model-path checks, made at load by the runner and by the reference runtime alike (om/paths.py)."""

from __future__ import annotations

import os
import re
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
        with pytest.raises(ValueError, match=r"^The path:/.+ is illegal\. .*" + match):
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


def _path(*lengths: int) -> str:
    """An absolute path of names of these lengths: ``/aaa/bbb...``."""
    return "".join("/" + chr(ord("a") + k % 26) * n for k, n in enumerate(lengths))


def _refuses(path, match, file=None):
    shown = path if file is None else file
    with pytest.raises(ValueError, match=rf"^The path:{re.escape(str(shown))} is illegal\. .*{match}"):
        paths.check_model_path(path, file)


def test_path_length_limits_are_ais_bench_s_exactly():
    """4,096 characters in the absolute path, 255 in a name, 32 ``/`` deep: each limit itself passes."""
    at_limit = _path(*[240] * 16, 239)
    assert len(at_limit) == 4096
    paths._check_lengths(at_limit, at_limit)  # names far under 255 each, 4,096 in all: ais_bench takes it
    # ... but Linux does not (PATH_MAX 4,096 counts the final NUL): a clear refusal, not an OSError from lstat
    _refuses(at_limit, r"the system cannot examine it \(File name too long\)")
    over = _path(*[240] * 17)
    _refuses(over, r"its absolute path has 4097 characters, over 4096: use a shorter path")
    paths.check_model_path(_path(255, 255))
    _refuses(
        _path(10, 256, 3), r"the name 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'\.\.\. has 256 characters, over 255"
    )
    paths.check_model_path(_path(*[1] * 32))
    _refuses(_path(*[1] * 33), r"its absolute path is 33 folders deep, over 32: move the package")


def test_the_file_beside_the_om_is_checked_and_named(tmp_path):
    good = tmp_path / "inference.om"
    paths.check_model_path(good, tmp_path / "inference.onnx")  # neither exists: the strings pass
    _refuses(good, r"holds the characters ' '", file=tmp_path / "in ference.onnx")
    _refuses(good, r"holds the characters '#@'", file=tmp_path / "a@b#.onnx")
    with pytest.raises(ValueError, match=rf"^The path:{re.escape(str(tmp_path))}/a b/inference.om is illegal"):
        paths.check_model_path(tmp_path / "a b" / "inference.om", tmp_path / "inference.onnx")


@pytest.mark.parametrize("mode, ok", [(0o755, True), (0o400, True), (0o644, True), (0o620, False), (0o602, False)])
def test_write_bits_of_group_or_others_are_refused(tmp_path, mode, ok):
    f = tmp_path / "inference.om"
    f.write_bytes(b"om")
    os.chmod(f, mode)
    if ok:
        paths.check_model_path(f)
    else:
        _refuses(
            f, rf"writable by its group or others \(mode {mode:o}; at most 755\): `chmod go-w {re.escape(str(f))}`"
        )


def test_a_file_its_owner_cannot_read_is_refused(tmp_path):
    f = tmp_path / "inference.om"
    f.write_bytes(b"om")
    os.chmod(f, 0o200)
    _refuses(f, r"its owner has no read permission \(mode 200; at least 400\)")


def test_a_symlink_is_named_by_its_own_path(tmp_path):
    (tmp_path / "real.om").write_bytes(b"om")
    os.symlink(tmp_path / "real.om", tmp_path / "inference.om")
    _refuses(tmp_path / "inference.om", r"symbolic link.*readlink -f")


def test_a_file_of_exactly_10_gib_is_taken(tmp_path):
    f = tmp_path / "inference.om"
    with open(f, "wb") as out:
        out.truncate(10 * 1024**3)  # sparse: ais_bench's OM_MODEL_MAX_SIZE itself
    paths.check_model_path(f)
    with open(f, "r+b") as out:
        out.truncate(10 * 1024**3 + 1)
    with pytest.raises(ValueError, match=rf"^The file:{re.escape(str(f))} size is larger than 10737418240\."):
        paths.check_model_path(f)
