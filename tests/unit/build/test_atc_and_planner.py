"""ATC command syntax from manifests, and the gear planner (pure: no PaddleX, no model)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.build.planner import padding_ratio, plan_gears
from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.om.atc import atc_args, check_soc_version

ATC = re.compile(
    r"^atc --framework=5 --model=\S+\.onnx --output=\S+ --soc_version=Ascend\w+ --input_format=(NCHW|ND) "
    r"--input_shape=\w+:[-\d~,]+(;\w+:[-\d~,]+)*"
    r"( --dynamic_batch_size=\d+(,\d+)+| --dynamic_image_size=\d+,\d+(;\d+,\d+)+"
    r"| --dynamic_dims=\d+(,\d+)*(;\d+(,\d+)*)+)?"
    r" --precision_mode_v2=(fp16|origin)$"
)


@pytest.mark.parametrize(
    "manifest, expect",
    [
        (
            {
                "mode": "dymshape",
                "inputs": [{"name": "x", "shape": [1, 3, -1, -1], "range": [[1, 1], [3, 3], [32, 960], [32, 960]]}],
            },
            "--input_shape=x:1,3,32~960,32~960",
        ),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}]}, "--input_shape=x:-1,3,48,-1"),
        (
            {"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 224, 224]}], "gears": [[1], [2], [4], [8]]},
            "--input_shape=x:-1,3,224,224 --dynamic_batch_size=1,2,4,8",
        ),
        (
            {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[480, 640], [960, 960]]},
            "--input_shape=x:1,3,-1,-1 --dynamic_image_size=480,640;960,960",
        ),
        (
            {"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], "gears": [[1, 320], [6, 3200]]},
            "--input_format=ND --input_shape=x:-1,3,48,-1 --dynamic_dims=1,320;6,3200",
        ),
        (
            {
                "mode": "static",
                "inputs": [{"name": "image", "shape": [1, 3, 800, 608]}, {"name": "scale_factor", "shape": [1, 2]}],
            },
            "--input_format=ND --input_shape=image:1,3,800,608;scale_factor:1,2",
        ),
    ],
)
def test_atc_commands_follow_atc_syntax(manifest, expect):
    man = mf.parse(manifest, "test")
    command = shlex.join(atc_args(Path("m/inference.onnx"), Path("out/inference"), "Ascend310P3", man, "fp16"))
    plain = command.replace("'", "")
    assert ATC.match(plain), plain
    assert expect in plain


def test_planner_beats_a_single_shape():
    rng = np.random.default_rng(0)
    samples = [[int(rng.integers(2, 30)) * 32, int(rng.integers(4, 30)) * 32] for _ in range(200)]
    gears = plan_gears(samples, 6)
    top = [[max(h for h, _ in samples), max(w for _, w in samples)]]
    assert 2 <= len(gears) <= 6 and top[0] in gears
    assert padding_ratio(samples, gears) < 0.75 * padding_ratio(samples, top)
    with pytest.raises(ConfigError, match="ATC accepts 2 to 100 gears"):
        plan_gears(samples, 101)


def test_soc_versions_are_ascend_chips():
    for soc in ("Ascend310", "Ascend310B1", "Ascend310B4", "Ascend310P1", "Ascend310P5", "Ascend910", "Ascend910A"):
        check_soc_version(soc)
    for soc in ("Ascend910B", "Ascend910ProA", "Ascend910ProB", "Ascend910PremiumA", "Ascend910B1", "Ascend910B4"):
        check_soc_version(soc)
    check_soc_version("Ascend910_9391")
    for soc in ("NotAChip", "", "ascend310p3", "Ascend310P6", "Ascend910B5", "Ascend910_9491", "Ascend310P3 "):
        with pytest.raises(ConfigError, match="is not an Ascend chip ATC builds for: use one of Ascend310, "):
            check_soc_version(soc)


def test_an_unbounded_range_is_minus_1_for_atc_and_its_lower_bound_is_checked_in_python():
    from paddlex_npu.run.gears import InputShapeError, check_ranges

    man = mf.parse(
        {
            "mode": "dymshape",
            "inputs": [{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 6], [3, 3], [48, 48], [32, -1]]}],
        },
        "test",
    )
    args = atc_args(Path("m/inference.onnx"), Path("out/inference"), "Ascend310P3", man, "fp16")
    assert "--input_shape=x:1~6,3,48,-1" in args and not any("~-1" in a for a in args)
    check_ranges(man, [[2, 3, 48, 4000]])
    with pytest.raises(InputShapeError, match=">=32"):
        check_ranges(man, [[2, 3, 48, 16]])


def test_an_image_plus_scale_factor_model_uses_dims_gears_with_nd():
    from paddlex_npu.om.atc import gear_mode_for

    shapes, formats = [[1, 3, -1, -1], [1, 2]], ["NCHW", "ND"]
    assert gear_mode_for(shapes, formats) == "dymdims"
    assert gear_mode_for([[1, 3, -1, -1]], ["NCHW"]) == "dymhw"
    inputs = [{"name": "image", "shape": shapes[0]}, {"name": "scale_factor", "format": "ND", "shape": shapes[1]}]
    man = mf.parse({"mode": "dymdims", "inputs": inputs, "gears": [[608, 608], [800, 608]]}, "test")
    command = " ".join(atc_args(Path("m/inference.onnx"), Path("out/inference"), "Ascend310P3", man, "fp16"))
    assert "--input_format=ND" in command and "--dynamic_dims=608,608;800,608" in command
    assert "--dynamic_image_size" not in command


@pytest.mark.parametrize(
    "manifest, reason",
    [
        (
            {
                "mode": "dymhw",
                "inputs": [
                    {"name": "image", "shape": [1, 3, -1, -1]},
                    {"name": "scale_factor", "format": "ND", "shape": [1, 2]},
                ],
                "gears": [[608, 608], [800, 608]],
            },
            r"dymhw \(ATC --dynamic_image_size\) needs --input_format NCHW.*scale_factor.*use mode dymdims",
        ),
        (
            {
                "mode": "dymhw",
                "inputs": [{"name": "x", "format": "NHWC", "shape": [1, 3, -1, -1]}],
                "gears": [[8, 8], [16, 16]],
            },
            r"needs --input_format NCHW",
        ),
        (
            {
                "mode": "dymbatch",
                "inputs": [{"name": "x", "shape": [-1, 3, 8, 8], "range": [[1, 4], [3, 3], [8, 8], [8, 8]]}],
                "gears": [[1], [4]],
            },
            r"ranges are for dymshape only",
        ),
        (
            {
                "mode": "static",
                "inputs": [{"name": "x", "shape": [1, 4]}],
                "outputs": ["boxes", "n"],
                "data_dependent": ["boxes"],
            },
            r"data-dependent shapes .* only in dymshape",
        ),
    ],
)
def test_the_manifest_refuses_what_atc_or_acl_would_refuse_with_the_reason(manifest, reason):
    with pytest.raises(ConfigError, match=reason):
        mf.parse(manifest, "test")


def test_data_dependent_outputs_need_dymshape_and_cannot_run_on_310():
    inputs = [{"name": "image", "shape": [1, 3, 800, 608]}, {"name": "scale_factor", "format": "ND", "shape": [1, 2]}]
    man = mf.parse(
        {"mode": "dymshape", "inputs": inputs, "outputs": ["boxes", "box_num"], "data_dependent": ["boxes"]}, "t"
    )
    man.model_copy(update={"soc_version": "Ascend310P3"}).check_soc()
    with pytest.raises(ConfigError, match="cannot run on Ascend310B1"):
        man.model_copy(update={"soc_version": "Ascend310B1"}).check_soc()


def test_graph_finds_data_dependent_outputs(tmp_path):
    from paddlex_npu.om.graph import data_dependent_outputs
    from tests.onnx_models import nonzero_model, two_input_model

    assert data_dependent_outputs(nonzero_model(tmp_path / "nz.onnx")) == ["idx"]
    assert data_dependent_outputs(two_input_model(tmp_path / "two.onnx")) == []


def test_ocr_settings_follow_paddlex_defaults_and_the_cover_side_their_limits():
    from paddlex_npu.build.planner import OcrSettings, det_cover_side

    default = OcrSettings.from_config(
        {
            "SubModules": {
                "TextDetection": {"limit_side_len": 64, "limit_type": "min"},
                "TextRecognition": {"batch_size": 6},
            }
        },
        "OCR.yaml",
    )
    assert (default.limit_side_len, default.limit_type, default.max_side_limit, default.rec_batch_size) == (
        64,
        "min",
        4000,
        6,
    )
    assert det_cover_side(default) == 4000 and det_cover_side(default, max_side=1000) == 992
    general = OcrSettings.from_config({"SubModules": {"TextDetection": {}}}, "x")  # the OCR pipeline's own defaults
    assert (general.limit_side_len, general.limit_type, general.rec_batch_size) == (960, "max", 1)
    assert det_cover_side(general) == 960
    assert "limit_side_len=960, limit_type=max" in general.describe()
    with pytest.raises(ConfigError, match="limit_type 'long'"):
        OcrSettings.from_config({"SubModules": {"TextDetection": {"limit_type": "long"}}}, "x")


def test_cover_gear_is_always_planned_and_the_ladder_fills_up_to_max_gears():
    from paddlex_npu.build.planner import fill_ladder

    gears = plan_gears([[3, 1033], [4, 1374]], 8, cover=[6, 3200])
    assert [6, 3200] in gears and [3, 1033] in gears and [4, 1374] in gears
    full = fill_ladder(gears, [6, 320], [6, 3200], 8, [1, 8])
    assert len(full) == 8 and [6, 3200] in full
    widths = sorted(w for n, w in full if n == 6)
    assert widths[0] == 320 and all(b / a < 1.8 for a, b in zip(widths, widths[1:]))
    assert plan_gears([[7000, 100]], 4, cover=[960, 960])[-1] == [960, 960]  # samples above it are clamped


def test_det_gears_give_every_long_side_shape_room_allowing():
    """``max``: every page above the limit becomes long side 960 x a multiple of 32; with room for all 59 such
    shapes those pages run unpadded; with less, the short sides are spread, the samples' orientation first."""
    from paddlex_npu.build.planner import OcrSettings, det_gears, long_side_gears, spread

    settings = OcrSettings("x", 960, "max", 4000, 6)
    samples = [[192, 640], [256, 960]]
    full, what, cover = det_gears(samples, settings, 64, None)
    assert cover == [960, 960] and len(full) == 64 and "59 of the 59 shapes" in what
    assert all([s, 960] in full and [960, s] in full for s in range(32, 961, 32)) and samples[0] in full
    few, what, _ = det_gears(samples, settings, 8, None)
    assert len(few) == 8 and all(g in few for g in samples + [cover])
    assert "7 of the 59" in what and "--max-gears 61 gives all" in what
    assert all(w == 960 for h, w in few if [h, w] not in samples)  # landscape samples: landscape shapes first
    assert [960, 448] in long_side_gears([[960, 960]], 960, 12, True, 192)  # portrait first
    assert spread(range(32, 961, 32), 4, 32) == [64, 192, 416, 960]  # geometric above the start, the top always
    assert spread([64, 96], 5, 32) == [64, 96]


