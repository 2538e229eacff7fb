"""PP-DocLayout_plus-L (RT-DETR-L, PP-StructureV3's default layout model) and RT-DETR-L_wired_table_cell_det
(table_recognition_v2's cell detector; the wireless one has the same architecture and config) of the real
architecture with seeded weights: no package on the registries ships their weights (issue 55, item 4). Built once
each into ``.cache/seeded/<model>-v<N>/`` by ``.venv/bin/python -m tests.paddlex.rtdetr_seeded [MODEL...]``
(PaddleX 3.7, about a minute each on two busy cores; downloads the ``p2o`` wheel with pip), never committed:

- ``dynamic/``: ``config.json`` + ``model.safetensors`` (Hugging Face layout) + ``inference.yml`` for PaddleX's
  ``paddle_dynamic`` engine, from PaddleX's own ``RTDETR`` (``object_detection/modeling/rt_detr.py``) with PaddleX's
  published config for the model (``pdparams2safetensors``: ``MODEL_CONFIGS``, ``build_inference_meta``: 800x800
  (layout) or 640x640 (cells) bicubic resize, pixels / 255, the labels), weights from ``paddle.seed``; the last
  class head's bias is shaped on the model's rendered image (a page, ``samples/tables.render_page``; a ruled table,
  ``render_table``) so that a few queries of a few classes score above the 0.5 threshold, each by a margin (an
  untrained head puts every query on one or two classes);
- ``static/``: ``paddle.jit.to_static(full_graph=True)`` + ``jit.save`` at batch 1 (PIR ``inference.json``), after
  three equivalent rewrites of PaddleX's code (:data:`REWRITES`) that the static program or ``p2o`` needs;
- ``onnx/``: ``p2o`` 0.1.2's ONNX of that program (opset 17: GridSample, TopK, GatherND) + ``inference.yml``,
  for PaddleX's ``onnxruntime`` engine;
- ``om/``: ``paddlex-npu convert`` of ``onnx/`` for Ascend310P3 (no ``inference.om``: no ATC here);
- ``build.json``: the versions, the shaped classes and margins, the timings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

LAYOUT, CELLS = "PP-DocLayout_plus-L", "RT-DETR-L_wired_table_cell_det"
MODELS = (LAYOUT, CELLS)
VERSION = 1
REPO = Path(__file__).resolve().parents[2]
SEED = 20261207
P2O = "p2o==0.1.2"
SOC = "Ascend310P3"
SIZE = {LAYOUT: 800, CELLS: 640}  # PaddleX's Resize target for the model (its inference.yml)
SHAPED = {LAYOUT: (5, 6), CELLS: (1, 16)}  # (classes given boxes, most boxes per class)
MIN_GAP = 0.06  # logits: a score margin of about 0.007 either side of the 0.5 threshold
REWRITES = (
    "RTDETRFrozenBatchNorm2d.forward: rsqrt -> 1 / sqrt (p2o 0.1.2 has no rsqrt)",
    "RTDETRModel.generate_anchors: the in-place per-axis divides -> one divide by [w, h]",
    "MultiScaleDeformableAttention.forward: a 5-D transpose given a 4-axis perm [0, 2, 1, 3] (eager Paddle pads "
    "it; the static program and ONNX refuse it) -> [0, 2, 1, 3, 4]",
)


def root(model: str = LAYOUT) -> Path:
    return REPO / ".cache" / "seeded" / f"{model}-v{VERSION}"


def folders(model: str = LAYOUT) -> Dict[str, Path]:
    return {k: root(model) / k for k in ("dynamic", "static", "onnx", "om")}


def built(model: str = LAYOUT) -> bool:
    return (root(model) / "build.json").is_file()


def page(model: str = LAYOUT) -> Path:
    """The rendered image the bias was shaped on: a page for the layout model, a ruled table for the cell
    detector (rendered again if missing)."""
    from paddlex_npu.samples.tables import HEADER, ITEMS, render_page, render_table

    folder = root(model) / "page"
    png = folder / ("page.png" if model == LAYOUT else "table.png")
    if png.is_file():
        return png
    return render_page(folder)[0] if model == LAYOUT else render_table([HEADER] + ITEMS, png)


def _rewrites() -> None:
    """The equivalent rewrites of :data:`REWRITES`, on PaddleX's classes (this process only)."""
    import paddle
    import paddle.nn.functional as F  # noqa: N812 (as PaddleX writes it)
    from paddlex.inference.models.object_detection.modeling import rt_detr as R  # noqa: N812

    def bn_forward(self, x):
        scale = self.weight.reshape([1, -1, 1, 1]) / paddle.sqrt(self._variance.reshape([1, -1, 1, 1]) + 1e-5)
        return x * scale + (self.bias.reshape([1, -1, 1, 1]) - self._mean.reshape([1, -1, 1, 1]) * scale)

    def generate_anchors(self, spatial_shapes, grid_size=0.05, dtype="float32"):
        anchors = []
        for level, (h, w) in enumerate(spatial_shapes):
            gy, gx = paddle.meshgrid(paddle.arange(end=h).astype(dtype), paddle.arange(end=w).astype(dtype))
            xy = (paddle.stack([gx, gy], axis=-1).unsqueeze(0) + 0.5) / paddle.to_tensor([float(w), float(h)])
            wh = paddle.ones_like(xy) * grid_size * (2.0**level)
            anchors.append(paddle.concat([xy, wh], axis=-1).reshape([-1, h * w, 4]))
        anchors = paddle.concat(anchors, axis=1)
        valid = ((anchors > 1e-2) & (anchors < 1 - 1e-2)).all(axis=-1, keepdim=True)
        anchors = paddle.log(anchors / (1 - anchors))
        return paddle.where(valid, anchors, paddle.full_like(anchors, float("inf"))), valid

    def msda_forward(self, value, _shapes, shapes_list, _start, sampling_locations, attention_weights, _step):
        b, _, heads, dim = value.shape
        _, q, heads, levels, points, _ = sampling_locations.shape
        values = paddle.split(value, [h * w for h, w in shapes_list], axis=1)
        grids = 2 * sampling_locations - 1
        sampled = []
        for lvl, (h, w) in enumerate(shapes_list):
            v = values[lvl].flatten(2).transpose([0, 2, 1]).reshape([b * heads, dim, h, w])
            g = grids[:, :, :, lvl].transpose([0, 2, 1, 3, 4]).reshape([b * heads, q, points, 2])
            sampled.append(F.grid_sample(v, g, mode="bilinear", padding_mode="zeros", align_corners=False))
        weights = attention_weights.transpose([0, 2, 1, 3, 4]).reshape([b * heads, 1, q, levels * points])
        out = (paddle.stack(sampled, axis=-2).flatten(-2) * weights).sum(-1).reshape([b, heads * dim, q])
        return out.transpose([0, 2, 1])

    R.RTDETRFrozenBatchNorm2d.forward = bn_forward
    R.RTDETRModel.generate_anchors = generate_anchors
    R.MultiScaleDeformableAttention.forward = msda_forward


