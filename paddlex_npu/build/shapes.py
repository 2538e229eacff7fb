"""What varies in a model's inputs, by task, and the ATC options that follow (shapes, ranges, default gears).

The task is that of the PaddleX predictor of ``Global.model_name`` (asked of the adapter; the task table is
:mod:`paddlex_npu.run.tasks`); the limits come from the
model's ``inference.yml`` preprocessing, but for detection's dymshape ranges, which reach what PaddleX's OCR
pipelines can send (``max_side_limit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ConfigError, ConvertError
from ..run.tasks import TEXT_DET, TEXT_REC, task_of_predictor

REC_MAX_WIDTH = 3200  # PaddleX's text recognition resizes lines up to this width
DET_DEFAULT_LIMIT = 960
# DetResizeForTest's max_side_limit default: what PaddleX's OCR pipelines (limit_type min) can feed detection
DET_MAX_SIDE_LIMIT = 4000


@dataclass
class Task:
    """What varies in a model's inputs, as PaddleX's preprocessing feeds it."""

    predictor: str
    kind: str  # text_det | text_rec | batch
    limit: int = DET_DEFAULT_LIMIT  # text_det: largest side the model's own preprocessing makes (default gears)
    range_limit: int = DET_MAX_SIDE_LIMIT  # text_det: largest side of the dymshape ranges (pipelines go up to it)
    max_batch: int = 6
    image_hw: Optional[Tuple[int, int]] = None  # batch: the fixed H, W the preprocessing produces


def predictor_class(model_name: str) -> str:
    """The PaddleX predictor class name of a model, from the installed PaddleX's registry."""
    from ..paddlex.patcher import adapter

    entry = adapter().entry(model_name)
    if entry is None:
        raise ConvertError(
            f"PaddleX does not know the model {model_name!r} (Global.model_name of inference.yml), so its task and "
            "input shapes are unknown: fix Global.model_name, or pass --input-shape and --gears yourself"
        )
    return entry.predictor.__name__


def _det_limit(cfg: Dict[str, Any]) -> int:
    for op in cfg.get("PreProcess", {}).get("transform_ops", []):
        args = (op or {}).get("DetResizeForTest") if isinstance(op, dict) else None
        if args:
            return int(args.get("resize_long") or args.get("limit_side_len") or DET_DEFAULT_LIMIT)
    return DET_DEFAULT_LIMIT


def _fixed_hw(cfg: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """The H, W a model's preprocessing ends with: CropImage size, ResizeImage size [W, H], or PaddingTableImage
    size, which PaddleX's table predictor pads to as a square of its first value (``Pad(target_size=size[0])``)."""
    hw = None
    for op in cfg.get("PreProcess", {}).get("transform_ops", []) or []:
        if not isinstance(op, dict):
            continue
        args = next(iter(op.values())) or {}
        size = args.get("size") if isinstance(args, dict) else None
        if ("CropImage" in op or "ResizeImage" in op) and size:
            hw = (size, size) if isinstance(size, int) else (size[1], size[0])
        elif "PaddingTableImage" in op and size:
            side = size if isinstance(size, int) else size[0]
            hw = (side, side)
    return hw


def _ceil32(side: float) -> int:
    return int(math.ceil(side / 32) * 32)


def task_of(model_name: str, cfg: Dict[str, Any], max_batch: int = 6, max_side: Optional[int] = None) -> Task:
    predictor = predictor_class(model_name)
    task = task_of_predictor(predictor)
    if task == TEXT_DET:
        limit = max_side or _det_limit(cfg)
        top = max_side or DET_MAX_SIDE_LIMIT
        return Task(predictor, "text_det", limit=_ceil32(limit), range_limit=_ceil32(top), max_batch=1)
    if task == TEXT_REC:
        return Task(predictor, "text_rec", max_batch=max_batch)
    return Task(predictor, "batch", max_batch=max_batch, image_hw=_fixed_hw(cfg))


def task_shapes(task: Task, inputs: List[Tuple[str, List[int], str]]) -> List[List[int]]:
    """ATC ``--input_shape`` per input: -1 where the task varies a dim."""
    shapes = []
    for _, shape, _ in inputs:
        s = list(shape)
        if task.kind == "text_det" and len(s) == 4:
            s = [1, s[1] if s[1] > 0 else 3, -1, -1]
        elif task.kind == "text_rec" and len(s) == 4:
            s = [-1, s[1] if s[1] > 0 else 3, 48 if s[2] < 0 else s[2], -1]
        elif task.kind == "batch" and len(s) == 4 and task.image_hw and (s[2] < 0 or s[3] < 0):
            s = [-1, s[1] if s[1] > 0 else 3, *task.image_hw]
        shapes.append(s)
    return shapes


def default_ranges(task: Task, shapes: List[List[int]]) -> List[List[Tuple[int, int]]]:
    """dymshape ranges per input dim: what PaddleX's preprocessing of the task can produce."""
    out = []
    for s in shapes:
        r = []
        for j, d in enumerate(s):
            if d > 0:
                r.append((d, d))
            elif task.kind == "text_det":
                r.append((1, task.max_batch) if j == 0 else (32, task.range_limit))
            elif task.kind == "text_rec":
                r.append((1, task.max_batch) if j == 0 else (32, REC_MAX_WIDTH))
            elif j == 0:
                r.append((1, task.max_batch))
            else:
                r.append((1, -1))
        out.append(r)
    return out


def default_gears(task: Task, shapes: List[List[int]]) -> Tuple[str, List[List[int]]]:
    """(ATC gear mode, gears) a user without samples would start from."""
    if task.kind == "text_det":
        sides = sorted({_ceil32(task.limit * f) for f in (1 / 3, 2 / 3, 1)})
        return "dymhw", [[h, w] for h in sides for w in sides]
    if task.kind == "text_rec":
        widths = [320, 640, 960, 1600, REC_MAX_WIDTH]
        return "dymdims", [[n, w] for n in sorted({1, task.max_batch}) for w in widths]
    if any(d < 0 for s in shapes for d in s[1:]):
        raise ConfigError(
            f"the inputs {shapes} vary in more than the batch and the task ({task.predictor}) does not say how: pass "
            "--input-shape with fixed dims (ATC syntax, e.g. 'x:-1,3,224,224') and/or --gears"
        )
    batches = sorted({b for b in (1, 2, 4, 8, 16, 32) if b <= max(task.max_batch, 2)} | {task.max_batch})
    return "dymbatch", [[b] for b in batches]


def sample_shape(task: Task, shape: List[int]) -> List[int]:
    """A representative input shape for checking an export."""
    if task.kind == "text_det" and len(shape) == 4:
        return [1, 3, 640, 640]
    if task.kind == "text_rec" and len(shape) == 4:
        return [1, 3, 48, 320]
    return [d if d > 0 else 1 for d in shape]
