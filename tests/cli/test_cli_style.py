"""One CLI style across every subcommand (issue 32.5): the top-level help is whole and points at the docs; every
option's default is shown one way, ``(default: X)``, from the option's own default; every subcommand's help ends
with an example of itself; every server listens on the same default address."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from paddlex_npu.cli import build_parser


def _subparsers() -> dict:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


SUBCOMMANDS = sorted(_subparsers())


def option_problems(parser: argparse.ArgumentParser) -> list:
    """Options whose help names a default other than as ``(default: X)``, or hides a default they have."""
    formatter = parser._get_formatter()
    problems = []
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS) or action.dest == "help":
            continue
        text = " ".join(formatter._expand_help(action).split())
        mentions = len(re.findall(r"\bdefaults?\b|\bNone\b", text))
        shown = re.findall(r"\(default: ([^)]*)\)", text)
        if mentions != len(shown) or len(shown) > 1:
            problems.append(f"{action.option_strings[0]}: {text!r}")
        elif action.default not in (None, False, [], argparse.SUPPRESS) and shown != [str(action.default)]:
            problems.append(f"{action.option_strings[0]}: default {action.default!r} not shown as (default: X)")
    return problems


def test_the_top_level_help_is_whole_and_points_at_the_docs():
    text = build_parser().format_help()
    description = build_parser().description
    assert description.rstrip().endswith("."), description
    assert "docs/" in text and "paddlex-npu assets" in text, text


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_option_shows_its_default_one_way(name):
    assert not option_problems(_subparsers()[name]), option_problems(_subparsers()[name])


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_an_example_of_itself(name):
    text = _subparsers()[name].format_help()
    assert re.search(rf"example:\n  paddlex-npu {re.escape(name)}\b", text), text[-400:]


def test_the_style_check_catches_a_default_written_another_way():
    p = argparse.ArgumentParser(formatter_class=_subparsers()["serve"].formatter_class)
    p.add_argument("--a", default=3, help="a number (default 3)")
    p.add_argument("--b", help="None: the machine's")
    p.add_argument("--c", default=4, help="fine")
    assert [x.split(":")[0] for x in option_problems(p)] == ["--a", "--b"]


def test_every_server_listens_on_the_same_default_address():
    hosts = {
        name: parser.get_default("host")
        for name, parser in _subparsers().items()
        if any("--host" in a.option_strings for a in parser._actions)
    }
    assert {"serve", "triton-serve", "ray-serve"} <= set(hosts), hosts
    assert set(hosts.values()) == {"127.0.0.1"}, hosts


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_example_parses(name):
    from paddlex_npu.cli import passthrough

    example = re.search(r"example:\n  (.*)", _subparsers()[name].format_help()).group(1)
    argv = shlex.split(example.split("   #")[0])[1:]
    if name in passthrough.PASSTHROUGH:  # the rest belongs to PaddleX's or PaddleOCR's own parser
        return
    args = build_parser().parse_args(argv)  # exits (SystemExit) on an option the command lacks
    assert args.command == name


def test_triton_serves_restart_limit_default_is_the_watchdogs():
    from paddlex_npu.triton.watch import DEFAULT_RELOADS

    assert _subparsers()["triton-serve"].get_default("restart_limit") == DEFAULT_RELOADS
