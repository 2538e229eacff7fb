"""Gear OMs never fail a page (issue 10, point 4): gears planned by ``paddlex-npu convert --gears auto`` for the
OCR pipeline's own settings, from two rendered pages (several font sizes and line lengths), read eight other
pages with no error and the texts of dymshape; inputs larger than every gear are fitted (or refused).

Padding changes what these models compute (global pooling in the det model's SE blocks, attention over the whole
width in the rec models' SVTR neck), so gears match dymshape exactly only where they add no padding. With
``--max-gears 64`` the planner gives detection every shape whose long side is the pipeline's ``limit_side_len``
(what ``DetResizeForTest`` makes of every page above the limit: those pages' boxes are identical) and recognition
widths at most 6% apart: PP-OCRv5 mobile rec then reads the eight pages exactly as dymshape, spaces included. At
the default 8 gears look-alike glyphs of the pages' numbers (``1``/``l``, ``0``/``o``) flip on some pages, as they do
under PaddleX's own batching (docs/shape-modes.md "Gears and dymshape"); the bundled PP-OCRv4 rec (PaddleOCR's
Chinese model) reads the spaces between Latin words from attention over the padded width, so its texts are compared
without spaces.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import yaml

from paddlex_npu.build.convert import convert
from paddlex_npu.om import manifest as mf
from paddlex_npu.samples import assets
from tests.helpers import NPU_HPI, norm, run_ocr

WORDS = (
    "invoice total amount due order shipped warehouse payment within thirty days thank you for your business "
    "reference number customer account"
).split()
SIZES = (20, 26, 34, 44)
LIMIT = 960  # the test pipeline's limit_side_len (limit_type max)
# The det model's output at a pixel depends on the whole padded input (global pooling in its SE blocks), so a box
# edge moves when the page is padded to a gear (measured on these pages): up to 2 px with 64 planned gears (pages
# below the limit only), 3 px with 8.
BOX_PX = {64: 2, 8: 3}
_LOOKALIKES = str.maketrans({"l": "1", "o": "0"})


def fold(texts: List[str]) -> List[str]:
    """Texts with PP-OCRv5's look-alike glyphs folded (``l`` to ``1``, ``o`` to ``0``); spaces kept."""
    return [t.translate(_LOOKALIKES) for t in texts]


def page_text(k: int) -> Tuple[List[str], List[int]]:
    """Page ``k``: 3 to 6 lines of 1 to 7 words and a number, each line in one of four font sizes."""
    lines, sizes = [], []
    for i in range(3 + k % 4):
        n = 1 + (k * 3 + i * 5) % 7
        words = " ".join(WORDS[(k + i + j * 3) % len(WORDS)] for j in range(n))
        lines.append(f"{words.capitalize()} {100 + 17 * k + i}")
        sizes.append(SIZES[(k + i) % 4])
    return lines, sizes


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("mixed_pages")
    out = {}
    for k in range(10):
        lines, sizes = page_text(k)
        out[f"page{k}"] = assets.render_text_image(lines, d / f"page{k}.png", sizes=sizes)
    return out


@pytest.fixture(scope="module")
def samples(pages, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("samples")
    for key in ("page0", "page1"):
        shutil.copyfile(pages[key], d / f"{key}.png")
    return d


def _config(root: Path, rec: str = assets.REC, **det: object) -> dict:
    config = assets.ocr_pipeline_config(root, rec=rec)
    config["SubModules"]["TextDetection"].update(det)
    return config


def _run(config: dict, images: Dict[str, Path], **backend: object) -> Dict[str, dict]:
    from paddlex import create_pipeline

    hpi = {**NPU_HPI, "backend_config": {**NPU_HPI["backend_config"], **backend}}
    p = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=hpi)
    try:
        return run_ocr(p, images)
    finally:
        p.close()


