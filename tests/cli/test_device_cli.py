"""The device options on the command line: convert's default chip, selftest's --runtime and logical --device-id."""

from __future__ import annotations

import os
import subprocess
import sys


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, timeout=300, env=full
    )


def test_convert_without_soc_version_and_without_cann_says_what_to_give(asset_root, tmp_path):
    out = _cli("convert", str(asset_root / "om" / "PP-OCRv4_mobile_rec"), "-o", str(tmp_path / "pkg"))
    assert out.returncode == 1, out.stdout + out.stderr
    ours = [line for line in out.stderr.splitlines() if line.startswith("paddlex-npu convert:")]  # PaddleX may warn
    assert ours and ours[0].startswith("paddlex-npu convert: no --soc-version given and no chip to read it"), out.stderr
    assert not (tmp_path / "pkg").exists()


def test_selftest_help_names_the_runtimes_and_logical_ids():
    out = _cli("selftest", "--help")
    assert out.returncode == 0 and "--runtime {ais_bench,reference}" in out.stdout
    assert "ASCEND_RT_VISIBLE_DEVICES" in out.stdout
