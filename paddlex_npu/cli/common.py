"""What every command group shares: the command record, the way a command fails, argparse types."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple


@dataclass(frozen=True)
class Command:
    """One ``paddlex-npu`` subcommand: its name, help line, what it runs and the arguments it takes."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    add_args: Callable[[argparse.ArgumentParser], None] = lambda p: None
    needs_route: bool = False  # install the route into PaddleX first
    show_defaults: bool = False  # --help shows each option's default


def add_commands(subparsers: argparse._SubParsersAction, commands: Sequence[Command]) -> None:
    """Register ``commands`` as subcommands (a group module's ``add_parsers`` calls this)."""
    for cmd in commands:
        formatter = argparse.ArgumentDefaultsHelpFormatter if cmd.show_defaults else argparse.HelpFormatter
        p = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.help, formatter_class=formatter)
        cmd.add_args(p)
        p.set_defaults(func=cmd.run, needs_route=cmd.needs_route)


def install_route() -> None:
    from ..paddlex.patcher import install, is_installed

    if not is_installed():
        install()


def fail(command: str, exc: Exception) -> int:
    """Print ``paddlex-npu COMMAND: message`` on stderr; the exit status 1."""
    print(f"paddlex-npu {command}: {exc}", file=sys.stderr)
    return 1


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1: give 1 or more")
    return value


def positive_number(text: str) -> float:
    """argparse type: a number above 0 (e.g. megabytes)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give one above 0") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: give a number above 0")
    return value


def key_value(text: str) -> Tuple[str, str]:
    """argparse type: KEY=VALUE."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. accelerator=huawei-Ascend310P")
    return key, value


def positive_ints(text: str) -> List[int]:
    """argparse type: comma-separated whole numbers >= 1 ('1,2,3')."""
    values = [t.strip() for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no number: give whole numbers >= 1, e.g. 1,2,3")
    return [positive_int(v) for v in values]


def _seconds(text: str, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise argparse.ArgumentTypeError(f"{text} seconds: give a number {'>= 0' if allow_zero else 'above 0'}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: seconds above 0."""
    return _seconds(text, allow_zero=False)


def seconds_or_zero(text: str) -> float:
    """argparse type: seconds, 0 or more."""
    return _seconds(text, allow_zero=True)
