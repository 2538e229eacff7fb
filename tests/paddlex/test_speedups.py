"""The registry of the route's speed-ups (``paddlex_npu/paddlex/speedups.py``): a PaddleX without one speed-up's
target still installs the route, with that row off and one warning naming it and the PaddleX version (one case per
speed-up module, its target removed from this PaddleX); and adding a speed-up is one module and one row
(docs/architecture.md's recipe, followed here)."""

from __future__ import annotations

import functools
import importlib
import logging
import types
from typing import Any, Callable, List

import numpy as np
import pytest

import paddlex_npu
from paddlex_npu.paddlex import speedups
from paddlex_npu.paddlex.patcher import patched_attributes
from paddlex_npu.paddlex.record import MISSING, Row, RowPatch, find
from paddlex_npu.paddlex.versions import paddlex_version

REC = "paddlex.inference.models.text_recognition.processors"
OCR = "paddlex.inference.pipelines.ocr.pipeline"
POST = "paddlex.inference.pipelines.table_recognition.table_recognition_post_processing"

# (speed-up module, PaddleX module, the name taken out of it, the row's target that is then missing)
REMOVED = [
    ("ctc_decode", REC, "CTCLabelDecode", f"{REC}:CTCLabelDecode.__call__"),
    ("host_steps", OCR, "_OCRPipeline", f"{OCR}:_OCRPipeline.predict"),
    ("table_match", POST, "match_table_and_ocr", f"{POST}.match_table_and_ocr"),
]


@pytest.fixture()
def off_route():
    """The route uninstalled for the test, installed again after it (as the rest of the suite has it)."""
    importlib.import_module("paddlex")  # the route installs when PaddleX loads
    if paddlex_npu.is_installed():
        paddlex_npu.uninstall()
    yield
    if paddlex_npu.is_installed():
        paddlex_npu.uninstall()
    paddlex_npu.install()


def _patched() -> set:
    return {(id(owner), name) for owner, name, _, _ in patched_attributes()}


def test_every_speedup_module_is_in_the_registry_once():
    names = [patch.name.split()[0] for patch in speedups.SPEEDUPS]
    assert sorted(names) == sorted(module for module, *_ in REMOVED) and len(set(names)) == len(names)


@pytest.mark.parametrize("module, paddlex_module, name, target", REMOVED, ids=[r[0] for r in REMOVED])
def test_a_paddlex_without_a_speedups_target_installs_the_route_with_that_row_off(
    off_route, monkeypatch, caplog, module, paddlex_module, name, target
):
    monkeypatch.delattr(importlib.import_module(paddlex_module), name)
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        assert paddlex_npu.install() is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"PaddleX {paddlex_version()}: the route's {module} " in warnings[0] and target in warnings[0]
    rows = [row for patch in speedups.SPEEDUPS for row in patch.rows]
    assert [row.target for row in rows if row.missing()] == [target]
    assert {(id(find(row.owner)), row.attribute) for row in rows if row.target != target} <= _patched()
    assert paddlex_npu.is_installed()  # the adapter's hooks and every other row: the route is on
    paddlex_npu.uninstall()


# ---- the recipe of docs/architecture.md ("A route speed-up"), followed once ----


def padded_batch(original: Callable[..., Any]) -> Callable[..., Any]:
    """Recognition's ``ToBatch.__call__`` writing each line once into the zero-padded float32 batch, where PaddleX
    ``np.pad``s each line to the widest and stacks them (two copies); anything else to PaddleX's."""

    @functools.wraps(original)
    def __call__(self: Any, imgs: List[np.ndarray]) -> List[np.ndarray]:  # noqa: N807 - replaces __call__
        if not imgs or any(img.ndim != 3 or img.shape[:2] != imgs[0].shape[:2] for img in imgs):
            return original(self, imgs)
        channels, height = imgs[0].shape[:2]
        batch = np.zeros((len(imgs), channels, height, max(img.shape[2] for img in imgs)), dtype=np.float32)
        for i, img in enumerate(imgs):
            batch[i, :, :, : img.shape[2]] = img
        return [batch]

    return __call__


def test_a_route_speedup_is_one_module_and_one_row(off_route, monkeypatch):
    # 1. one module: the step, and its row (owner, attribute, wrapper; what it uses)
    module = types.ModuleType("example_speedup")
    module.padded_batch = padded_batch
    module.ROWS = (Row(f"{REC}:ToBatch", "__call__", padded_batch),)
    # 2. one row in the registry
    monkeypatch.setattr(speedups, "SPEEDUPS", (*speedups.SPEEDUPS, RowPatch("example_speedup", module.ROWS)))

    owner = find(f"{REC}:ToBatch")
    original = owner.__dict__.get("__call__", MISSING)
    assert paddlex_npu.install() is True
    (entry,) = [e for e in patched_attributes() if e[0] is owner and e[1] == "__call__"]  # in the route's record
    assert entry[2] is original and owner.__dict__["__call__"] is entry[3]
    # 3. the same output as PaddleX's own, bit for bit (the differential test a speed-up comes with)
    rng = np.random.default_rng(0)
    for dtype in (np.uint8, np.float32, np.float64):
        lines = [rng.integers(0, 256, (3, 48, w)).astype(dtype) for w in (10, 320, 97, 1)]
        (ours,), (theirs,) = owner()(lines), original(owner(), lines)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    paddlex_npu.uninstall()
    assert owner.__dict__.get("__call__", MISSING) is original
