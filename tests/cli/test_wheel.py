"""The built wheel, installed into a fresh venv, runs the route from its own copy (not the source tree): the
``paddlex-npu`` entry point and one text recognition on the CPU reference runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import CHINESE

REPO = Path(__file__).resolve().parents[2]

RECOGNISE = """
import json, sys, paddlex_npu
from paddlex import create_model
model = create_model(model_name="PP-OCRv4_mobile_rec", model_dir=sys.argv[1], device="npu:0", use_hpip=True)
(res,) = list(model.predict(sys.argv[2]))
print(json.dumps({"file": paddlex_npu.__file__, "text": res["rec_text"]}))
"""


def _run(argv, cwd: Path, env) -> subprocess.CompletedProcess:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (argv, out.stdout[-2000:], out.stderr[-3000:])
    return out


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh venv holding only the built wheel; a .pth line gives it this interpreter's dependencies."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --no-build-isolation: setuptools from this environment, nothing fetched
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root), str(REPO)],
        root,
        env,
    )
    (wheel,) = root.glob("paddlex_npu-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], root, env)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root, env).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], root, env)
    return venv


def _venv_env(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PADDLEX_NPU_RUNTIME": "reference", "HOME": os.environ.get("HOME", str(tmp_path))}


def test_the_wheel_runs_info_from_its_own_copy(wheel_venv, tmp_path):
    env = _venv_env(tmp_path)
    out = _run([str(wheel_venv / "bin" / "paddlex-npu"), "info"], tmp_path, env)
    assert "- paddlex-npu: " in out.stdout and "- runtime: reference" in out.stdout, out.stdout
    where = _run(
        [str(wheel_venv / "bin" / "python"), "-c", "import paddlex_npu; print(paddlex_npu.__file__)"], tmp_path, env
    ).stdout.strip()
    assert where.startswith(str(wheel_venv)), where  # the venv's copy, not the source tree nor the editable one
    patches = list((wheel_venv / "share" / "paddlex-npu" / "patches").glob("*.patch"))
    assert patches, "the fork patches (data_files) are not in the wheel"


def test_the_wheel_recognises_a_line_on_the_reference_runtime(wheel_venv, tmp_path, asset_root):
    from paddlex_npu.samples import assets

    env = _venv_env(tmp_path)
    script = tmp_path / "recognise.py"
    script.write_text(RECOGNISE, encoding="utf-8")
    line = assets.render_text_image([CHINESE[0]], tmp_path / "line.png", cjk=True)
    out = _run(
        [str(wheel_venv / "bin" / "python"), str(script), str(asset_root / "om" / "PP-OCRv4_mobile_rec"), str(line)],
        tmp_path,
        env,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(wheel_venv)), got
    assert got["text"] == CHINESE[0], got
