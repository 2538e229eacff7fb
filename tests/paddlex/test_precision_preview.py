"""``precision-preview``: PP-OCRv6 small read at fp32 and as ATC's fp16 builds its packages, on the CPU; the
difference shows, and convert's ``--keep-dtype`` (ATC's option) of every operator makes it go."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.reports.precision_preview import compare_page, preview
from paddlex_npu.samples import assets
from paddlex_npu.samples.files import DATA, PAGE
from tests.paddlex.compat import LEGACY

pytestmark = pytest.mark.skipif(LEGACY, reason="PaddleX 3.4 has no PP-OCRv6 (test_paddlex_34_says_it_has_no_v6)")


def _config(asset_root, det_dir=None, rec_dir=None):
    config = assets.ocr_pipeline_config(asset_root / "om", det=assets.DET_V6_SMALL, rec=assets.REC_V6_SMALL)
    for sub, folder in (("TextDetection", det_dir), ("TextRecognition", rec_dir)):
        if folder is not None:
            config["SubModules"][sub]["model_dir"] = str(folder)
    return config


def test_fp16_shows_and_fp32_or_keep_dtype_removes_it(asset_root, tmp_path):
    """As built (fp16 det and rec) the boxes and scores move; with the det built --precision fp32 (ATC origin)
    and every operator of the rec kept (--keep-dtype, ATC's --keep_dtype), nothing does."""
    pages = [DATA / PAGE, DATA / "lines" / "line-1.png"]
    as_built = preview(None, pages, config=_config(asset_root))
    assert as_built.precisions == {assets.DET_V6_SMALL: "fp16", assets.REC_V6_SMALL: "fp16"}
    total = as_built.summary()
    assert total["lines"] == 4 and total["max_score_change"] > 0  # fp16 moves the scores
    om = asset_root / "om"
    det = convert(om / assets.DET_V6_SMALL, tmp_path / "det", "Ascend910B4", run=False, precision="fp32")
    assert "--precision_mode_v2=origin" in det.atc_command  # (not on 310P: its cube units are fp16 only)
    rec = om / assets.REC_V6_SMALL
    first = convert(rec, tmp_path / "rec0", "Ascend310P3", run=False, reduce=False)  # with the 8-bit input's head
    names = [n.name for n in onnx.load(str(first.package / "inference.onnx"), load_external_data=False).graph.node]
    kept = convert(rec, tmp_path / "rec", "Ascend310P3", run=False, reduce=False, keep_dtype=names)
    assert (tmp_path / "rec" / "keep_dtype.cfg").read_text().splitlines() == names
    assert f"--keep_dtype={tmp_path / 'rec' / 'keep_dtype.cfg'}" in kept.atc_command
    same = preview(None, pages, config=_config(asset_root, tmp_path / "det", tmp_path / "rec"))
    assert same.precisions == {"det": "fp32", "rec": "fp16"}
    assert same.summary()["max_score_change"] == same.summary()["max_box_shift"] == 0.0
    assert all(p.same for p in same.pages)


def test_compare_page_matches_lines_by_their_boxes():
    box = [[0, 0], [100, 0], [100, 20], [0, 20]]
    moved = [[2, 0], [102, 0], [102, 20], [2, 20]]
    far = [[0, 50], [100, 50], [100, 70], [0, 70]]
    a = {"rec_polys": [box, far], "rec_texts": ["NPU", "gone"], "rec_scores": [0.99, 0.9]}
    b = {"rec_polys": [moved], "rec_texts": ["NPV"], "rec_scores": [0.95]}
    diff = compare_page("p.png", a, b)
    assert diff.changed == [("NPU", "NPV")] and diff.only_fp32 == ["gone"] and diff.only_fp16 == []
    assert diff.max_box_shift == 2.0 and abs(diff.max_score_change - 0.04) < 1e-9 and not diff.same


def test_the_command_reports_per_image(asset_root, tmp_path):
    import yaml

    (tmp_path / "ocr.yaml").write_text(yaml.safe_dump(_config(asset_root)))
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "precision-preview", str(tmp_path / "ocr.yaml")]
        + [str(DATA / "lines" / "line-2.png"), "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "packages as built: PP-OCRv6_small_det fp16, PP-OCRv6_small_rec fp16" in out.stdout
    assert "line-2.png: 1 line(s), 0 text(s) changed" in out.stdout and (tmp_path / "r.json").is_file()


def test_keep_dtype_names_are_checked_before_any_work(asset_root, tmp_path):
    import pytest

    from paddlex_npu.errors import ConfigError

    rec = asset_root / "om" / assets.REC_V6_SMALL
    with pytest.raises(ConfigError, match=r"--keep-dtype Nope: no such operator in inference.onnx"):
        convert(rec, tmp_path / "a", "Ascend310P3", run=False, keep_dtype=["Nope"])
    with pytest.raises(ConfigError, match=r"ATC ignores --keep_dtype with origin"):
        convert(rec, tmp_path / "b", "Ascend910B4", run=False, precision="fp32", keep_dtype=["x"])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
