"""The same route on a real Ascend NPU. Skipped unless ais_bench is installed and an OM package is given.

    PADDLEX_NPU_TEST_OM_ROOT=/path/with/PP-OCRv4_mobile_det,PP-OCRv4_mobile_rec  pytest -m npu
(each folder: inference.yml + inference.om built by ATC from the folder's inference.onnx with dymshape ranges)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from paddlex_npu.samples import assets
from tests.helpers import EXPECTED, norm, run_ocr

OM_ROOT = os.environ.get("PADDLEX_NPU_TEST_OM_ROOT")

pytestmark = [
    pytest.mark.npu,
    pytest.mark.skipif(
        importlib.util.find_spec("ais_bench") is None,
        reason="needs a real Ascend NPU: ais_bench/aclruntime wheels are not installed",
    ),
    pytest.mark.skipif(not OM_ROOT, reason="needs PADDLEX_NPU_TEST_OM_ROOT with ATC-built OM packages"),
]


def _ocr(runtime: str, images):
    from paddlex import create_pipeline

    hpi = {"backend": "om", "device_type": "npu", "device_id": 0, "backend_config": {"runtime": runtime}}
    p = create_pipeline(config=assets.ocr_pipeline_config(Path(OM_ROOT)), device="npu:0", use_hpip=True, hpi_config=hpi)
    try:
        return run_ocr(p, images)
    finally:
        p.close()


def test_ocr_on_the_device_matches_the_reference(images):
    """The same packages (inference.om for the device, inference.onnx for the reference) on the same images:
    the same texts, boxes within 2 px (fp16 on the device)."""
    device = _ocr("ais_bench", images)
    reference = _ocr("reference", images)
    for key in images:
        assert device[key]["texts"] == reference[key]["texts"], key
        for a, b in zip(device[key]["boxes"], reference[key]["boxes"]):
            assert max(abs(x - y) for x, y in zip(a, b)) <= 2, (key, a, b)
    assert norm(reference["english"]["texts"]) == norm(EXPECTED["english"])


def test_selftest_passes_on_the_device():
    """`paddlex-npu selftest --om-root $PADDLEX_NPU_TEST_OM_ROOT`: the same code, as a user runs it."""
    from paddlex_npu.reports.selftest import run_selftest

    report = run_selftest(Path(OM_ROOT))
    assert report.ok, report.to_json()
