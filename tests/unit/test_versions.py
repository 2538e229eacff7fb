"""The supported PaddleX range is data in one place, and setup.cfg says the same."""

from __future__ import annotations

import configparser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from paddlex_npu.paddlex.versions import REQUIREMENT, SUPPORTED, TESTED

SETUP_CFG = Path(__file__).resolve().parents[2] / "setup.cfg"


def _requirements(text: str):
    return [Requirement(line) for line in text.strip().splitlines() if line.strip()]


def test_setup_cfg_requires_exactly_the_supported_range():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    declared = {r.name: r for r in _requirements(cfg["options"]["install_requires"])}
    assert declared["paddlex"].specifier == Requirement(REQUIREMENT).specifier
    for extra in _requirements(cfg["options.extras_require"]["ocr"]):
        if extra.name == "paddlex":
            assert extra.specifier == Requirement(REQUIREMENT).specifier


def test_the_adapter_ranges_tile_the_requirement_and_hold_the_tested_versions():
    union = Requirement(REQUIREMENT).specifier
    probes = [Version(f"3.{minor}.{patch}") for minor in range(0, 10) for patch in (0, 3)]
    for v in probes:
        owners = [name for name, spec in SUPPORTED.items() if v in SpecifierSet(spec)]
        assert len(owners) == (1 if v in union else 0), (v, owners)
    for name, version in TESTED.items():
        assert Version(version) in SpecifierSet(SUPPORTED[name])