def _pixels(png: Path, size: int) -> np.ndarray:
    """The image as PaddleX's preprocessing for these models gives it: RGB, size x size bicubic, / 255, NCHW."""
    import cv2

    rgb = cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)
    x = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_CUBIC).astype(np.float32) / 255.0
    return x.transpose(2, 0, 1)[None]


def shaped_bias(raw: np.ndarray, classes: int, most: int) -> Tuple[np.ndarray, List[Dict[str, Any]]]:
    """The class head's bias from its logits without bias ``raw`` [queries, classes]: per class, the most queries
    k <= ``most`` whose k-th and (k+1)-th best logits are at least :data:`MIN_GAP` apart; for the ``classes``
    classes with most (then widest gap), the bias puts the threshold (logit 0) half-way between them; every other
    class stays 4 below its best query."""
    bias = -raw.max(0) - 4.0
    best = []
    for c in range(raw.shape[1]):
        top = np.sort(raw[:, c])[::-1][: most + 1]
        gaps = top[:-1] - top[1:]
        wide = [k for k in range(most) if gaps[k] >= MIN_GAP]
        if wide:
            k = wide[-1]
            best.append((k + 1, float(gaps[k]), c, float(-(top[k] + top[k + 1]) / 2)))
    chosen = sorted(best, reverse=True)[:classes]
    for _, _, c, b in chosen:
        bias[c] = b
    return bias.astype(np.float32), [{"class": c, "boxes": k, "logit_margin": g / 2} for k, g, c, _ in chosen]


def _seeded(name: str, png: Path):
    """PaddleX's RTDETR with PaddleX's config for the model, seeded, its last class head's bias shaped on ``png``."""
    import paddle
    from paddlex.inference.models.object_detection.modeling import RTDETR
    from paddlex.inference.models.object_detection.modeling._config_rt_detr import RTDETRConfig
    from paddlex.modules.base.utils.pdparams2safetensors.model_config import MODEL_CONFIGS

    paddle.seed(SEED)
    config = RTDETRConfig(**dict(MODEL_CONFIGS[name]))
    model = RTDETR(config)
    model.eval()
    head = model.model.decoder.class_embed[-1]
    with paddle.no_grad():
        logits = model.model(paddle.to_tensor(_pixels(png, SIZE[name])))["intermediate_logits"][0, -1].numpy()
        bias, shaped = shaped_bias(logits - head.bias.numpy(), *SHAPED[name])
        head.bias.set_value(paddle.to_tensor(bias))
    return model, config, shaped