def test_rec_gears_spend_every_gear_on_a_width_at_the_pipeline_batch():
    """Rows padded in a batch change no text, the width does: every rec gear is [batch size, width]."""
    from paddlex_npu.build.planner import OcrSettings, rec_gears

    settings = OcrSettings("x", 960, "max", 4000, 6)
    gears, what, cover = rec_gears([[3, 1033], [4, 1374]], settings, 64, None)
    assert cover == [6, 3200] and len(gears) == 64 and {n for n, _ in gears} == {6}
    assert [6, 1033] in gears and [6, 1374] in gears and [6, 320] in gears
    widths = [w for _, w in gears]
    assert max(b / a for a, b in zip(widths, widths[1:])) < 1.07 and "widths at most 6% apart" in what
    narrow, _, _ = rec_gears([[3, 1033]], settings, 4, 400)
    assert [w for _, w in narrow] == [320, 360, 400]  # nothing under PaddleX's minimum line width 320


@pytest.mark.parametrize(
    "shapes, formats, mode",
    [
        ([[-1, 3, 224, 224]], ["NCHW"], "dymbatch"),  # --dynamic_batch_size: the batch dim only
        ([[-1, 3, 224, 224], [-1, 2]], ["NCHW", "ND"], "dymbatch"),
        ([[1, 3, 224, 224]], ["NCHW"], "dymbatch"),  # nothing varies: no gear dims to choose
        ([[1, -1]], ["ND"], "dymdims"),  # dim 1 alone is no batch
        ([[1, 3, -1, -1]], ["NCHW"], "dymhw"),
        ([[1, 3, -1, -1]], ["ND"], "dymdims"),  # --dynamic_image_size needs NCHW
        ([[1, 3, -1, -1, 1]], ["NCHW"], "dymdims"),  # H, W of a 5-D input are no image's
        ([[-1, 3, -1, -1]], ["NCHW"], "dymdims"),  # batch and H/W at once: dims
    ],
)
def test_the_gear_mode_is_the_atc_option_that_can_express_the_varying_dims(shapes, formats, mode):
    from paddlex_npu.om.atc import gear_mode_for

    assert gear_mode_for(shapes, formats) == mode


