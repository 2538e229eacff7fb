"""Output buffers derived from the model hold every input the OM accepts, and waste little: for every rec width
8..3200 and a grid of det sizes, for every model the tests carry, reserved >= needed and reserved <= 1.25 x
needed + 64 KiB, with ``needed`` the real output bytes of ONNX Runtime.

The sizes are asked of the route's runner (the package's manifest ``output_dims``, as on a device without the
ONNX). ONNX Runtime runs the model at every one of those inputs (:mod:`tests.ort_sweep`: about 25 CPU minutes
for the four rec models the first time, then read from the asset cache, keyed by the model file and ONNX
Runtime's version), and the sizing code's shapes must equal its outputs' exactly; a spread of them is run live
every time. At every 7th rec width and over the det grid the shapes are also checked against ONNX's own C++ shape
inference (an implementation independent of the one that solved them) where it can tell them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np
import pytest

from paddlex_npu.config import OMBackendConfig
from paddlex_npu.run.buffers import MIN_BYTES
from paddlex_npu.run.runner import build_om_runner
from paddlex_npu.samples import assets
from tests.ort_sweep import output_shapes
from tests.ort_sweep import session as ort_session

RECS = (assets.REC, assets.REC_V5, assets.REC_V6_TINY, assets.REC_V6_SMALL)
DETS = (assets.DET, assets.DET_V6_TINY, assets.DET_V6_SMALL)
REC_WIDTHS = range(8, 3201)
LIVE_WIDTHS = [8, 9, 10, 11, 12, 13, 14, 15, 16, 317, 318, 319, 320, 1001, 3200]  # run again, uncached
DET_GRID = [32, 64, 96, 160, 320, 480, 736, 960, 1280, 1600, 2048, 2560, 3200, 3968]
ORT_DET = [(32, 32), (64, 96), (320, 736), (736, 320)]


def _ort_cache(asset_root):
    return asset_root / "ort-output-shapes"


def _runner(asset_root, name):
    return build_om_runner(asset_root / "om" / name, runtime="reference", device_id=0, config=OMBackendConfig())


def _feeds(shapes):
    return [np.broadcast_to(np.zeros((), np.float32), s) for s in shapes]  # shapes only: no memory


def _within(reserved: int, needed: int) -> bool:
    return needed <= reserved <= 1.25 * needed + 64 * 1024


class _OnnxShapes:
    """ONNX's C++ shape inference (strict, data propagation) on the graph with its large weights left out."""

    def __init__(self, path) -> None:
        import onnx
        from onnx import helper

        model = onnx.load(str(path))
        g = model.graph
        big = [i for i in g.initializer if math.prod(i.dims) > 64 and i.data_type == onnx.TensorProto.FLOAT]
        names = {i.name for i in big}
        kept = [i for i in g.initializer if i.name not in names]
        del g.initializer[:]
        g.initializer.extend(kept)
        g.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in big)
        for o in g.output:
            o.type.tensor_type.ClearField("shape")
        self.model, self.onnx = model, onnx

    def __call__(self, shape: List[int]) -> Optional[List[int]]:
        m = self.onnx.ModelProto()
        m.CopyFrom(self.model)
        for d, v in zip(m.graph.input[0].type.tensor_type.shape.dim, shape):
            d.Clear()
            d.dim_value = v
        out = self.onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True).graph.output[0]
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in out.type.tensor_type.shape.dim]
        return dims or None  # 0: a dim it cannot tell (PP-OCRv6 small's batch, after a reshape)


