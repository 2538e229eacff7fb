"""What every command group shares: the command record and its help style, the way a command fails, progress
bars, argparse types.

The help style (``tests/cli/test_cli_style.py`` checks it on every subcommand): a description, every option's
default shown one way, ``(default: X)``, appended by :class:`HelpFormatter` from the option's own default (a help
text names a default itself only when it is computed, as ``(default: ...)``), and an example.
"""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Sequence, Tuple


@dataclass(frozen=True)
class Command:
    """One ``paddlex-npu`` subcommand: its name, help line, what it runs, the arguments it takes, an example."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    add_args: Callable[[argparse.ArgumentParser], None] = lambda p: None
    needs_route: bool = False  # install the route into PaddleX first
    example: str = ""  # one command line (and a comment), shown at the end of --help


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends ``(default: X)`` to every option whose default is set (not None, not a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if has_default(action) and action.option_strings and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def has_default(action: argparse.Action) -> bool:
    """Whether ``--help`` shows the option's default (not None, not a flag's False, not an empty list)."""
    default = action.default
    return not (default is None or default is False or default is argparse.SUPPRESS or default == [])


def add_commands(subparsers: argparse._SubParsersAction, commands: Sequence[Command]) -> None:
    """Register ``commands`` as subcommands (a group module's ``add_parsers`` calls this)."""
    for cmd in commands:
        epilog = f"example:\n  {cmd.example}" if cmd.example else None
        p = subparsers.add_parser(
            cmd.name, help=cmd.help, description=cmd.help, epilog=epilog, formatter_class=HelpFormatter
        )
        cmd.add_args(p)
        p.set_defaults(func=cmd.run, needs_route=cmd.needs_route)


@contextmanager
def progress(total: int, desc: str, unit: str, quiet: bool = False) -> Iterator[Any]:
    """A tqdm bar on stderr (nothing when ``quiet``); ``bar.update()`` per step."""
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet, dynamic_ncols=True) as bar:
        yield bar


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