def _gear_root(
    asset_root: Path, dest: Path, samples: Path, rec: str = assets.REC, **options: object
) -> Tuple[Path, List[str]]:
    """The bundled OM folders with det and ``rec`` replaced by gear packages planned from ``samples``."""
    shutil.copytree(asset_root / "om", dest)
    notes = []
    for model in (assets.DET, rec):
        shutil.rmtree(dest / model)
        det = {"det_package": asset_root / "om" / assets.DET} if model == rec else {}
        result = convert(
            asset_root / "om" / model,
            dest / model,
            "Ascend310P3",
            "gears",
            run=False,
            gears="auto",
            samples=samples,
            **det,
            **options,
        )
        notes += result.notes
    return dest, notes


def _plan(asset_root: Path, samples: Path, d: Path, rec: str, max_gears: int = 8) -> Tuple[Path, List[str]]:
    cfg = d / "ocr.yaml"
    cfg.write_text(yaml.safe_dump(_config(asset_root / "om", rec)))
    return _gear_root(asset_root, d / "om", samples, rec, pipeline_config=cfg, max_gears=max_gears)


@pytest.fixture(scope="module")
def planned(asset_root, samples, tmp_path_factory):
    """Gear packages planned for the test pipeline's settings (limit_side_len 960, max; rec batch 6)."""
    return _plan(asset_root, samples, tmp_path_factory.mktemp("planned"), assets.REC)


def test_planner_says_which_settings_it_planned_for_and_adds_the_cover_gears(planned):
    root, notes = planned
    assert (
        sum(
            "limit_side_len=960, limit_type=max, max_side_limit=4000; text recognition batch_size=6" in n for n in notes
        )
        == 2
    )
    det, rec = (mf.load(root / m / mf.MANIFEST_NAME) for m in (assets.DET, assets.REC))
    assert [960, 960] in det.gears and [6, 3200] in rec.gears  # the largest inputs the preprocessing makes
    assert len(det.gears) <= 8 and len(rec.gears) <= 8
    assert any("crop batches of 2 sample pages" in n for n in notes)


def _others(pages: Dict[str, Path]) -> Dict[str, Path]:
    """The eight pages that are not samples."""
    return {k: v for k, v in pages.items() if k not in ("page0", "page1")}


@pytest.fixture(scope="module")
def dymshape(asset_root, pages) -> Callable[[str], Dict[str, dict]]:
    """The eight other pages read on the bundled dymshape packages, once per recognition model (what the gear
    packages are compared with: the same packages, pages and runtime give the same results, so the 64- and
    8-gear runs of PP-OCRv5 share one reading)."""
    read: Dict[str, Dict[str, dict]] = {}

    def of(rec: str) -> Dict[str, dict]:
        if rec not in read:
            read[rec] = _run(_config(asset_root / "om", rec), _others(pages))
        return read[rec]

    return of


def _compare_eight(
    base: Dict[str, dict], root: Path, rec: str, pages: Dict[str, Path], max_gears: int
) -> Dict[str, Tuple[dict, dict]]:
    """Dymshape (``base``: the ``dymshape`` fixture's) and the gear packages in ``root`` on the eight pages that
    are not samples: no error, the same boxes (identical for pages above the limit when every long-side shape is
    a gear)."""
    from PIL import Image

    others = _others(pages)
    got = _run(_config(root, rec), others, warmup_gears=False)  # 64 gears: warm-up skipped to keep the test short
    for k, path in others.items():
        above = max(Image.open(path).size) > LIMIT
        atol = 0 if above and max_gears == 64 else BOX_PX[max_gears]
        assert len(got[k]["boxes"]) == len(base[k]["boxes"]), k
        np.testing.assert_allclose(got[k]["boxes"], base[k]["boxes"], atol=atol, err_msg=k)
    return {k: (base[k], got[k]) for k in others}


