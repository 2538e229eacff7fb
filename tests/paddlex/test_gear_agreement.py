"""Gear packages read like dymshape: measured on rendered pages (the test images and pages of other sizes).

- Gears planned from the inputs' own preprocessed shapes (what ``paddlex-npu convert --gears auto`` does with
  enough gears): no padding happens, so texts and boxes are identical.
- The fixed grids of tests/helpers.py (det H/W, rec N x W): padding happens. Boxes stay within 2 px (detection
  pads with the image's edge, outputs are cut back exactly); texts are identical apart from spaces, which the
  v4 Chinese rec model reads from attention over the whole (padded) width; see docs/shape-modes.md "Gears and dymshape".
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from paddlex_npu.samples import assets
from tests.helpers import (
    CHINESE,
    DET_HW_GEARS,
    ENGLISH,
    NPU_HPI,
    PAGE,
    REC_DIMS_GEARS,
    norm,
    om_package,
    run_ocr,
    spy_session,
)
from tests.paddlex.compat import runner_of

LINES = [
    "Invoice 20481 issued on 12 March",
    "Total amount due 1234.56 EUR",
    "Please pay within thirty days",
    "Reference: ACME-77/B",
    "Thank you for your business",
    "Questions? Call 0800 555 0199",
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    d = tmp_path_factory.mktemp("pages")
    out = {
        "english": assets.render_text_image(ENGLISH, d / "english.png"),
        "chinese": assets.render_text_image(CHINESE, d / "chinese.png", cjk=True),
        "page": assets.render_text_image(PAGE, d / "page.png", size=28, width=900),
        "cjk": assets.render_text_image(
            ["文字识别测试页面", "动态形状推理"], d / "cjk.png", cjk=True, size=26, width=640
        ),
    }
    for i, (n, size, width) in enumerate([(2, 24, 700), (3, 30, None), (4, 22, 1200), (5, 26, 1000), (1, 40, None)]):
        out[f"p{i}"] = assets.render_text_image(LINES[i : i + n], d / f"p{i}.png", size=size, width=width)
    return out


def _run(root, pages, spy=False):
    from paddlex import create_pipeline

    p = create_pipeline(config=assets.ocr_pipeline_config(root), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        if not spy:
            return run_ocr(p, pages), None
        with spy_session(runner_of(p.text_det_model).session) as det, spy_session(
            runner_of(p.text_rec_model).session
        ) as rec:
            return run_ocr(p, pages), (det, rec)
    finally:
        p.close()


@pytest.fixture(scope="module")
def dymshape(asset_root, pages):
    return _run(asset_root / "om", pages, spy=True)


def _packages(asset_root, tmp_path, det, rec):
    root = tmp_path / "om"
    shutil.copytree(asset_root / "om", root)
    om_package(asset_root, assets.DET, root, det)
    om_package(asset_root, assets.REC, root, rec)
    return root


def _gears(calls, dims):
    shapes = sorted({tuple(c["shapes"][0][d] for d in dims) for c in calls})
    return [list(s) for s in shapes] + ([[s + 32 for s in shapes[0]]] if len(shapes) < 2 else [])


def _agreement(base, got):
    same = sum(base[k]["texts"] == got[k]["texts"] for k in base)
    same_no_spaces = sum(norm(base[k]["texts"]) == norm(got[k]["texts"]) for k in base)
    shift = max(
        float(np.max(np.abs(np.asarray(base[k]["boxes"]) - np.asarray(got[k]["boxes"])))) if base[k]["boxes"] else 0
        for k in base
        if len(base[k]["boxes"]) == len(got[k]["boxes"])
    )
    boxes_same = all(len(base[k]["boxes"]) == len(got[k]["boxes"]) for k in base)
    return same, same_no_spaces, shift, boxes_same


def test_planned_gears_read_exactly_like_dymshape(asset_root, tmp_path, pages, dymshape):
    base, (det_calls, rec_calls) = dymshape
    det = {**DET_HW_GEARS, "gears": _gears(det_calls, (2, 3))}
    rec = {**REC_DIMS_GEARS, "gears": _gears(rec_calls, (0, 3))}
    got, _ = _run(_packages(asset_root, tmp_path, det, rec), pages)
    same, _, shift, boxes_same = _agreement(base, got)
    print(f"planned gears: texts {same}/{len(pages)} identical, boxes within {shift} px")
    assert same == len(pages) and boxes_same and shift <= 2


def test_grid_gears_keep_boxes_within_2_px_and_texts_but_for_spaces(asset_root, tmp_path, pages, dymshape):
    base, _ = dymshape
    got, _ = _run(_packages(asset_root, tmp_path, DET_HW_GEARS, REC_DIMS_GEARS), pages)
    same, same_no_spaces, shift, boxes_same = _agreement(base, got)
    print(f"grid gears: texts {same}/{len(pages)} identical, {same_no_spaces} without spaces, boxes within {shift} px")
    assert boxes_same and shift <= 2
    assert same_no_spaces == len(pages)
