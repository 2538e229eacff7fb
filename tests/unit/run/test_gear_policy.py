"""Shape policy and manifests: gear choice, padding, cropping, batch splitting, errors (pure numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.om.manifest import OMManifest, parse
from paddlex_npu.run.gears import InputShapeError, choose_gear, policy_for, run_with_gears

DET = policy_for("TextDetRunnerPredictor")
REC = policy_for("TextRecRunnerPredictor")


def m(**kw) -> OMManifest:
    return parse(kw, "test")


HW = m(mode="dymhw", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}], gears=[[320, 320], [640, 640], [320, 960]])
DIMS = m(mode="dymdims", inputs=[{"name": "x", "shape": [-1, 3, 48, -1]}], gears=[[1, 320], [4, 320], [4, 640]])


def test_smallest_gear_that_holds_the_input():
    assert choose_gear(HW, [[1, 3, 288, 320]], DET) == [[1, 3, 320, 320]]
    assert choose_gear(HW, [[1, 3, 320, 640]], DET) == [[1, 3, 320, 960]]  # fewer padded pixels than 640x640
    assert choose_gear(HW, [[1, 3, 400, 640]], DET) == [[1, 3, 640, 640]]
    assert choose_gear(HW, [[1, 3, 96, 900]], DET) == [[1, 3, 320, 960]]
    assert choose_gear(DIMS, [[3, 3, 48, 500]], REC) == [[4, 3, 48, 640]]


def test_no_gear_fits_names_shape_and_gears():
    with pytest.raises(InputShapeError, match=r"\[\[1, 3, 704, 640\]\] fit none of the OM's dymhw gears x:1,3,320,320"):
        choose_gear(HW, [[1, 3, 704, 640]], DET)
    with pytest.raises(InputShapeError, match="dims by rank"):
        choose_gear(DIMS, [[2, 3, 32, 320]], policy_for("ClasRunnerPredictor"))  # H may not be padded


def test_det_map_is_padded_then_cropped_back():
    x = np.random.rand(1, 3, 288, 300).astype(np.float32)
    seen = []

    def infer(feeds):
        seen.append(feeds[0])
        return [feeds[0][:, :1] * 2]  # a DB-like map: same H, W as the input

    (out,) = run_with_gears(HW, [x], DET, infer)
    assert seen[0].shape == (1, 3, 320, 320)
    # text detection pads with the image's own edge (its background), not a constant
    np.testing.assert_array_equal(seen[0][:, :, 288:, :300], np.repeat(x[:, :, -1:], 32, axis=2))
    np.testing.assert_array_equal(seen[0][..., 300:], np.repeat(seen[0][..., 299:300], 20, axis=3))
    assert out.shape == (1, 1, 288, 300)
    np.testing.assert_array_equal(out, x[:, :1] * 2)


def test_batch_padding_repeats_rows_and_drops_them_and_ctc_width_is_cropped():
    x = np.random.rand(3, 3, 48, 480).astype(np.float32)

    def infer(feeds):
        n, _, _, w = feeds[0].shape
        return [np.broadcast_to(feeds[0][:, :1, :1, ::8].transpose(0, 3, 1, 2).reshape(n, w // 8, 1), (n, w // 8, 5))]

    (out,) = run_with_gears(DIMS, [x], REC, infer)
    assert out.shape == (3, 60, 5)  # 640 -> 480 wide: 80 -> 60 time steps, 4 -> 3 rows
    np.testing.assert_array_equal(out[:, :, 0], x[:, 0, 0, ::8])


def test_batches_above_the_largest_gear_are_split():
    calls = []

    def infer(feeds):
        calls.append(feeds[0].shape[0])
        return [feeds[0][:, :, 0, 0]]

    x = np.random.rand(11, 3, 48, 320).astype(np.float32)
    (out,) = run_with_gears(DIMS, [x], REC, infer)
    assert calls == [4, 4, 4] and out.shape == (11, 3)
    np.testing.assert_array_equal(out, x[:, :, 0, 0])


def test_detection_outputs_drop_the_boxes_of_padded_images():
    man = m(
        mode="dymbatch",
        inputs=[{"name": "image", "shape": [-1, 3, 64, 64]}, {"name": "scale_factor", "shape": [-1, 2]}],
        gears=[[1], [4]],
    )
    det = policy_for("DetRunnerPredictor")

    def infer(feeds):
        n = feeds[0].shape[0]
        counts = np.arange(1, n + 1, dtype=np.int32)  # image i has i+1 boxes
        boxes = np.concatenate([np.full((c, 6), i, np.float32) for i, c in enumerate(counts)])
        return [boxes, counts]

    boxes, num = run_with_gears(man, [np.zeros((2, 3, 64, 64), np.float32), np.ones((2, 2), np.float32)], det, infer)
    assert num.tolist() == [1, 2] and boxes.shape == (3, 6) and boxes[:, 0].tolist() == [0, 1, 1]


@pytest.mark.parametrize(
    "raw, match",
    [
        (
            {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[320, 320]]},
            "2 to 100 gears",
        ),
        (
            {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[32, 32]] * 101},
            "2 to 100 gears",
        ),
        ({"mode": "static", "inputs": [{"name": "x", "shape": [1, 3, -1, 8]}]}, "static OM has no -1"),
        ({"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], "gears": [[1], [2]]}, "2 positive"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[1, 2]]}, "takes no gears"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, -1]}], "extra": 1}, "extra"),
    ],
)
def test_invalid_manifests(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse(raw, "test")


def test_dymshape_on_ascend310_is_refused_with_a_gears_hint():
    man = m(mode="dymshape", soc_version="Ascend310B1", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}])
    with pytest.raises(ConfigError, match=r"Ascend310B1 has no dynamic shape.*paddlex-npu convert .*--mode gears"):
        man.check_soc()
    m(mode="dymshape", soc_version="Ascend310P3", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}]).check_soc()
    HW.model_copy(update={"soc_version": "Ascend310"}).check_soc()  # gears are fine on 310


def test_manifest_round_trip(tmp_path):
    path = DIMS.save(tmp_path / "inference.om.json")
    from paddlex_npu.om.manifest import load

    assert load(path) == DIMS
    assert '"schema": "paddlex-npu/om-manifest/1"' in path.read_text()


def test_strided_outputs_are_cut_to_the_length_the_model_gives_for_the_real_input():
    from paddlex_npu.run.gears import cut_length

    # PP-OCRv4 mobile rec (measured with ONNX Runtime): 40 time steps for widths 316+1..324, 41 for 325..332
    widths = {316: 39, 317: 40, 320: 40, 321: 40, 324: 40, 325: 41, 328: 41, 332: 41, 333: 42, 336: 42}
    assert {w: cut_length(80, 640, w) for w in widths} == widths
    assert cut_length(960, 960, 300) == 300  # stride 1 (DB map): exact
    assert cut_length(50, 300, 200) == 33  # no whole stride: in proportion
