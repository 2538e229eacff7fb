"""``precision-preview``'s packages: every sub-model of the pipeline config, a document pipeline's nested OCR too
(the one walker, ``paddlex/pipelines.py``'s ``sub_modules``), each with the precision its manifest records."""

from __future__ import annotations

from paddlex_npu.om import manifest as mf
from paddlex_npu.reports.precision_preview import package_precisions


def _package(root, name, precision=None):
    folder = root / name
    folder.mkdir()
    inputs = [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    mf.parse({"mode": "static", "inputs": inputs, "precision": precision}, name).save(folder / mf.MANIFEST_NAME)
    return str(folder)


def test_a_document_pipelines_nested_ocr_packages_are_previewed(tmp_path):
    config = {
        "pipeline_name": "layout_parsing",
        "SubModules": {"LayoutDetection": {"model_dir": _package(tmp_path, "layout", "fp32")}},
        "SubPipelines": {
            "GeneralOCR": {
                "SubModules": {
                    "TextDetection": {"model_dir": _package(tmp_path, "det", "fp16")},
                    "TextRecognition": {"model_dir": _package(tmp_path, "rec")},  # none recorded: fp16
                    "TextLineOrientation": {"model_dir": str(tmp_path / "no-manifest")},
                },
            },
        },
    }
    assert package_precisions(config) == {"layout": "fp32", "det": "fp16", "rec": "fp16"}