@pytest.mark.parametrize("name", RECS)
def test_every_rec_width_gets_what_the_model_writes(asset_root, name):
    runner = _runner(asset_root, name)
    try:
        itemsize = runner.output_itemsizes[0]
        claimed: Dict[int, List[int]] = {}
        for w in range(8, 3201):
            shape = [1, 3, 48, w]
            (dims,) = runner._sizer.shapes_for([shape])
            (reserved,) = runner.output_sizes(_feeds([shape]))
            assert _within(reserved, math.prod(dims) * itemsize), (w, dims, reserved)
            claimed[w] = dims
        onnx_path = asset_root / "om" / name / "inference.onnx"
        real = output_shapes(onnx_path, [(1, 3, 48, w) for w in REC_WIDTHS], _ort_cache(asset_root))
        for w in REC_WIDTHS:  # every width against ONNX Runtime's own output
            shape, nbytes = real[(1, 3, 48, w)]
            assert shape == claimed[w] and nbytes == math.prod(claimed[w]) * itemsize, (w, shape, claimed[w])
            assert _within(runner.output_sizes(_feeds([[1, 3, 48, w]]))[0], nbytes), w
        session = ort_session(onnx_path)
        for w in LIVE_WIDTHS:  # the cached figures are ONNX Runtime's: a spread of them again, live
            (out,) = session.run(None, {session.get_inputs()[0].name: np.zeros((1, 3, 48, w), np.float32)})[:1]
            assert list(out.shape) == real[(1, 3, 48, w)][0], w
        onnx_shapes = _OnnxShapes(asset_root / "om" / name / "inference.onnx")
        told = 0
        widths = range(8, 3201, 7) if onnx_shapes([1, 3, 48, 320]) is not None else []
        for w in widths:  # 7: coprime with the CTC stride of 8, so every residue is visited
            dims = onnx_shapes([1, 3, 48, w])
            if dims is not None and dims[1]:
                told += 1
                assert len(dims) == 3 and all(d in (0, c) for d, c in zip(dims, claimed[w])), (w, dims)
        # batches scale the first dim only
        (six,) = runner._sizer.shapes_for([[6, 3, 48, 1203]])
        assert six == [6, *claimed[1203][1:]]
    finally:
        runner.close()
    if name != assets.REC:  # ONNX cannot follow PP-OCRv4's paddle2onnx reshapes; ONNX Runtime checked it
        assert told > 400


@pytest.mark.parametrize("name", DETS)
def test_a_grid_of_det_sizes_gets_what_the_model_writes(asset_root, name):
    runner = _runner(asset_root, name)
    onnx_shapes = _OnnxShapes(asset_root / "om" / name / "inference.onnx")
    try:
        for h in DET_GRID:
            for w in DET_GRID:
                shape = [1, 3, h, w]
                (dims,) = runner._sizer.shapes_for([shape])
                assert dims == [1, 1, h, w] == onnx_shapes(shape), shape
                (reserved,) = runner.output_sizes(_feeds([shape]))
                assert _within(reserved, h * w * 4), shape
        grid = [(1, 3, h, w) for h in DET_GRID for w in DET_GRID]
        real = output_shapes(asset_root / "om" / name / "inference.onnx", grid, _ort_cache(asset_root))
        for shape in grid:  # the whole grid against ONNX Runtime's own output
            out_shape, nbytes = real[shape]
            assert out_shape == runner._sizer.shapes_for([list(shape)])[0], shape
            assert _within(runner.output_sizes(_feeds([list(shape)]))[0], nbytes), shape
        session = ort_session(asset_root / "om" / name / "inference.onnx")
        for h, w in ORT_DET:  # live
            (out,) = session.run(None, {"x": np.zeros((1, 3, h, w), np.float32)})
            assert list(out.shape) == real[(1, 3, h, w)][0]
    finally:
        runner.close()


@pytest.mark.parametrize(("name", "hw"), [(assets.TEXTLINE_ORI, (48, 192)), (assets.DOC_ORI, (224, 224))])
def test_classifiers_get_what_they_write_at_every_batch(asset_root, name, hw):
    runner = _runner(asset_root, name)
    batches = [(n, 3, *hw) for n in range(1, 65)]
    real = output_shapes(asset_root / "om" / name / "inference.onnx", batches, _ort_cache(asset_root))
    try:
        for shape in batches:
            (dims,) = runner._sizer.shapes_for([list(shape)])
            assert list(real[shape][0]) == dims and real[shape][1] == math.prod(dims) * 4, shape
            assert _within(runner.output_sizes(_feeds([list(shape)]))[0], real[shape][1])
    finally:
        runner.close()


def test_layout_boxes_are_bounded_by_data_dependent_max(asset_root, tmp_path):
    """boxes [K, 6] after NMS: K follows the page, so it is sized for ``data_dependent_max`` rows (1000 by
    default), which a real page's K stays below; box_num [1] is fixed."""
    from PIL import Image

    runner = _runner(asset_root, assets.LAYOUT)
    try:
        page = assets.render_text_image(["Title", "A paragraph of text", "another line"], tmp_path / "p.png")
        img = np.asarray(Image.open(page).convert("RGB").resize((608, 800)), np.float32).transpose(2, 0, 1)[None]
        feeds = [img / 255.0, np.ones((1, 2), np.float32)]
        boxes, box_num = runner(feeds)
        reserved = runner.output_sizes(feeds)
        assert reserved[0] == MIN_BYTES * math.ceil(1000 * 6 * 4 / MIN_BYTES) and reserved[1] == MIN_BYTES
        assert _within(reserved[0], boxes.nbytes) and _within(reserved[1], box_num.nbytes)
        assert runner._sizer.shapes_for([list(f.shape) for f in feeds]) == [[1000, 6], None]  # None: static
    finally:
        runner.close()