def _save_dynamic(name: str, model: Any, config: Any, dst: Path) -> None:
    """The folder PaddleX's ``paddle_dynamic`` engine loads (``from_pretrained(use_safetensors=True,
    convert_from_hf=True)``): HF keys, the keys PaddleX transposes on load transposed back."""
    import yaml
    from paddlex.modules.base.utils.pdparams2safetensors.inference_meta import build_inference_meta
    from safetensors.numpy import save_file

    dst.mkdir(parents=True, exist_ok=True)
    transposed = set(model.get_transpose_weight_keys())
    arrays = {}
    for key, value in model.get_hf_state_dict().items():
        a = value.numpy()
        arrays[key] = np.ascontiguousarray(a.T) if key in transposed else a
    save_file(arrays, str(dst / "model.safetensors"), metadata={"format": "np"})
    (dst / "config.json").write_text(json.dumps(config.to_dict(), indent=1))
    meta = {"Global": {"model_name": name}, **build_inference_meta(name)}
    (dst / "inference.yml").write_text(yaml.safe_dump(meta, sort_keys=False))


def _export_static(src: Path, dst: Path, size: int) -> None:
    """PIR program at batch 1 with PaddleX's input names (``im_shape``, ``image``, ``scale_factor``)."""
    import paddle
    from paddle.static import InputSpec
    from paddlex.inference.models.object_detection.modeling import RTDETR

    model = RTDETR.from_pretrained(str(src), use_safetensors=True, convert_from_hf=True, dtype="float32")
    model.eval()

    class Inputs(paddle.nn.Layer):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, im_shape, image, scale_factor):
            return self.inner([im_shape, image, scale_factor])

    wrapped = Inputs(model)
    wrapped.eval()
    spec = [
        InputSpec([1, 2], "float32", "im_shape"),
        InputSpec([1, 3, size, size], "float32", "image"),
        InputSpec([1, 2], "float32", "scale_factor"),
    ]
    paddle.jit.save(paddle.jit.to_static(wrapped, input_spec=spec, full_graph=True), str(dst / "inference"))
    shutil.copyfile(src / "inference.yml", dst / "inference.yml")


def p2o_binary(cache: Path) -> Path:
    """``p2o``'s converter (a Rust binary in the wheel's data scripts), the wheel downloaded by pip once."""
    exe = cache / "p2o-bin" / "p2o"
    if exe.is_file():
        return exe
    wheels = cache / "wheels"
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels), P2O]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300)
    wheel = next(wheels.glob(f"p2o-{P2O.split('==')[1]}-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".data/scripts/p2o"))
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_bytes(zf.read(member))
    exe.chmod(0o755)
    return exe


def _to_onnx(exe: Path, static: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    argv = [str(exe), str(static / "inference.json"), str(static / "inference.pdiparams"), str(dst / "inference.onnx")]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600)
    shutil.copyfile(static / "inference.yml", dst / "inference.yml")


def _convert(onnx_dir: Path, dst: Path) -> List[str]:
    """``paddlex-npu convert`` as a user runs it (default mode): no input dim varies, so the OM is static, its boxes
    output ended in a Reshape to [300, 6] (GE cannot infer that shape from p2o's graph)."""
    from paddlex_npu.build.convert import convert

    return list(convert(onnx_dir, dst, SOC, overwrite=True, run=False).notes)


def build(model: str = LAYOUT) -> Dict[str, Any]:
    """Build every folder of the module docstring for ``model`` (replacing a partial build); returns build.json."""
    import paddle
    import paddlex

    shutil.rmtree(root(model), ignore_errors=True)
    dirs, times, start = folders(model), {}, time.monotonic()
    seeded, config, shaped = _seeded(model, page(model))
    _save_dynamic(model, seeded, config, dirs["dynamic"])
    times["seeded"] = time.monotonic() - start
    _rewrites()
    _export_static(dirs["dynamic"], dirs["static"], SIZE[model])
    times["static"] = time.monotonic() - start
    _to_onnx(p2o_binary(root(model).parent), dirs["static"], dirs["onnx"])
    times["onnx"] = time.monotonic() - start
    notes = _convert(dirs["onnx"], dirs["om"])
    times["om"] = time.monotonic() - start
    info = {
        "model": model,
        "weights": "architecture, seeded weights",
        "seed": SEED,
        "versions": {"paddlex": paddlex.__version__, "paddlepaddle": paddle.__version__, "p2o": P2O},
        "parameters": int(sum(int(np.prod(p.shape)) for p in seeded.parameters())),
        "shaped": shaped,
        "rewrites": list(REWRITES),
        "convert_notes": notes,
        "seconds": {k: round(v, 1) for k, v in times.items()},
    }
    (root(model) / "build.json").write_text(json.dumps(info, indent=1))
    return info


if __name__ == "__main__":
    from paddlex_npu.samples import env

    env.prepare(default_runtime=False)
    for name in sys.argv[1:] or MODELS:
        print(json.dumps(build(name), indent=1))