@pytest.mark.parametrize("max_gears", [pytest.param(64, marks=pytest.mark.once), 8])
def test_gears_planned_from_two_pages_read_eight_others_like_dymshape(
    asset_root, samples, pages, dymshape, tmp_path, max_gears
):
    """PP-OCRv5 rec. 64 gears planned per model: the texts of dymshape exactly, spaces included. The default 8:
    the same but for look-alike glyphs of the pages' numbers (figures printed for the table of docs/shape-modes.md)."""
    root, notes = _plan(asset_root, samples, tmp_path, assets.REC_V5, max_gears=max_gears)
    det_note = "59 of the 59 shapes with a long side of 960" if max_gears == 64 else "gives all)"
    assert any(det_note in n for n in notes), notes
    assert [6, 3200] in mf.load(root / assets.REC_V5 / mf.MANIFEST_NAME).gears
    pairs = _compare_eight(dymshape(assets.REC_V5), root, assets.REC_V5, pages, max_gears)
    exact = sum(base["texts"] == got["texts"] for base, got in pairs.values())
    print(f"PP-OCRv5 rec, {max_gears} planned gears on 8 unseen pages: {exact}/8 identical texts with spaces")
    same = list if max_gears == 64 else fold
    for k, (base, got) in pairs.items():
        assert same(got["texts"]) == same(base["texts"]), k
        assert all(" " in t for t in base["texts"]), k  # the model reads the spaces (every line has two words)


@pytest.mark.once
def test_v4_rec_gears_read_eight_others_like_dymshape_without_spaces(planned, pages, dymshape):
    """PP-OCRv4 rec, the default 8 gears: no error, the same boxes, the same texts but for the spaces padding
    flips."""
    pairs = _compare_eight(dymshape(assets.REC), planned[0], assets.REC, pages, 8)
    exact = sum(base["texts"] == got["texts"] for base, got in pairs.values())
    print(f"PP-OCRv4 rec, 8 planned gears on 8 unseen pages: {exact}/8 identical with spaces")
    for k, (base, got) in pairs.items():
        assert norm(got["texts"]) == norm(base["texts"]), k


@pytest.mark.once
def test_default_pipeline_settings_read_the_sample_pages_exactly(asset_root, samples, pages, tmp_path):
    """Without --pipeline-config the planner plans for PaddleX's default OCR pipeline (limit_side_len 64, min,
    max_side_limit 4000: pages keep their size), so that pipeline reads the sample pages with no padding."""
    root, notes = _gear_root(asset_root, tmp_path / "om", samples, max_gears=6)
    assert any("PaddleX's default OCR pipeline" in n and "limit_side_len=64, limit_type=min" in n for n in notes)
    assert [4000, 4000] in mf.load(root / assets.DET / mf.MANIFEST_NAME).gears
    default = {"limit_side_len": 64, "limit_type": "min", "max_side_limit": 4000}
    two = {k: pages[k] for k in ("page0", "page1")}
    base = _run(_config(asset_root / "om", **default), two)
    got = _run(_config(root, **default), two)
    for k in two:
        assert got[k]["texts"] == base[k]["texts"], k
        np.testing.assert_allclose(got[k]["boxes"], base[k]["boxes"], atol=0)


def test_inputs_above_every_gear_are_fitted_with_one_warning_or_refused(asset_root, samples, pages, tmp_path, caplog):
    from paddlex_npu.run.gears import InputShapeError

    root, notes = _gear_root(asset_root, tmp_path / "om", samples, max_gears=4, max_side=320, max_width=400)
    assert any("larger than the cover gear" in n for n in notes)
    three = {k: pages[k] for k in ("page2", "page3", "page4")}
    base = _run(_config(asset_root / "om"), three)
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        got = _run(_config(root), three)
    warned = [r.getMessage() for r in caplog.records if "oversize 'fit'" in r.getMessage()]
    assert len(warned) == 2, warned  # one per model
    assert any("image scaled" in w for w in warned) and any("width squeezed" in w for w in warned)
    for k in three:  # boxes in the page's coordinates (the DB map scaled back), texts still read in part
        assert len(got[k]["boxes"]) == len(base[k]["boxes"]), k
        np.testing.assert_allclose(got[k]["boxes"], base[k]["boxes"], atol=24)
        assert any(a == b for a, b in zip(norm(got[k]["texts"]), norm(base[k]["texts"]))), k
    with pytest.raises(InputShapeError, match="fit none of the OM's dymhw gears"):
        _run(_config(root), {"page2": pages["page2"]}, oversize="error")
