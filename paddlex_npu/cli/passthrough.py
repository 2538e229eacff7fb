"""``paddlex-npu paddlex`` / ``paddlex-npu paddleocr``: PaddleX's and PaddleOCR's own command lines with the route
installed; everything after the command name goes to their parser."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Optional

from .common import Command, add_commands, fail, install_route


def run_foreign_cli(main: Callable[[], Optional[int]], prog: str, rest: List[str]) -> int:
    """Run another tool's ``main()`` with the route installed; its parser reads ``sys.argv``, restored after."""
    install_route()
    saved, sys.argv = sys.argv, [prog, *rest]
    try:
        return main() or 0
    finally:
        sys.argv = saved


def run_paddlex(args: argparse.Namespace) -> int:
    install_route()  # before PaddleX's CLI module binds anything
    from ..paddlex.serving import paddlex_cli

    return run_foreign_cli(paddlex_cli(), "paddlex", args.rest)


def run_paddleocr(args: argparse.Namespace) -> int:
    try:
        from ..paddlex.serving import paddleocr_cli

        paddleocr_main = paddleocr_cli()
    except ImportError as exc:
        return fail("paddleocr", RuntimeError(f"PaddleOCR is not installed ({exc}): `pip install paddleocr`"))
    return run_foreign_cli(paddleocr_main, "paddleocr", args.rest)


# main() hands everything after these names to the wrapped tool before argparse sees it
PASSTHROUGH = {"paddlex": run_paddlex, "paddleocr": run_paddleocr}

COMMANDS = (
    Command(
        "paddlex",
        "run PaddleX's CLI with the plugin installed",
        run_paddlex,
        lambda p: p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `paddlex`"),
        example="paddlex-npu paddlex --pipeline ocr.yaml --input page.png --device npu:0 --engine om",
    ),
    Command(
        "paddleocr",
        "run PaddleOCR's CLI with the plugin installed",
        run_paddleocr,
        lambda p: p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `paddleocr`"),
        example="paddlex-npu paddleocr ocr -i page.png --device npu:0 --enable_hpi True --paddlex_config ocr.yaml",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
