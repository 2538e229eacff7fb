"""The operations options of the CLI: ``--help`` shows the defaults of serve, triton-serve and k8s; serve refuses
bad numbers for its limits before starting anything, naming the option."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["serve", "triton-serve", "k8s"])
def test_help_shows_the_defaults(command):
    out = _cli(command, "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    expected = {
        "serve": ["(default: 8080)", "(default: 127.0.0.1)", "(default: 40000000)", "(default: text)"],
        "triton-serve": ["(default: 8000)", "(default: 8002)", "(default: 127.0.0.1)"],
        "k8s": ["(default: huawei.com/Ascend310P)", "(default: /models)", "(default: paddlex-npu)"],
    }[command]
    for shown in expected:
        assert shown in text, (shown, out.stdout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-body-mb", "-3"], "argument --max-body-mb: -3: give a number above 0"),
        (["--max-body-mb", "lots"], "argument --max-body-mb: 'lots' is not a number"),
        (["--max-image-pixels", "0"], "argument --max-image-pixels: 0 is below 1"),
        (["--workers", "0"], "argument --workers: 0 is below 1"),
        (["--shutdown-grace", "-1"], "argument --shutdown-grace: -1 seconds: give a number >= 0"),
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    ],
)
def test_serve_refuses_bad_limits_naming_the_option(args, message):
    out = _cli("serve", "pipeline.yaml", *args)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"paddlex-npu serve: error: {message}" in out.stderr, out.stderr
