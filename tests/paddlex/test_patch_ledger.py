"""The patch ledger (docs/patch-ledger.md) names exactly what the patcher's record says it patched, on this PaddleX.

The route is installed in a fresh interpreter (PaddleX, ``paddlex.model`` and PaddleOCR imported first, so every
alias of ``create_predictor`` is loaded), and what the record holds is compared with the ledger's rows for the
installed PaddleX version: an entry patched but not in the ledger, or in the ledger but not patched, fails. The
same for what a fork-patched PaddleX gets at run time (the fork hooks' record), against the rows marked for it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest
from packaging.version import Version

LEDGER = Path(__file__).resolve().parents[2] / "docs" / "patch-ledger.md"

# How a probe names what a record holds: an attribute by its owner, an item by its registry (PaddleX 3.5+).
NAMES = r"""
def name_of(owner):
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return owner.__name__

def keys_of(attributes, items):
    keys = [f"{name_of(owner)}.{name}" for owner, name, _, _ in attributes]
    if items:
        from paddlex.inference.models.bindings import default_registry
        from paddlex.inference.models.engines import InferenceEngine
    for mapping, key, _, _ in items:
        if mapping is InferenceEngine.all():
            keys.append(f"paddlex.inference.models.engines.InferenceEngine.all()[{key!r}]")
        else:
            assert any(mapping is m for m in default_registry._registry.values()), mapping
            keys.append(f"paddlex.inference.models.bindings.default_registry._registry[*][{key!r}]")
    return sorted(set(keys))
"""

PROBE = (
    r"""
import json, sys
import paddlex, paddlex.model
try:
    import paddleocr
except ImportError:
    pass
import paddlex_npu
from paddlex_npu.paddlex import patcher
"""
    + NAMES
    + r"""
if sys.argv[1] == "install":
    paddlex_npu.install()
    keys = keys_of(patcher.patched_attributes(), patcher.patched_items())
else:  # what the fork hooks apply on a fork-patched PaddleX, at its first routed call
    patcher.enable_fork(patcher.adapter())
    record = patcher.fork_record()
    keys = keys_of(record.attributes(), record.items())
print(json.dumps({"paddlex": paddlex.__version__, "patched": keys}))
"""
)
HEADER = "| patched | PaddleX | fork | why | retired by |"


def _applies(versions: str, installed: Version) -> bool:
    """Whether a ledger row's PaddleX column ("3.5-3.7", "3.7") covers the installed version (by minor)."""
    low, _, high = versions.strip().partition("-")
    minor = Version(f"{installed.major}.{installed.minor}")
    return Version(low) <= minor <= Version(high or low)


def ledger(installed: Version, fork: bool = False) -> Set[str]:
    """What the ledger's route table says is patched on ``installed``: by ``install()``, or (``fork``) on a
    fork-patched PaddleX (its rows marked yes in the fork column)."""
    table = LEDGER.read_text(encoding="utf-8").split(HEADER, 1)[1]
    rows = [line for line in table.split("\n\n", 1)[0].splitlines()[2:] if line.startswith("|")]
    names: Set[str] = set()
    for row in rows:
        cells = row.split(" | ")
        if _applies(cells[1], installed) and (not fork or cells[2].strip() == "yes"):
            names |= {n for n in re.findall(r"`([^`]+)`", cells[0].lstrip("| ")) if "." in n}
    return names


def _probe(mode: str) -> dict:
    env = {**os.environ, "PADDLEX_NPU_AUTO_INSTALL": "0", "PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK": "True"}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["install", "fork"])
def test_the_patch_ledger_lists_exactly_what_the_patcher_records(mode):
    """``install``: what ``install()`` records; ``fork``: what a fork-patched PaddleX gets at its first routed
    call (``patcher.enable_fork``, the record kept for the process), against the rows marked for the fork."""
    probe = _probe(mode)
    patched, listed = set(probe["patched"]), ledger(Version(probe["paddlex"]), fork=mode == "fork")
    assert patched, "the patcher recorded nothing"
    assert not patched - listed, f"patched but missing from {LEDGER.name}: {sorted(patched - listed)}"
    assert not listed - patched, f"in {LEDGER.name} but not patched on PaddleX {probe['paddlex']}: {listed - patched}"


def test_the_serving_ledger_lists_exactly_what_serve_patches():
    """The serving patch (the pixel guard of PaddleX's decoders, the bounded fetchers of URL inputs) is made
    through the records of ``paddlex/serving.py``, named by the ledger's Serving table, and undone to the very
    same objects."""
    pytest.importorskip("fastapi", reason="the serving extra (requirements/serving.txt): the 3.7 environment only")
    from paddlex_npu.paddlex import serving
    from paddlex_npu.serve import fetch, images

    utils = serving.serving_utils()
    originals = (utils.file_to_images, utils.MAX_IMAGE_PIXELS, utils.get_raw_bytes_async, utils.get_raw_bytes)
    images.install(images.PixelLimits(max_image_pixels=1234))
    fetch.install(fetch.UrlPolicy())
    try:
        assert utils.MAX_IMAGE_PIXELS == 1234 and utils.file_to_images is not originals[0]
        assert utils.get_raw_bytes_async is not originals[2] and utils.get_raw_bytes is not originals[3]
        patched = {f"{owner.__name__}.{name}" for owner, name, _, _ in serving.patched_attributes()}
    finally:
        images.uninstall()
        fetch.uninstall()
    now = (utils.file_to_images, utils.MAX_IMAGE_PIXELS, utils.get_raw_bytes_async, utils.get_raw_bytes)
    assert now == originals and not serving.patched_attributes()
    table = LEDGER.read_text(encoding="utf-8").split("## Serving", 1)[1]
    rows = [line for line in table.split("| patched | PaddleX | why | retired by |", 1)[1].splitlines()[2:]]
    listed = {n for row in rows if row.startswith("|") for n in re.findall(r"`([^`]+)`", row.split(" | ")[0])}
    assert patched == listed, (patched, listed)


def test_the_serving_ledger_lists_every_operation_of_the_adapter():
    """Each assumption the adapter makes about PaddleX's serving app is a named operation, listed in the ledger."""
    from paddlex_npu.paddlex import serving

    table = LEDGER.read_text(encoding="utf-8").split("| operation | what it assumes", 1)[1].split("\n\n", 1)[0]
    listed = [re.findall(r"`([^`]+)`", row.split(" | ")[0])[0] for row in table.splitlines()[2:]]
    assert listed == list(serving.OPERATIONS)