@pytest.mark.parametrize(
    "mode, inputs, gears, expect",
    [
        ("dymshape", [{"name": "x", "shape": [-1, 3, -1, -1]}], None, "NCHW"),
        ("dymshape", [{"name": "x", "format": "NHWC", "shape": [-1, -1, -1, 3]}], None, "NHWC"),
        ("dymshape", [{"name": "x", "format": "ND", "shape": [-1, -1]}], None, "ND"),
        ("dymshape", [{"name": "x", "format": "NCHW", "shape": [-1, -1]}], None, "ND"),  # a 2-D input has no C, H, W
        ("dymbatch", [{"name": "x", "shape": [-1, 3, 8, 8]}], [[1], [4]], "NCHW"),
        ("dymhw", [{"name": "x", "shape": [1, 3, -1, -1]}], [[8, 8], [16, 16]], "NCHW"),
        ("dymdims", [{"name": "x", "shape": [1, 3, -1, -1]}], [[8, 8], [16, 16]], "ND"),  # --dynamic_dims takes ND
        ("static", [{"name": "x", "shape": [1, 3, 8, 8]}, {"name": "y", "format": "ND", "shape": [1, 2]}], None, "ND"),
        ("static", [{"name": "x", "shape": [1, 3, 8, 8]}, {"name": "y", "shape": [1, 3, 4, 4]}], None, "NCHW"),
    ],
)
def test_the_input_format_is_one_for_all_inputs_as_atc_takes_it(mode, inputs, gears, expect):
    from paddlex_npu.om.atc import input_format

    man = mf.parse({"mode": mode, "inputs": inputs, "gears": gears}, "test")
    assert input_format(man) == expect
    assert f"--input_format={expect}" in atc_args(Path("m.onnx"), Path("out"), "Ascend310P3", man, None)


