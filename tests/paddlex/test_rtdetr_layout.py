"""The RT-DETR-L family on the OM route, **architecture, seeded weights** (no package ships their weights;
:mod:`tests.paddlex.rtdetr_seeded` builds the folders from PaddleX 3.7's own ``RTDETR`` and caches them):
PP-DocLayout_plus-L (PP-StructureV3's default layout model) on a rendered page and RT-DETR-L_wired_table_cell_det
(table_recognition_v2's cell detector) on a rendered ruled table. ``convert`` plans each package from p2o's ONNX
(static, the boxes output pinned to [300, 6], GridSample for CANN 8 only), and PaddleX's detection predictor on the
route (reference runtime) gives the boxes, classes and scores that PaddleX's ``onnxruntime`` engine gives on the same
ONNX, its ``paddle_dynamic`` engine on the same weights and its ``paddle_static`` engine on the exported program.

The build takes about a minute a model and downloads the ``p2o`` wheel: each model's tests skip until it is cached
(``.venv/bin/python -m tests.paddlex.rtdetr_seeded``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from paddlex_npu.errors import ConvertError
from paddlex_npu.om import manifest as mf
from tests.helpers import NPU_HPI
from tests.paddlex import rtdetr_seeded as seeded
from tests.paddlex.compat import LEGACY

pytestmark = [
    pytest.mark.once,
    pytest.mark.skipif(LEGACY, reason="PaddleX 3.4 has no RT-DETR model code to build the seeded folders from"),
]


def _cached(model: str):
    return pytest.param(
        model,
        marks=pytest.mark.skipif(
            not seeded.built(model),
            reason=f"the seeded {model} is not cached: `.venv/bin/python -m tests.paddlex.rtdetr_seeded {model}` "
            "(about a minute; downloads p2o 0.1.2)",
        ),
    )


MODELS = [_cached(m) for m in seeded.MODELS]


def _boxes(model, image: str) -> np.ndarray:
    """[class, score, x1, y1, x2, y2] per box, as PaddleX's detection predictor gives them."""
    try:
        (result,) = list(model.predict(image))
    finally:
        model.close()
    return np.array([[b["cls_id"], b["score"], *b["coordinate"]] for b in result["boxes"]], np.float64)


@pytest.mark.parametrize("model", MODELS)
def test_convert_plans_the_rtdetr_package_static_with_its_outputs_pinned(model):
    from paddlex_npu.run.reference_om import ReferenceOM

    om, size = seeded.folders(model)["om"], seeded.SIZE[model]
    man = mf.load(om / mf.MANIFEST_NAME)
    assert man.mode == "static" and man.data_dependent == []
    assert [(i.name, i.shape) for i in man.inputs] == [
        ("im_shape", [1, 2]),
        ("image", [1, 3, size, size]),
        ("scale_factor", [1, 2]),
    ]
    descs = ReferenceOM(om / "inference.onnx", man).output_descs()
    assert [list(d.shape) for d in descs] == [[300, 6], [1]]  # GE's view: boxes pinned by convert's Reshape


@pytest.mark.parametrize("model", MODELS[:1])
def test_cann7_atc_refuses_gridsample_and_opset_17_naming_them(model, tmp_path):
    from paddlex_npu.build.convert import convert

    with pytest.raises(ConvertError) as err:
        convert(seeded.folders(model)["onnx"], tmp_path / "om7", seeded.SOC, cann="7", run=False)
    assert "GridSample" in str(err.value) and "opset 17" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_rtdetr_on_the_route_equals_paddlex_onnxruntime_paddle_dynamic_and_static_engines(model):
    from paddlex import create_model

    dirs, image = seeded.folders(model), str(seeded.page(model))
    shaped = json.loads((seeded.root(model) / "build.json").read_text())["shaped"]
    route = _boxes(
        create_model(model, model_dir=str(dirs["om"]), device="npu:0", use_hpip=True, hpi_config=NPU_HPI), image
    )
    ort = _boxes(create_model(model, model_dir=str(dirs["onnx"]), engine="onnxruntime", device="cpu"), image)
    dyn = _boxes(create_model(model, model_dir=str(dirs["dynamic"]), engine="paddle_dynamic", device="cpu"), image)
    # oneDNN (the CPU default) fails on this program's attributes
    static_engine = {"engine": "paddle_static", "engine_config": {"run_mode": "paddle"}}
    static = _boxes(create_model(model, model_dir=str(dirs["static"]), device="cpu", **static_engine), image)
    # the boxes the shaped bias gives on this image: several, of each shaped class
    assert len(route) == sum(s["boxes"] for s in shaped) >= 4
    assert sorted(set(route[:, 0].astype(int))) == sorted(s["class"] for s in shaped)
    np.testing.assert_array_equal(route, ort)  # the same ONNX, the same ONNX Runtime
    for other in (dyn, static):  # the weights on Paddle (dynamic), the exported PIR program on Paddle Inference
        assert (route[:, 0] == other[:, 0]).all()
        np.testing.assert_allclose(route[:, 1], other[:, 1], atol=1e-4)  # measured: 2e-6
        np.testing.assert_allclose(route[:, 2:], other[:, 2:], atol=0.05)  # pixels; measured: 0.002
