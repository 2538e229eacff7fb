"""The Ray commands' parsers: help without reST markup, bad arguments named (no Ray started for these)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "paddlex_npu.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["ray-ocr", "ray-serve"])
def test_help_without_rst_markup(command):
    out = _cli(command, "--help")
    assert out.returncode == 0 and out.stdout.startswith(f"usage: paddlex-npu {command}"), out.stderr
    assert "``" not in out.stdout and "--address" in out.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["ray-ocr", "in", "out.parquet", "--npus", "3-1"], "--npus 3-1: MIN must not exceed MAX"),
        (["ray-ocr", "in", "out.parquet", "--npus", "0"], "give N or MIN-MAX"),
        (["ray-serve", "ocr.yaml", "--autoscaling", "{max"], "not JSON"),
        (["ray-serve", "ocr.yaml", "--replicas", "2", "--autoscaling", "{}"], "not allowed with argument"),
    ],
)
def test_bad_arguments_are_named(args, says):
    out = _cli(*args)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_an_unreachable_head_fails_within_the_timeout_with_the_fix():
    """A head that does not answer (a closed port here) is named with the fix, at once, not retried for ever."""
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    out = _cli("ray-ocr", "in", "out", "--address", f"127.0.0.1:{port}", "--connect-timeout", "5")
    assert out.returncode == 1 and time.monotonic() - t0 < 60, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert f"cannot reach the Ray head at 127.0.0.1:{port} (from --address 127.0.0.1:{port}) within 5 s" in last
    assert "ray start --head --node-ip-address" in last and "give --address HOST:PORT" in last, last
