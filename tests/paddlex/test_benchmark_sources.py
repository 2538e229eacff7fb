"""PaddleX's own engines in the benchmark run the model a reduced package was built from: the package's ONNX
with the reduction taken off gives the source model's outputs exactly (paddlex_npu.perf.source_models)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from paddlex_npu.errors import ModelFileError
from paddlex_npu.om import manifest as mf
from paddlex_npu.perf.serve_load import ocr_packages
from paddlex_npu.perf.source_models import reductions, source_config
from paddlex_npu.samples import assets


@pytest.fixture(scope="module")
def packages(asset_root, tmp_path_factory):
    return ocr_packages(asset_root, tmp_path_factory.mktemp("bench") / "packages", assets.DET, assets.REC)


def _run(onnx_path, x):
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return [o.name for o in session.get_outputs()], session.run(None, {session.get_inputs()[0].name: x})


def test_the_source_of_a_converted_package_is_the_model_it_was_built_from(packages, asset_root, tmp_path):
    """The reduced recogniser and the device-normalising detector, each given back as the bundled model."""
    config = assets.ocr_pipeline_config(packages)
    assert reductions(config) == {assets.REC: True}
    source, names = source_config(config, tmp_path)
    assert names == [assets.DET, assets.REC]
    det, rec = (source["SubModules"][k]["model_dir"] for k in ("TextDetection", "TextRecognition"))
    assert sorted(p.name for p in (tmp_path / f"1-{assets.REC}").iterdir()) == ["inference.onnx", "inference.yml"]
    rng = np.random.default_rng(0)
    for folder, model, x in (
        (rec, assets.REC, rng.random((2, 3, 48, 200), dtype=np.float32)),
        (det, assets.DET, rng.standard_normal((1, 3, 96, 128), dtype=np.float32)),
    ):
        got_names, got = _run(f"{folder}/inference.onnx", x)
        want_names, want = _run(asset_root / "om" / model / "inference.onnx", x)
        assert got_names == want_names and got[0].shape == want[0].shape and np.array_equal(got[0], want[0])
    assert config["SubModules"]["TextRecognition"]["model_dir"] == str(packages / assets.REC)  # given one unchanged


def test_a_manifest_that_records_a_reduction_the_onnx_lacks_is_named(packages, asset_root, tmp_path):
    folder = tmp_path / "rec"
    shutil.copytree(asset_root / "om" / assets.REC, folder)  # the unreduced ONNX ...
    shutil.copyfile(packages / assets.REC / mf.MANIFEST_NAME, folder / mf.MANIFEST_NAME)  # ... a reduced manifest
    with pytest.raises(ModelFileError, match="records a ctc_greedy reduction but the ONNX does not end in it"):
        source_config(assets.ocr_pipeline_config(tmp_path, rec="rec"), tmp_path / "work")


def test_a_report_says_which_route_it_measured():
    """The planner and the chart read it: a report from before the route was recorded says so."""
    from paddlex_npu.perf.benchmark import BenchmarkReport

    old = BenchmarkReport.from_dict(
        {"runtime": "simulated", "cores": 2, "cpu": "x", "paddlex": "3.7.2", "inputs": 1, "repeat": 1, "routes": []}
    )
    assert old.route_text().startswith("NPU route not recorded (reports before 2026-12-05 ran the bundled")
    new = BenchmarkReport.from_dict(
        {**old.as_dict(), "reduced": {assets.REC: True}, "route_recorded": True, "cpu_unreduced": [assets.REC]}
    )
    assert new.route_text() == (
        f"NPU route: {assets.REC} CTC output reduced on the device (as convert builds it); PaddleX's CPU engines "
        f"ran the models the packages were built from ({assets.REC} without what convert added on the device)"
    )


def test_a_document_result_is_read_as_its_texts_tables_and_blocks():
    """The benchmark compares document results by their page OCR's texts and boxes, their tables' HTML and their
    layout blocks (layout_parsing's dicts, PP-StructureV3's ``LayoutBlock`` objects); an OCR result by its own."""
    from paddlex.inference.pipelines.layout_parsing.layout_objects import LayoutBlock

    from paddlex_npu.perf.benchmark import agreement, reading

    ocr = {"rec_texts": ["Item", "Qty"], "rec_polys": np.zeros((2, 4, 2))}
    v3 = {"overall_ocr_res": ocr, "parsing_res_list": [LayoutBlock("title", [0, 0, 9, 9], "Report")]}
    v1 = {"overall_ocr_res": ocr, "table_res_list": [{"pred_html": "<table/>"}], "parsing_res_list": []}
    assert reading(v3)[0] == ["Item", "Qty", "title: Report"]
    assert reading(v1)[0] == ["Item", "Qty", "<table/>"]
    assert reading(ocr)[0] == ["Item", "Qty"] and reading({"boxes": []}) is None
    other = {**v3, "parsing_res_list": [LayoutBlock("text", [0, 0, 9, 9], "Report")]}
    assert agreement([[reading(v3)]], [[reading(other)]])["texts_equal"] == 0