def test_the_whole_command_for_a_dymshape_package():
    """ATC's order: framework 5 (ONNX), model, output prefix, chip, format, shape ranges, then precision."""
    man = mf.parse(
        {
            "mode": "dymshape",
            "inputs": [{"name": "x", "shape": [-1, 3, -1, -1], "range": [[1, 6], [3, 3], [32, 960], [32, -1]]}],
        },
        "test",
    )
    head = ["atc", "--framework=5", "--model=p/inference.onnx", "--output=p/inference", "--soc_version=Ascend310P3"]
    tail = ["--input_format=NCHW", "--input_shape=x:1~6,3,32~960,-1"]
    assert atc_args(Path("p/inference.onnx"), Path("p/inference"), "Ascend310P3", man, None) == head + tail
    assert atc_args(Path("p/inference.onnx"), Path("p/inference"), "Ascend310P3", man, "fp32", False) == [
        *head,
        *tail,
        "--precision_mode=must_keep_origin_dtype",
    ]


def test_input_shapes_in_atc_syntax_are_read_per_input():
    from paddlex_npu.om.atc import parse_input_shape

    assert parse_input_shape("x:1,3,-1,-1", ["x"]) == {"x": [1, 3, -1, -1]}
    assert parse_input_shape(" x:1,3,-1,-1; scale_factor:1,2 ", ["x", "scale_factor", "im_shape"]) == {
        "x": [1, 3, -1, -1],
        "scale_factor": [1, 2],
    }
    assert parse_input_shape("input:0:1,-1", ["input:0"]) == {"input:0": [1, -1]}  # TF-style names hold ':'


@pytest.mark.parametrize(
    "text, match",
    [
        ("y:1,2", r"--input-shape 'y:1,2': 'y' is not an input of the model \(x, z\)"),
        ("x:1,2;y:1,2", r"'y' is not an input of the model"),
        ("x", r"--input-shape 'x': 'x' is not an input of the model"),  # no ':' at all
        ("x:1,a", r"--input-shape 'x:1,a': dims must be integers \(-1 for a varying dim\)"),
        ("x:", r"dims must be integers"),
    ],
)
def test_input_shapes_that_name_no_input_or_no_integers_are_refused(text, match):
    from paddlex_npu.om.atc import parse_input_shape

    with pytest.raises(ConfigError, match=match):
        parse_input_shape(text, ["x", "z"])


def test_gears_in_atc_syntax_and_atc_s_limits_on_their_number():
    from paddlex_npu.om.atc import parse_gears

    assert parse_gears("640,640;960,960") == [[640, 640], [960, 960]]
    assert parse_gears("1;2;4;") == [[1], [2], [4]]  # a trailing ';' adds no gear
    assert parse_gears(" 6,320 ; 6,3200 ") == [[6, 320], [6, 3200]]
    assert len(parse_gears(";".join(str(b) for b in range(1, 101)))) == 100
    with pytest.raises(ConfigError, match=r"--gears has 1 gears; ATC accepts 2 to 100"):
        parse_gears("640,640")
    with pytest.raises(ConfigError, match=r"--gears has 101 gears; ATC accepts 2 to 100"):
        parse_gears(";".join(str(b) for b in range(1, 102)))
    with pytest.raises(ConfigError, match=r"--gears 'auto,1;2': use 'auto' or ATC's syntax"):
        parse_gears("auto,1;2")
