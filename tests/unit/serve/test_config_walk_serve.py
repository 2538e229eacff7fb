"""What serve reads of a pipeline config goes through the one walker (``paddlex/pipelines.py``'s ``sub_modules``):
a package check names a nested SubModule by its dotted path; the first SubModule of a module name is found in the
walker's order (a pipeline's own, then its SubPipelines')."""

from __future__ import annotations

import pytest

from paddlex_npu.errors import ModelFileError
from paddlex_npu.serve.route import submodule
from paddlex_npu.serve.workers import check_packages


def _config(tmp_path):
    det = tmp_path / "det"
    det.mkdir()
    (det / "inference.yml").write_text("Global:\n  model_name: PP-OCRv5_mobile_det\n", encoding="utf-8")
    (tmp_path / "rec").mkdir()  # no inference.yml: no model package
    return {
        "pipeline_name": "layout_parsing",
        "SubModules": {"TextDetection": {"module_name": "text_detection", "model_dir": str(det)}},
        "SubPipelines": {
            "GeneralOCR": {
                "SubModules": {
                    "TextDetection": {"module_name": "text_detection", "model_dir": str(det), "batch_size": 2},
                    "TextRecognition": {
                        "module_name": "text_recognition",
                        "model_name": "PP-OCRv5_mobile_rec",
                        "model_dir": str(tmp_path / "rec"),
                    },
                }
            }
        },
    }


def test_a_nested_package_that_is_no_model_folder_is_named_by_its_dotted_path(tmp_path):
    with pytest.raises(ModelFileError) as caught:
        check_packages(_config(tmp_path))
    said = str(caught.value)
    assert said.startswith("SubPipelines.GeneralOCR.SubModules.TextRecognition (PP-OCRv5_mobile_rec) of the pipeline")
    assert "holds no inference.yml" in said


def test_the_first_submodule_of_a_name_in_the_walkers_order(tmp_path):
    config = _config(tmp_path)
    assert "batch_size" not in submodule(config, "text_detection")  # the pipeline's own before a nested one
    assert submodule(config, "text_recognition")["model_name"] == "PP-OCRv5_mobile_rec"
    assert submodule(config, "layout_detection") is None
