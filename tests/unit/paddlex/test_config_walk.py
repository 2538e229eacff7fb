"""The one walker of pipeline configs (``paddlex/pipelines.py``'s ``sub_modules``): every SubModule with its dotted
path, a pipeline's own first, then its SubPipelines' (recursing: a document pipeline's nested OCR too)."""

from __future__ import annotations

from pathlib import Path

from paddlex_npu.paddlex.pipelines import model_dirs, sub_modules

STRUCTURE = {
    "pipeline_name": "PP-StructureV3",
    "SubModules": {"LayoutDetection": {"module_name": "layout_detection", "model_dir": "om/layout"}},
    "SubPipelines": {
        "GeneralOCR": {
            "SubModules": {
                "TextDetection": {"module_name": "text_detection", "model_dir": "om/det"},
                "TextRecognition": {"module_name": "text_recognition"},
            },
        },
        "TableRecognition": {
            "SubModules": {"TableStructure": {"model_dir": "om/table"}},
            "SubPipelines": {"GeneralOCR": {"SubModules": {"TextDetection": {"model_dir": "om/det2"}}}},
        },
        "Skipped": None,
    },
    "use_doc_preprocessor": False,
}


def test_every_sub_module_with_its_dotted_path_nested_ones_too():
    assert [(where, sub.get("model_dir")) for where, sub in sub_modules(STRUCTURE)] == [
        ("SubModules.LayoutDetection", "om/layout"),
        ("SubPipelines.GeneralOCR.SubModules.TextDetection", "om/det"),
        ("SubPipelines.GeneralOCR.SubModules.TextRecognition", None),
        ("SubPipelines.TableRecognition.SubModules.TableStructure", "om/table"),
        ("SubPipelines.TableRecognition.SubPipelines.GeneralOCR.SubModules.TextDetection", "om/det2"),
    ]
    (_, rec), *_ = [w for w in sub_modules(STRUCTURE) if w[0].endswith("TextRecognition")]
    assert rec is STRUCTURE["SubPipelines"]["GeneralOCR"]["SubModules"]["TextRecognition"]  # the config's own dict


def test_model_dirs_are_the_walkers_and_a_model_spec_is_its_folder():
    assert model_dirs(STRUCTURE) == [Path(p) for p in ("om/layout", "om/det", "om/table", "om/det2")]
    assert model_dirs({"model_dir": "om/rec", "model_name": "PP-OCRv5_mobile_rec"}) == [Path("om/rec")]
    assert list(sub_modules({"pipeline_name": "OCR"})) == []
