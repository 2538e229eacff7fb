"""The image's requirement set (deploy/requirements.txt, pinned by deploy/constraints.txt) resolves to wheels for
manylinux aarch64 and cp311, where most Atlas hosts are, with no paddlepaddle; paddlepaddle 3.3.1, which the
project's own venv uses, does not (PyPI has no aarch64 wheel of it). Asks PyPI; skipped when it cannot be reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# glibc 2.28 (manylinux_2_28) is below the CANN bases' (Ubuntu 22.04: 2.35, openEuler 22.03: 2.34); onnxruntime
# 1.32's aarch64 wheel needs it, the rest are manylinux2014
PLATFORMS = ["--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64"]


def _resolve(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--report", str(tmp_path / "report.json"), "--target", str(tmp_path / "target")]
    cmd += ["--only-binary=:all:", "--python-version", "3.11", *PLATFORMS]
    cmd += ["-r", str(DEPLOY / "requirements.txt"), "-c", str(DEPLOY / "constraints.txt"), *extra]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("pip could not resolve within 10 minutes (PyPI unreachable or slow)")
    if "NewConnectionError" in out.stderr or "Could not fetch URL" in out.stderr:
        pytest.skip(f"PyPI cannot be reached: {out.stderr.strip().splitlines()[-1]}")
    return out


def test_the_image_s_set_resolves_for_aarch64_without_paddle(tmp_path):
    out = _resolve(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    wheels = {i["metadata"]["name"].lower(): i["download_info"]["url"].rsplit("/", 1)[1] for i in report["install"]}
    assert not any(name.startswith("paddlepaddle") for name in wheels)
    for name in ("paddlex", "onnxruntime", "onnx", "sympy", "opencv-contrib-python-headless", "xxhash", "zlib-ng"):
        assert name in wheels, name
    native = [w for w in wheels.values() if not w.endswith("-none-any.whl")]
    assert native and all("aarch64" in w for w in native), native


def test_paddlepaddle_3_3_1_has_no_aarch64_wheel(tmp_path):
    """Why the image carries no Paddle: the project's own pin would not install on an Atlas host."""
    out = _resolve(tmp_path, "paddlepaddle==3.3.1")
    assert out.returncode != 0, out.stderr[-2000:]
    assert "No matching distribution found for paddlepaddle==3.3.1" in out.stderr, out.stderr[-2000:]
