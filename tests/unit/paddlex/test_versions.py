"""The supported PaddleX range is data in one place, and setup.cfg says the same."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from paddlex_npu.paddlex.versions import INSTALL_REQUIREMENT, REQUIREMENT, SUPPORTED, TESTED

SETUP_CFG = Path(__file__).resolve().parents[3] / "setup.cfg"


def _lines(text: str):
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


def _requirements(text: str):
    return [Requirement(line) for line in text.strip().splitlines() if line.strip()]


def test_setup_cfg_requires_paddlex_without_an_upper_bound():
    """pip must let the next PaddleX in (the next PaddleOCR pins it); the route checks the range itself."""
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    declared = {r.name: r for r in _requirements(_lines(cfg["options"]["install_requires"]))}
    assert declared["paddlex"].specifier == Requirement(INSTALL_REQUIREMENT).specifier
    assert not [s for s in declared["paddlex"].specifier if s.operator in ("<", "<=", "==", "~=")]
    assert Requirement(INSTALL_REQUIREMENT).specifier.contains("9.0") and min(
        s.version for s in Requirement(REQUIREMENT).specifier if s.operator == ">="
    ) == min(s.version for s in Requirement(INSTALL_REQUIREMENT).specifier)
    for extra in _requirements(_lines(cfg["options.extras_require"]["ocr"])):
        if extra.name == "paddlex":
            assert extra.specifier == Requirement(INSTALL_REQUIREMENT).specifier


def test_a_newer_paddlex_is_refused_with_the_override_and_allowed_with_it(monkeypatch):
    from paddlex_npu.errors import UnsupportedPaddlexError
    from paddlex_npu.paddlex.patcher import select_adapter

    monkeypatch.delenv("PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX", raising=False)
    with pytest.raises(UnsupportedPaddlexError, match="set PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX=1 to try this newer"):
        select_adapter("3.8.0")
    monkeypatch.setenv("PADDLEX_NPU_ALLOW_UNTESTED_PADDLEX", "1")
    assert select_adapter("3.8.0") == select_adapter("4.1.0") == "paddlex_35"
    with pytest.raises(UnsupportedPaddlexError, match="installed PaddleX is 2.1.0: install a supported one") as err:
        select_adapter("2.1.0")  # older than supported: the override does not apply, nor is it offered
    assert "ALLOW_UNTESTED" not in str(err.value)


def test_the_adapter_ranges_tile_the_requirement_and_hold_the_tested_versions():
    union = Requirement(REQUIREMENT).specifier
    probes = [Version(f"3.{minor}.{patch}") for minor in range(0, 10) for patch in (0, 3)]
    for v in probes:
        owners = [name for name, spec in SUPPORTED.items() if v in SpecifierSet(spec)]
        assert len(owners) == (1 if v in union else 0), (v, owners)
    for name, version in TESTED.items():
        assert Version(version) in SpecifierSet(SUPPORTED[name])
