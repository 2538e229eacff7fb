"""Shape policy: how real inputs meet an OM's shapes, and how outputs come back. Pure numpy, no PaddleX.

- ``dymshape``: inputs pass through; shapes outside the OM's ranges are refused with the ranges named, or,
  above them with ``oversize`` ``fit``, resized down into them as below (:func:`run_in_ranges`).
- gears (``dymbatch``/``dymhw``/``dymdims``) and ``static`` (one gear): each input is padded up to the smallest
  gear that holds it (least padded elements): batch rows repeat the last real row, other dims are padded at
  their end (bottom/right) with ``pad_value``. Outputs are cut back: padded batch rows dropped, and the output
  dims that follow a padded input dim cropped in proportion (DB probability maps, CTC time steps,
  segmentation maps). Detection outputs (``boxes [M, ...]`` + ``box_num [N]``) drop the boxes of padded
  images; boxes are in original-image coordinates (``scale_factor``), so bottom/right padding moves none.
  A batch above the largest gear is split into chunks and the outputs joined.
- An input larger than every gear (not just its batch) follows ``backend_config["oversize"]``: ``error``
  refuses it (:class:`InputShapeError`); ``fit`` (the default) resizes it down to the largest gear that takes it,
  where the task says how (:func:`fit_shape`): text recognition squeezes the line's width (the CTC output is the
  text of the squeezed line), text detection scales the image (aspect ratio kept, 32-multiples) and scales the
  DB probability map back to the input's size, so PaddleX's post-processing finds boxes in the original
  coordinates. Other tasks have no fit and are refused.

Which dims a task may pad, and which output dims follow which input dims, is the task's
:class:`TaskPolicy`, looked up by the PaddleX predictor class name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConfigError, InputShapeError
from ..om.manifest import OMManifest, in_ranges
from . import tasks

Shape = List[int]


@dataclass(frozen=True)
class TaskPolicy:
    """What may be padded for a task and how outputs are cut back.

    ``pad_dims``: per input rank, the dims that may be padded (default: batch only).
    ``crops``: (output, output_dim, input, input_dim): output dim cropped in proportion to that input dim.
    ``detection``: outputs are ``boxes [M, ...]``, ``box_num [N]`` (+ masks ``[M, ...]``).
    ``multiple_of``: (rank, dims, m, why): the model needs those dims of its rank-``rank`` input multiples of m.
    ``output_ranks``: the ranks of the first outputs (another task's model has others).
    ``pad_mode``: ``constant`` (``pad_value``, after normalisation: what PaddleX's rec batching pads with) or
    ``edge`` (the last real row/column repeated: the image's own background, for text detection, whose
    preprocessing never pads; it moves DB boxes less than a constant).
    ``fit_dims``: the dims of the (rank-4) first input that oversize ``fit`` may shrink (none: no fit);
    ``fit_image``: shrink them together, keeping the aspect ratio (an image), else each alone (a line's width);
    ``fit_map_back``: resize the ``crops`` outputs back to the input's size (maps), else keep them (CTC steps).
    """

    name: str
    pad_dims: Dict[int, Tuple[int, ...]] = field(default_factory=dict)
    crops: Tuple[Tuple[int, int, int, int], ...] = ()
    detection: bool = False
    multiple_of: Optional[Tuple[int, Tuple[int, ...], int, str]] = None
    output_ranks: Tuple[int, ...] = ()
    pad_mode: str = "constant"
    fit_dims: Tuple[int, ...] = ()
    fit_image: bool = False
    fit_map_back: bool = False

    def paddable(self, rank: int) -> Tuple[int, ...]:
        return self.pad_dims.get(rank, (0,) if rank else ())


DEFAULT = TaskPolicy("batch")
_IMAGE = {4: (0, 2, 3)}
_POLICIES = {
    tasks.TEXT_DET: TaskPolicy(
        "text detection",
        _IMAGE,
        ((0, 2, 0, 2), (0, 3, 0, 3)),
        multiple_of=(4, (2, 3), 32, "the DB network halves H and W five times; DetResizeForTest makes them so"),
        output_ranks=(4,),
        pad_mode="edge",
        fit_dims=(2, 3),
        fit_image=True,
        fit_map_back=True,
    ),
    tasks.TEXT_REC: TaskPolicy("text recognition", {4: (0, 3)}, ((0, 1, 0, 3),), output_ranks=(3,), fit_dims=(3,)),
    tasks.DENSE_MAP: TaskPolicy("dense map", _IMAGE, ((0, -2, 0, 2), (0, -1, 0, 3))),
    tasks.DETECTION: TaskPolicy("detection", _IMAGE, detection=True),
    # outputs not batch-major or prompt-dependent: no padding at all (exact gears only)
    tasks.EXACT: TaskPolicy("exact shapes", {r: () for r in range(8)}),
}


def policy_for(predictor_class: Optional[str]) -> TaskPolicy:
    """The policy of a PaddleX predictor class's task (:mod:`.tasks`); batch-only when unknown."""
    return _POLICIES.get(tasks.task_of_predictor(predictor_class), DEFAULT)


_DIM_NAMES = {4: "NCHW"}


def check_task_rules(manifest: OMManifest, policy: TaskPolicy, name: str) -> None:
    """Refuse, at load, gears (static: the one shape) that break the task's shape rule, naming the gear."""
    if policy.multiple_of is None or manifest.mode == "dymshape":
        return
    rank, dims, m, why = policy.multiple_of
    for gear in manifest.gear_shapes():
        for spec, shape in zip(manifest.inputs, gear):
            bad = [j for j in dims if len(shape) == rank and shape[j] % m]
            if bad:
                labels = ", ".join(f"{_DIM_NAMES.get(rank, '?' * rank)[j]}={shape[j]}" for j in bad)
                raise ConfigError(
                    f"{name}: the {manifest.mode} gear {spec.name}:{','.join(map(str, shape))} has {labels}, not a "
                    f"multiple of {m}: {policy.name} needs {m}-multiples there ({why}). Rebuild the OM with such "
                    "gears (paddlex-npu convert --mode gears plans them)"
                )


def check_output_ranks(
    output_shapes: Sequence[Shape], output_names: Sequence[str], policy: TaskPolicy, name: str
) -> None:
    """Refuse a model whose outputs have other ranks than the task's (the package holds another model)."""
    for k, (want, shape) in enumerate(zip(policy.output_ranks, output_shapes)):
        if shape and len(shape) != want:
            raise ConfigError(
                f"{name}: output {k} ({output_names[k]}) has rank {len(shape)} ({list(shape)}), {policy.name} "
                f"gives rank {want}: the package holds another model than its inference.yml names; rebuild it "
                "from the right model with `paddlex-npu convert`"
            )


def check_ranges(
    manifest: OMManifest, shapes: Sequence[Shape], policy: Optional[TaskPolicy] = None, oversize: str = "error"
) -> None:
    """Refuse shapes outside a dymshape OM's ranges, naming the shape, the ranges and what to change."""
    ranges = manifest.input_ranges()
    for spec, shape in zip(manifest.inputs, shapes):
        if not in_ranges(shape, ranges[spec.name]):
            hint = ""
            if policy is not None and policy.fit_dims:
                hint = (
                    " (backend_config oversize: 'fit' resizes it down into the ranges)"
                    if oversize == "error"
                    else " (oversize 'fit' shrinks only the image or line size, and that does not bring it inside)"
                )
            raise InputShapeError(
                f"input {spec.name!r} of shape {list(shape)} is outside the OM's {manifest.describe()}: rebuild the "
                "OM with a wider --input_shape range, or limit the input in PaddleX (the OCR pipeline's "
                f"limit_side_len / max_side_limit, the batch size){hint}"
            )


def _inside(manifest: OMManifest, shapes: Sequence[Shape]) -> bool:
    """Whether every input shape lies within the dymshape OM's ranges."""
    ranges = manifest.input_ranges()
    return all(in_ranges(s, ranges[spec.name]) for spec, s in zip(manifest.inputs, shapes))


def fit_to_ranges(manifest: OMManifest, real: Sequence[Shape], policy: TaskPolicy) -> Optional[Shape]:
    """dymshape: the first input's shape with ``policy.fit_dims`` shrunk (as :func:`fit_shape` does) to the
    OM's upper bounds. None: no fit for the task, nothing to shrink, or the shapes still leave the ranges."""
    if not policy.fit_dims or len(real[0]) != 4:
        return None
    r, bounds = real[0], manifest.input_ranges()[manifest.inputs[0].name]
    cand = _shrunk(r, [d if hi == -1 else hi for d, (_, hi) in zip(r, bounds)], policy)
    if cand is None or cand == list(r):
        return None
    return cand if _inside(manifest, [cand, *real[1:]]) else None


def _shrunk(r: Shape, top: Shape, policy: TaskPolicy) -> Optional[Shape]:
    """``r`` with its fit dims shrunk to at most ``top`` (together for an image, each alone for a line); None
    for an empty input or one that would have to grow (below the task's multiple)."""
    if any(r[d] <= 0 for d in policy.fit_dims):
        return None
    m = policy.multiple_of[2] if policy.multiple_of else 1
    scales = [min(1.0, top[d] / r[d]) for d in policy.fit_dims]
    cand = list(r)
    for d, sc in zip(policy.fit_dims, scales):
        sc = min(scales) if policy.fit_image else sc
        cand[d] = min(top[d], max(m, int(r[d] * sc) // m * m))
    return None if any(cand[d] > r[d] for d in policy.fit_dims) else cand


def _fits(real: Sequence[Shape], gear: Sequence[Shape], policy: TaskPolicy, ignore_batch: bool) -> bool:
    for r, g in zip(real, gear):
        if len(r) != len(g):
            return False
        pad = policy.paddable(len(r))
        for j, (rd, gd) in enumerate(zip(r, g)):
            if j == 0 and ignore_batch and 0 in pad:
                continue
            if rd != gd and not (j in pad and rd < gd):
                return False
    return True


def choose_gear(manifest: OMManifest, real: Sequence[Shape], policy: TaskPolicy) -> List[Shape]:
    """The gear with the fewest padded elements that holds ``real``, or :class:`InputShapeError`."""
    fitting = [g for g in manifest.gear_shapes() if _fits(real, g, policy, ignore_batch=False)]
    if not fitting:
        allowed = {len(s): policy.paddable(len(s)) for s in real}
        raise InputShapeError(
            f"inputs of shapes {[list(s) for s in real]} fit none of the OM's {manifest.describe()} "
            f"(padding allowed for {policy.name}: dims by rank {allowed}): add a gear that holds them "
            "(paddlex-npu convert --gears auto plans one that holds every input; ATC --dynamic_dims), or resize "
            "the input"
            + (
                " (backend_config oversize: 'fit' resizes it down to the largest gear)"
                if policy.fit_dims
                else f" (oversize 'fit' has no resize for {policy.name})"
            )
        )
    return min(fitting, key=lambda g: sum(math.prod(s) for s in g))


def lead_input(real: Sequence[Shape], policy: TaskPolicy) -> Optional[int]:
    """The input whose first dim is the call's batch: the first one the policy may pad along dim 0 (a rank-0
    input, such as a loop step's counter, is never it); None when no input is batched."""
    return next((i for i, r in enumerate(real) if 0 in policy.paddable(len(r))), None)


def max_batch(manifest: OMManifest, real: Sequence[Shape], policy: TaskPolicy) -> Optional[int]:
    """The largest batch of the gears that hold ``real`` apart from its batch size (None: none does, or no input
    is batched)."""
    lead = lead_input(real, policy)
    if lead is None:
        return None
    batches = [g[lead][0] for g in manifest.gear_shapes() if _fits(real, g, policy, ignore_batch=True)]
    return max(batches) if batches else None


def pad_to(
    array: np.ndarray, shape: Shape, pad_value: float, paddable: Sequence[int], mode: str = "constant"
) -> np.ndarray:
    if list(array.shape) == list(shape):
        return array
    out = array
    if 0 in paddable and shape[0] > array.shape[0]:  # batch: repeat the last real row
        extra = np.repeat(out[-1:], shape[0] - out.shape[0], axis=0)
        out = np.concatenate([out, extra], axis=0)
    widths = [(0, max(0, g - d)) if j else (0, 0) for j, (d, g) in enumerate(zip(out.shape, shape))]
    if any(w for _, w in widths):
        if mode == "edge" and all(d > 0 for d in out.shape):
            out = np.pad(out, widths, mode="edge")
        else:
            out = np.pad(out, widths, mode="constant", constant_values=np.asarray(pad_value, dtype=out.dtype))
    return np.ascontiguousarray(out)


def cut_length(out_len: int, padded: int, real: int) -> int:
    """The output length a model gives for input length ``real``, from its output length ``out_len`` at input
    length ``padded``. Stride 1 (DB maps, segmentation maps): ``real``. A whole stride ``s = padded / out_len``
    (CTC time steps: 8 over width for PP-OCRv4 rec): ``floor((real + ceil(s/2) - 1) / s)``, what stride-2 convs
    (each ``ceil``) followed by a final 2-wide pool (``floor``) give: PP-OCRv4 rec gives 40 steps for widths 317
    to 324, 41 for 325 (``ceil(real/s)`` would keep one padded step for 321-324). Otherwise in proportion."""
    if out_len == padded:
        return real
    if out_len and padded % out_len == 0:
        s = padded // out_len
        return max(1, (real + (s + 1) // 2 - 1) // s)
    return max(1, round(out_len * real / padded))


OutputDims = Callable[[int, List[Shape]], Optional[List[int]]]


def cut_back(
    outputs: List[np.ndarray],
    real: Sequence[Shape],
    gear: Sequence[Shape],
    policy: TaskPolicy,
    output_dims: Optional[OutputDims] = None,
) -> List[np.ndarray]:
    """Drop padded batch rows and crop the output dims that follow padded input dims: to the length the model
    gives for the real inputs (``output_dims(output, input_shapes)``, solved from the graph: the manifest's
    ``output_dims``), else :func:`cut_length`."""
    outputs = list(outputs)
    lead = lead_input(real, policy)
    n_real, n_gear = (real[lead][0], gear[lead][0]) if lead is not None else (1, 1)
    if policy.detection and len(outputs) >= 2 and n_gear != n_real:
        box_num = outputs[1]
        keep = int(np.sum(box_num[:n_real]))
        outputs[1] = box_num[:n_real]
        outputs = [o[:keep] if i != 1 else o for i, o in enumerate(outputs)]
    elif n_gear != n_real:
        outputs = [o[:n_real] if o.ndim and o.shape[0] == n_gear else o for o in outputs]
    for oi, od, ii, idim in policy.crops:
        padded, want = gear[ii][idim], real[ii][idim]
        if oi < len(outputs) and padded != want:
            o = outputs[oi]
            dims = output_dims(oi, [list(r) for r in real]) if output_dims is not None else None
            length = dims[od] if dims is not None and od < len(dims) else cut_length(o.shape[od], padded, want)
            index = [slice(None)] * o.ndim
            index[od] = slice(0, length)
            outputs[oi] = np.ascontiguousarray(o[tuple(index)])
    return outputs


def fit_shape(manifest: OMManifest, real: Sequence[Shape], policy: TaskPolicy) -> Optional[Shape]:
    """The shape the first input is resized to when no gear holds ``real`` (the batch apart): the largest, by
    the fitted dims' product, that a gear holds once ``policy.fit_dims`` are shrunk. None: no fit for the task,
    another input does not fit, or nothing fits."""
    if not policy.fit_dims or len(real[0]) != 4:
        return None
    best: Optional[Shape] = None
    for gear in manifest.gear_shapes():
        g, r = gear[0], real[0]
        if len(g) != len(r):
            continue
        cand = _shrunk(r, g, policy)
        if cand is not None and _fits([cand, *real[1:]], gear, policy, ignore_batch=True):
            if best is None or math.prod(cand[d] for d in policy.fit_dims) > math.prod(
                best[d] for d in policy.fit_dims
            ):
                best = cand
    return best


def resize_axis(array: np.ndarray, axis: int, length: int) -> np.ndarray:
    """Linear interpolation of ``array`` to ``length`` along ``axis``, as OpenCV's ``INTER_LINEAR`` samples
    (pixel centres, edges clamped); the dtype is kept."""
    src = array.shape[axis]
    if src == length:
        return array
    x = np.clip((np.arange(length) + 0.5) * (src / length) - 0.5, 0, src - 1)
    i0 = np.floor(x).astype(np.int64)
    i1 = np.minimum(i0 + 1, src - 1)
    w = (x - i0).astype(np.float32).reshape([-1 if j == axis else 1 for j in range(array.ndim)])
    a0, a1 = np.take(array, i0, axis=axis), np.take(array, i1, axis=axis)
    return np.ascontiguousarray((a0 * (1 - w) + a1 * w).astype(array.dtype, copy=False))


def _map_back(outputs: List[np.ndarray], real: Shape, fitted: Shape, policy: TaskPolicy) -> List[np.ndarray]:
    """Outputs of a fitted input, for the real input: maps resized back (``fit_map_back``), others as they are."""
    if not policy.fit_map_back:
        return outputs
    outputs = list(outputs)
    for oi, od, ii, idim in policy.crops:
        if ii == 0 and idim in policy.fit_dims and oi < len(outputs) and real[idim] != fitted[idim]:
            o = outputs[oi]
            outputs[oi] = resize_axis(o, od % o.ndim, max(1, round(o.shape[od] * real[idim] / fitted[idim])))
    return outputs


def _held(manifest: OMManifest, real: Sequence[Shape], policy: TaskPolicy) -> bool:
    return any(_fits(real, g, policy, ignore_batch=True) for g in manifest.gear_shapes())


def _run_fitted(
    feeds: List[np.ndarray],
    fitted: Shape,
    policy: TaskPolicy,
    run: Callable[[List[np.ndarray]], List[np.ndarray]],
    on_fit: Optional[Callable[[Shape, Shape], None]],
) -> List[np.ndarray]:
    """The first input resized to ``fitted`` (``policy.fit_dims``), run, its outputs mapped back."""
    real = list(feeds[0].shape)
    if on_fit is not None:
        on_fit(real, fitted)
    small = feeds[0]
    for d in policy.fit_dims:
        small = resize_axis(small, d, fitted[d])
    return _map_back(run([small, *feeds[1:]]), real, fitted, policy)


def run_in_ranges(
    manifest: OMManifest,
    feeds: List[np.ndarray],
    policy: TaskPolicy,
    infer: Callable[[List[np.ndarray]], List[np.ndarray]],
    oversize: str = "error",
    on_fit: Optional[Callable[[Shape, Shape], None]] = None,
) -> List[np.ndarray]:
    """Run ``feeds`` on a dymshape OM: as they are, or, for an input above the OM's ranges with
    ``oversize="fit"``, resized down into them (outputs mapped back as for gears); else refused."""
    real = [list(f.shape) for f in feeds]
    if _inside(manifest, real):
        return infer(feeds)
    fitted = fit_to_ranges(manifest, real, policy) if oversize == "fit" else None
    if fitted is not None:
        return _run_fitted(feeds, fitted, policy, infer, on_fit)
    check_ranges(manifest, real, policy, oversize)  # outside the ranges: this raises, naming what to change
    return infer(feeds)


def run_with_gears(
    manifest: OMManifest,
    feeds: List[np.ndarray],
    policy: TaskPolicy,
    infer: Callable[[List[np.ndarray]], List[np.ndarray]],
    pad_value: float = 0.0,
    oversize: str = "error",
    on_fit: Optional[Callable[[Shape, Shape], None]] = None,
    output_dims: Optional[OutputDims] = None,
) -> List[np.ndarray]:
    """Run ``feeds`` on a gear/static OM: fit an oversize input (``oversize="fit"``), split above the largest
    gear, pad, infer, cut back (see :func:`cut_back`), join. ``on_fit(real, fitted)`` is called when an input is
    resized."""
    real = [list(f.shape) for f in feeds]
    if real in manifest.gear_shapes():  # a gear exactly (a static OM's one shape): nothing to fit, split, pad or cut
        return list(infer(feeds))
    if oversize == "fit" and not _held(manifest, real, policy):
        fitted = fit_shape(manifest, real, policy)
        if fitted is not None:
            again = partial(
                run_with_gears, manifest, policy=policy, infer=infer, pad_value=pad_value, output_dims=output_dims
            )
            return _run_fitted(feeds, fitted, policy, again, on_fit)
    batched = [0 in policy.paddable(f.ndim) for f in feeds]
    lead = lead_input(real, policy)
    n = real[lead][0] if lead is not None else 1
    limit = max_batch(manifest, real, policy)
    if limit is not None and n > limit:
        parts = [
            run_with_gears(
                manifest,
                [f[s : s + limit] if b else f for f, b in zip(feeds, batched)],
                policy,
                infer,
                pad_value,
                output_dims=output_dims,
            )
            for s in range(0, n, limit)
        ]
        return [np.concatenate([p[i] for p in parts], axis=0) for i in range(len(parts[0]))]
    gear = choose_gear(manifest, real, policy)
    padded = [pad_to(f, g, pad_value, policy.paddable(f.ndim), policy.pad_mode) for f, g in zip(feeds, gear)]
    return cut_back(infer(padded), real, gear, policy, output_dims)
