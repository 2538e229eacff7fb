"""A request's pipeline options, checked in the server before a worker sees them (serve/options.py): the sentence a
client gets back (the server answers 422 with it), or None for options PaddleX runs with."""

from __future__ import annotations

import math

import pytest

from paddlex_npu.serve.options import check_options

OCR = {
    "pipeline_name": "OCR",
    "SubModules": {"TextDetection": {}, "TextRecognition": {}},
    "SubPipelines": {},
}
FULL = {
    "pipeline_name": "OCR",
    "use_doc_preprocessor": True,
    "use_textline_orientation": True,
    "SubModules": {"TextDetection": {}, "TextRecognition": {}, "TextLineOrientation": {}},
    "SubPipelines": {
        "DocPreprocessor": {"SubModules": {"DocOrientationClassify": {}, "DocUnwarping": {}}},
    },
}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"text_det_thresh": 0, "text_det_box_thresh": 1, "text_rec_score_thresh": 0.5},
        {"text_det_limit_side_len": 1, "text_det_unclip_ratio": 0.01, "text_det_limit_type": "min"},
        {"text_det_limit_type": "max", "text_det_thresh": None, "use_doc_unwarping": None},
        {"use_doc_orientation_classify": False, "use_doc_unwarping": False, "use_textline_orientation": False},
        {"some_other_key": "anything", "text_det_thresh": True},
    ],
)
def test_options_paddlex_runs_with_pass(kwargs):
    assert check_options(OCR, kwargs) is None


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        ({"text_det_thresh": math.nan}, "textDetThresh is nan: give a finite number"),
        ({"text_det_limit_side_len": math.inf}, "textDetLimitSideLen is inf: give a finite number"),
        ({"unknown_knob": -math.inf}, "unknown_knob is -inf: give a finite number"),
        ({"text_det_thresh": 1.01}, "textDetThresh is 1.01: give a number from 0 to 1"),
        ({"text_det_box_thresh": -0.1}, "textDetBoxThresh is -0.1: give a number from 0 to 1"),
        ({"text_rec_score_thresh": 2}, "textRecScoreThresh is 2: give a number from 0 to 1"),
        ({"text_det_limit_side_len": 0}, "textDetLimitSideLen is 0: give a number above 0"),
        ({"text_det_unclip_ratio": -1.5}, "textDetUnclipRatio is -1.5: give a number above 0"),
        (
            {"text_det_limit_type": "mid"},
            "textDetLimitType 'mid' is not supported (PaddleX: not support limit type): give one of min, max",
        ),
        ({"text_det_thresh": 0.5, "text_det_box_thresh": 7}, "textDetBoxThresh is 7: give a number from 0 to 1"),
    ],
)
def test_bad_values_get_the_field_and_what_it_takes(kwargs, problem):
    assert check_options(OCR, kwargs) == problem


@pytest.mark.parametrize("key", ["use_doc_orientation_classify", "use_doc_unwarping", "use_textline_orientation"])
def test_a_module_the_pipeline_was_not_built_with_is_refused(key):
    field = {"use_doc_orientation_classify": "useDocOrientationClassify", "use_doc_unwarping": "useDocUnwarping"}
    problem = check_options(OCR, {key: True})
    assert problem == (
        f"{field.get(key, 'useTextlineOrientation')} is true, but this server's pipeline has no model for it "
        "(PaddleX: the models are not initialized): send false, or serve a pipeline YAML that has the module"
    )
    assert check_options(FULL, {key: True}) is None
    for name in ("PP-OCRv5", "ocr"):
        assert check_options({**OCR, "pipeline_name": name}, {key: True}) == problem
    assert check_options({**OCR, "pipeline_name": "layout_parsing"}, {key: True}) is None  # other pipelines: theirs


def test_a_module_switched_off_in_the_yaml_counts_as_missing():
    assert check_options({**FULL, "use_textline_orientation": False}, {"use_textline_orientation": True})
    assert check_options({**FULL, "use_doc_preprocessor": False}, {"use_doc_unwarping": True})
    assert check_options({**FULL, "use_doc_preprocessor": False}, {"use_doc_orientation_classify": True})
    pre = {"SubModules": {"DocOrientationClassify": {}, "DocUnwarping": {}}, "use_doc_unwarping": False}
    off = {**FULL, "SubPipelines": {"DocPreprocessor": pre}}
    assert (
        check_options(off, {"use_doc_unwarping": True})
        and check_options(off, {"use_doc_orientation_classify": 1}) is None
    )
    only_unwarp = {**FULL, "SubPipelines": {"DocPreprocessor": {"SubModules": {"DocUnwarping": {}}}}}
    assert check_options(only_unwarp, {"use_doc_unwarping": True}) is None
    assert check_options(only_unwarp, {"use_doc_orientation_classify": True})
    bare = {"pipeline_name": "OCR", "SubModules": None, "SubPipelines": {"DocPreprocessor": {"SubModules": None}}}
    assert check_options(bare, {"use_doc_unwarping": True}) and check_options(bare, {"use_textline_orientation": True})


def test_modules_are_on_unless_the_yaml_switches_them_off_and_none_values_are_skipped():
    implicit = {k: v for k, v in FULL.items() if k not in ("use_doc_preprocessor", "use_textline_orientation")}
    for key in ("use_doc_orientation_classify", "use_doc_unwarping", "use_textline_orientation"):
        assert check_options(implicit, {key: True}) is None  # PaddleX's defaults: the modules run
    problem = check_options(OCR, {"text_det_thresh": None, "text_det_box_thresh": 7})
    assert problem == "textDetBoxThresh is 7: give a number from 0 to 1"  # a None value is skipped, not the end
