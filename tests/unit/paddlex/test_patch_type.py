"""The one patch type (``paddlex/record.py``): ``requires`` checked before anything is patched, ``apply``
idempotent, ``revert`` back to the very same objects (module and instance attributes, a class's classmethod, a
slotted object's field)."""

from __future__ import annotations

import types
from typing import List

import pytest

from paddlex_npu.errors import UnsupportedPaddlexError
from paddlex_npu.paddlex.record import Applied, Patch, PatchRecord


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
