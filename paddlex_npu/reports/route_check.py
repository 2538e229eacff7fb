"""selftest's route check: one model through the route on two sides, at the shapes that matter, every output compared.

Shapes: a base call (rec 1x3x48x320, det 1x3x160x640) and a call at the largest input the package takes (the top of
its dymshape range, the largest gear, or its static shape; an unbounded dim keeps the base size), so the top of a
range or the largest gear runs on the device. Inputs are text rendered at the call's native size (never upscaled).

Comparisons (:func:`compare`):

- det: the DB maps thresholded at 0.3 agree on at least :data:`DET_AGREEMENT` of the pixels;
- rec: the greedy CTC texts (per step the best class, repeats collapsed, the blank dropped) are equal, and a reduced
  package's ``ctc_scores`` (the best class' probability per step) agree within :data:`CTC_SCORE_ATOL`, the fp16
  tolerance: fp16 keeps 11 significant bits (a step of 2^-11 at 1.0), and the OM computes the softmax in fp16
  after a network that does too, so a probability near 1 may move by a few hundredths. When texts differ, the
  reference's top-2 margin at each differing step tells a near-tie (both classes within :data:`TIE_MARGIN`: fp16
  may pick either) from an error: texts that differ only at near-ties pass, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

BASE_SHAPES = {"det": [1, 3, 160, 640], "rec": [1, 3, 48, 320]}
DET_AGREEMENT = 0.99  # share of pixels whose DB map (> 0.3) agrees between the two sides
CTC_SCORE_ATOL = 0.03  # |device - reference| of a step's best probability, fp16 against fp32
TIE_MARGIN = 0.05  # the reference's top-2 probability margin below which fp16 may flip the step
TEXT = "PaddleX on Ascend NPU 2024-11-30 total 1234.56 "


def kind(model: str) -> str:
    return "det" if model.endswith("det") else "rec"


def call_shapes(man: Any, model: str) -> Dict[str, List[int]]:
    """The input shapes to call the package at: ``base``, and ``top`` (the largest it takes) when that differs."""
    base = list(BASE_SHAPES[kind(model)])
    if man.mode == "dymshape":
        ranges = man.input_ranges()[man.inputs[0].name]
        top = [hi if hi > 0 else b for (_, hi), b in zip(ranges, base)]
    else:
        top = max((gear[0] for gear in man.gear_shapes()), key=lambda s: int(np.prod(s)))
    return {"base": base} if top == base else {"base": base, "top": list(top)}


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow 10.1+: a scalable font
    except TypeError:
        return ImageFont.load_default()


def render(model: str, shape: List[int], pixels: bool = False, mask_row: Optional[int] = None) -> List[np.ndarray]:
    """Text rendered at ``shape`` ``[N, 3, H, W]`` itself, normalised as PaddleX's preprocessing does, or with
    ``pixels`` the 8-bit pixels (for a package that normalises on the device); ``mask_row``: a recognition package's
    lines, ``H`` = ``mask_row`` + 1, the last row of channel 0 marking every position a pixel."""
    from PIL import Image, ImageDraw

    n, _, h, w = shape
    if pixels and mask_row is not None:
        lines = render(model, [n, 3, mask_row, w], pixels=True)[0]
        marks = np.zeros((n, 3, 1, w), np.uint8)
        marks[:, 0] = 1
        return [np.ascontiguousarray(np.concatenate([lines, marks], axis=2))]
    rec = kind(model) == "rec"
    size = max(8, int(h * 0.6)) if rec else 24
    font = _font(size)
    line = TEXT * (1 + w // (size * 10))
    samples = []
    for k in range(n):
        img = Image.new("RGB", (w, h), "white")
        draw = ImageDraw.Draw(img)
        for y in [(h - size) // 2] if rec else range(8, h - size, size * 2):
            draw.text((4 + 7 * k, y), line[k:], fill="black", font=font)
        samples.append(np.asarray(img, np.uint8))
    if pixels:
        return [np.ascontiguousarray(np.stack(samples).transpose(0, 3, 1, 2))]
    x = np.stack(samples).astype(np.float32) / 255
    x = (x - 0.5) / 0.5 if rec else (x - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    return [x.transpose(0, 3, 1, 2).astype(np.float32)]


def ctc_steps(out: np.ndarray) -> np.ndarray:
    """The best class per step: ``out`` [N, T, C] scores (their argmax) or [N, T] class indices."""
    steps = np.asarray(out)
    return steps.argmax(-1) if steps.ndim == 3 else steps.astype(np.int64)


def ctc_texts(out: np.ndarray, blank: int = 0) -> List[List[int]]:
    """Greedy CTC decoding per sample: best classes, repeats collapsed, the blank dropped."""
    texts = []
    for row in ctc_steps(out).reshape(-1, np.asarray(out).shape[1]):
        keep = np.ones(len(row), bool)
        keep[1:] = row[1:] != row[:-1]
        texts.append([int(c) for c in row[keep & (row != blank)]])
    return texts


def differing_steps(device: np.ndarray, reference: np.ndarray) -> List[List[int]]:
    """[sample, step] of every step whose best class differs."""
    a, b = ctc_steps(device), ctc_steps(reference)
    return [[int(i), int(t)] for i, t in np.argwhere(a != b)]


def top2_margin(probs: np.ndarray, sample: int, step: int) -> float:
    """The reference's best minus second-best probability at one step."""
    row = np.sort(np.asarray(probs[sample, step], np.float64))
    return float(row[-1] - row[-2])


