"""PP-DocLayout_plus-L (RT-DETR-L, PP-StructureV3's default layout model) on the OM route, **architecture, seeded
weights** (no package ships its weights; :mod:`tests.paddlex.rtdetr_seeded` builds the folders from PaddleX 3.7's
own ``RTDETR`` and caches them): ``convert`` plans the package from p2o's ONNX (static 800x800, the boxes output
pinned to [300, 6], GridSample for CANN 8 only), and PaddleX's layout predictor on the route (reference runtime)
gives the boxes, classes and scores that PaddleX's ``onnxruntime`` engine gives on the same ONNX, its
``paddle_dynamic`` engine on the same weights and its ``paddle_static`` engine on the exported program.

The build takes about a minute and downloads the ``p2o`` wheel: these tests skip until it is cached
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
    pytest.mark.skipif(
        not seeded.built(),
        reason=f"the seeded {seeded.MODEL} is not cached: `.venv/bin/python -m tests.paddlex.rtdetr_seeded` "
        "(about a minute; downloads p2o 0.1.2)",
    ),
]


def _boxes(model, image: str) -> np.ndarray:
    """[class, score, x1, y1, x2, y2] per box, as PaddleX's layout predictor gives them."""
    try:
        (result,) = list(model.predict(image))
    finally:
        model.close()
    return np.array([[b["cls_id"], b["score"], *b["coordinate"]] for b in result["boxes"]], np.float64)


def test_convert_plans_the_rtdetr_package_static_with_its_outputs_pinned():
    om = seeded.folders()["om"]
    man = mf.load(om / mf.MANIFEST_NAME)
    assert man.mode == "static" and man.data_dependent == []
    assert [(i.name, i.shape) for i in man.inputs] == [
        ("im_shape", [1, 2]),
        ("image", [1, 3, 800, 800]),
        ("scale_factor", [1, 2]),
    ]
    from paddlex_npu.run.reference_om import ReferenceOM

    descs = ReferenceOM(om / "inference.onnx", man).output_descs()
    assert [list(d.shape) for d in descs] == [[300, 6], [1]]  # GE's view: boxes pinned by convert's Reshape


def test_cann7_atc_refuses_gridsample_and_opset_17_naming_them(tmp_path):
    from paddlex_npu.build.convert import convert

    with pytest.raises(ConvertError) as err:
        convert(seeded.folders()["onnx"], tmp_path / "om7", seeded.SOC, cann="7", run=False)
    assert "GridSample" in str(err.value) and "opset 17" in str(err.value)


@pytest.mark.slow
def test_layout_on_the_route_equals_paddlex_onnxruntime_and_paddle_dynamic_engines():
    from paddlex import create_model

    dirs, image = seeded.folders(), str(seeded.page())
    shaped = json.loads((seeded.ROOT / "build.json").read_text())["shaped"]
    route = _boxes(
        create_model(seeded.MODEL, model_dir=str(dirs["om"]), device="npu:0", use_hpip=True, hpi_config=NPU_HPI), image
    )
    ort = _boxes(create_model(seeded.MODEL, model_dir=str(dirs["onnx"]), engine="onnxruntime", device="cpu"), image)
    dyn = _boxes(
        create_model(seeded.MODEL, model_dir=str(dirs["dynamic"]), engine="paddle_dynamic", device="cpu"), image
    )
    static = _boxes(
        create_model(
            seeded.MODEL,
            model_dir=str(dirs["static"]),
            engine="paddle_static",
            device="cpu",
            engine_config={"run_mode": "paddle"},  # oneDNN (the CPU default) fails on this program's attributes
        ),
        image,
    )
    # the boxes the shaped bias gives on this page: several classes, several boxes each
    assert len(route) == sum(s["boxes"] for s in shaped) and len(set(route[:, 0])) == len(shaped) >= 3
    assert sorted(set(route[:, 0].astype(int))) == sorted(s["class"] for s in shaped)
    np.testing.assert_array_equal(route, ort)  # the same ONNX, the same ONNX Runtime
    assert (route[:, 0] == dyn[:, 0]).all()
    np.testing.assert_allclose(route[:, 1], dyn[:, 1], atol=1e-4)  # measured: 2e-6
    np.testing.assert_allclose(route[:, 2:], dyn[:, 2:], atol=0.05)  # pixels of a 1000x1300 page; measured: 0.002
    assert (route[:, 0] == static[:, 0]).all()  # the exported PIR program on Paddle Inference
    np.testing.assert_allclose(route[:, 1], static[:, 1], atol=1e-4)
    np.testing.assert_allclose(route[:, 2:], static[:, 2:], atol=0.05)
