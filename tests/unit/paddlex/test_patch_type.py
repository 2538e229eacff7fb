"""The one patch type (``paddlex/record.py``): ``requires`` checked before anything is patched, ``apply``
idempotent, ``revert`` back to the very same objects (module and instance attributes, a class's classmethod, a
slotted object's field); a patch made of rows derives both from its rows."""

from __future__ import annotations

import sys
import types
from typing import List

import pytest

from paddlex_npu.errors import UnsupportedPaddlexError
from paddlex_npu.paddlex.record import MISSING, PATCHED_MARK, Applied, Patch, PatchRecord, Row, RowPatch, find


class Host:
    @classmethod
    def get(cls) -> str:
        return "original"


class Slotted:
    __slots__ = ("call",)

    def __init__(self) -> None:
        self.call = len


class Replace(Patch):
    name = "a test patch"

    def __init__(self, module: types.ModuleType, slotted: Slotted, lacks: List[str]) -> None:
        self.module, self.slotted, self.lacks = module, slotted, lacks

    def requires(self) -> List[str]:
        return self.lacks

    def apply(self, record: PatchRecord) -> None:
        record.set_attr(self.module, "value", self.module.value + 1)
        record.set_attr(Host, "get", classmethod(lambda cls: "ours"))
        record.set_attr(self.slotted, "call", sum)


def test_apply_is_idempotent_and_revert_restores_the_same_objects():
    module, slotted = types.ModuleType("m"), Slotted()
    module.value = 1
    original_get = Host.__dict__["get"]
    applied = Applied(Replace(module, slotted, []))
    applied.apply()
    applied.apply()  # again: replaces the first application, does not stack on it
    assert (module.value, Host.get(), slotted.call) == (2, "ours", sum) and len(applied.attributes()) == 3
    assert applied.revert() == [] and applied.revert() == []
    assert (module.value, Host.__dict__["get"], slotted.call) == (1, original_get, len)


def test_a_missing_requirement_is_refused_by_name_and_nothing_is_patched():
    module, slotted = types.ModuleType("m"), Slotted()
    module.value = 1
    said = "a test patch: this PaddleX lacks wrap the lifespan: x: unknown layout, not patched: do Y"
    with pytest.raises(UnsupportedPaddlexError, match=said):
        Applied(Replace(module, slotted, ["wrap the lifespan: x"]), "do Y").apply()
    assert module.value == 1 and Host.get() == "original" and slotted.call is len


# ---- a patch made of rows (the route's speed-ups): requires() and apply() derived from the rows ----


class Predictor:
    def process(self, x: int) -> int:
        return x + 1


def _doubled(original):
    def call(*args, **kwargs):
        return 2 * original(*args, **kwargs)

    return call


@pytest.fixture()
def host(monkeypatch) -> types.ModuleType:
    """A module standing for PaddleX's: a function and a class, importable by name."""
    module = types.ModuleType("fake_paddlex_host")
    module.score = lambda x: x
    module.Predictor = Predictor
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_find_names_a_module_its_first_name_of_several_and_an_attribute(host):
    assert find("fake_paddlex_host") is host
    assert find("fake_paddlex_host:Absent|Predictor") is Predictor
    assert find("fake_paddlex_host:Predictor.process") is Predictor.__dict__["process"]
    for spec in ("fake_paddlex_host:Absent", "fake_paddlex_host:Predictor.absent", "no_such_module_here:X"):
        assert find(spec) is MISSING


def test_rows_replace_wrap_and_fit_each_instance_once_and_revert(host):
    fits = []
    rows = [
        Row("fake_paddlex_host", "score", _doubled),
        Row("fake_paddlex_host:Predictor", "process", fit=fits.append),
    ]
    original = Predictor.__dict__["process"]
    applied = Applied(RowPatch("rows", rows))
    applied.apply()
    one, two = Predictor(), Predictor()
    assert host.score(3) == 6 and one.process(1) == 2 and one.process(2) == 3 and two.process(0) == 1
    assert fits == [one, two]  # each instance fitted on its first call only
    assert all(getattr(new, PATCHED_MARK) for _, _, _, new in applied.attributes())
    assert applied.revert() == []
    assert host.score(3) == 3 and Predictor.__dict__["process"] is original


def test_a_row_s_missing_target_or_use_is_named_and_only_the_others_apply(host):
    rows = [
        Row("fake_paddlex_host:Absent|Gone", "process", fit=print),
        Row("fake_paddlex_host", "score", _doubled, uses=("fake_paddlex_host:Predictor.absent",)),
        Row("fake_paddlex_host:Predictor", "process", _doubled),
    ]
    patch = RowPatch("rows", rows)
    assert patch.requires() == ["fake_paddlex_host:Absent|Gone.process", "fake_paddlex_host:Predictor.absent"]
    with pytest.raises(UnsupportedPaddlexError, match="rows: this PaddleX lacks fake_paddlex_host:Absent"):
        Applied(patch).apply()  # through Applied: all or nothing
    record = PatchRecord()
    patch.apply(record)  # the registry's way: the rows this PaddleX has
    assert [(o, n) for o, n, _, _ in record.attributes()] == [(Predictor, "process")]
    assert host.score(3) == 3 and Predictor().process(1) == 4
    assert record.revert() == [] and Predictor().process(1) == 2


def test_a_row_that_replaces_nothing_is_refused():
    with pytest.raises(TypeError, match="replaces nothing"):
        Row("fake_paddlex_host", "score")