@dataclass
class Verdict:
    ok: bool
    detail: str
    data: Dict[str, Any] = field(default_factory=dict)


def compare(
    model: str,
    device: List[np.ndarray],
    reference: List[np.ndarray],
    charset: Optional[List[str]] = None,
    probs: Optional[Callable[[], np.ndarray]] = None,
    scores_atol: Optional[float] = CTC_SCORE_ATOL,
) -> Verdict:
    """Every output of one call, device against reference (see the module docstring). ``probs``: the reference's
    full probabilities [N, T, C], for the margins where texts differ (a reduced package returns none).
    ``scores_atol`` None: ``ctc_scores`` recorded, not judged (a padded call against an unpadded one: padding a
    sequence model's input moves its scores, whatever the precision)."""
    d0, r0 = np.asarray(device[0]), np.asarray(reference[0])
    if d0.shape[:2] != r0.shape[:2] or (kind(model) == "det" and d0.shape != r0.shape):
        return Verdict(False, f"output shapes differ: {d0.shape} vs {r0.shape}")
    if kind(model) == "det":
        agree = float(np.mean((d0 > 0.3) == (r0 > 0.3)))
        data = {"max_abs": float(np.abs(d0 - r0).max()), "agreement": agree}
        return Verdict(agree >= DET_AGREEMENT, f"DB maps agree on {agree:.4f} of pixels (>= {DET_AGREEMENT})", data)
    return _compare_rec(device, reference, charset, probs, scores_atol)


def _spell(text: List[int], charset: Optional[List[str]]) -> Any:
    if charset is None:
        return text
    return "".join(charset[i] if 0 <= i < len(charset) else f"<{i}>" for i in text)


def _compare_rec(
    device: List[np.ndarray],
    reference: List[np.ndarray],
    charset: Optional[List[str]],
    probs: Optional[Callable[[], np.ndarray]],
    scores_atol: Optional[float],
) -> Verdict:
    d0, r0 = np.asarray(device[0]), np.asarray(reference[0])
    ours, theirs = ctc_texts(d0), ctc_texts(r0)
    steps = differing_steps(d0, r0)
    data: Dict[str, Any] = {
        "device_text": [_spell(t, charset) for t in ours],
        "reference_text": [_spell(t, charset) for t in theirs],
        "first_differing_step": steps[0] if steps else None,
    }
    problems = []
    if len(device) > 1:  # a reduced package: [ctc_indices, ctc_scores]
        diff = float(np.abs(np.asarray(device[1], np.float64) - np.asarray(reference[1], np.float64)).max())
        data["ctc_scores_max_abs"] = diff
        if scores_atol is not None and diff > scores_atol:
            problems.append(f"ctc_scores differ by {diff:.4f} (> {scores_atol}, the fp16 tolerance)")
    elif d0.shape == r0.shape:
        data["max_abs"] = float(np.abs(d0.astype(np.float64) - r0).max())
    note = ""
    if ours != theirs:
        full = (r0 if r0.ndim == 3 else None) if probs is None else probs()
        margins = [top2_margin(full, i, t) for i, t in steps] if full is not None else []
        data["differing_steps"] = [s + [m] for s, m in zip(steps, margins)] if margins else steps
        ties = bool(margins) and max(margins) < TIE_MARGIN
        data["near_ties_only"] = ties
        if not ties:
            how = f"top-2 margins {[round(m, 4) for m in margins]}" if margins else "no scores to tell a near-tie"
            problems.append(
                f"greedy CTC texts differ: device {data['device_text']}, reference {data['reference_text']} "
                f"(differing steps [sample, step] {steps[:8]}; {how}; a near-tie is < {TIE_MARGIN})"
            )
        note = f"; texts differ only at near-ties (top-2 margin < {TIE_MARGIN}): {steps[:8]}"
    if problems:
        return Verdict(False, "; ".join(problems), data)
    return Verdict(True, f"greedy CTC texts equal: {data['device_text']}{note}", data)


def reference_probs(onnx_path: str, feeds: List[np.ndarray], source: str) -> np.ndarray:
    """The probabilities a reduced recogniser reduced (its manifest's ``reduction.source``), from its ONNX on the
    CPU with that tensor added as an output."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(onnx_path)
    if source not in [o.name for o in model.graph.output]:
        model.graph.output.append(onnx.helper.make_tensor_value_info(source, onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run([source], {sess.get_inputs()[0].name: feeds[0]})[0])


def shapes_text(shapes: Dict[str, List[int]]) -> str:
    return ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in shapes.items())


Outputs = Tuple[List[np.ndarray], List[np.ndarray]]
