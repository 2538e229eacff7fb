"""``paddlex-npu patch``: check, apply or revert the fork patch on PaddleX's source."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Command, add_commands, fail


def run_patch(args: argparse.Namespace) -> int:
    from ..errors import PatchError
    from ..paddlex.fork_patch import run_action

    try:
        lines = run_action(args.action, Path(args.paddlex_dir) if args.paddlex_dir else None, args.paddlex_version)
    except PatchError as exc:
        return fail("patch", exc)
    print("\n".join(lines))
    return 0


def patch_args(p: argparse.ArgumentParser) -> None:
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("check", "say whether the patch applies cleanly or is applied; change nothing"),
        ("apply", "apply the patch (all files or none)"),
        ("revert", "restore the patched files byte for byte"),
    ):
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name, help=text)
    p.add_argument(
        "--paddlex-dir",
        help="the paddlex package folder itself, e.g. .../site-packages/paddlex or <checkout>/paddlex "
        "(default: the installed one)",
    )
    p.add_argument(
        "--paddlex-version",
        help="its PaddleX version, e.g. 3.7.2 (default: its .version or __version__; the .dist-info beside "
        "site-packages/paddlex; the PKG-INFO or nearest git tag vX.Y.Z of a source tree's paddlex folder). "
        "Needed for a copied package folder, which carries no version",
    )


COMMANDS = (
    Command(
        "patch",
        "check/apply/revert the fork patch on PaddleX's source",
        run_patch,
        patch_args,
        example="paddlex-npu patch --check",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
