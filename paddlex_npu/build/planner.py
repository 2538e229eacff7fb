"""Gear planning: choose at most K gears that hold every sample input shape with the least padding.

Sample shapes come from the preprocessing that will really run (:func:`plan_ocr_gears`): the OCR pipeline's
settings (``--pipeline-config``, else PaddleX's default OCR pipeline) for detection limits and recognition
batch size; detection from the pages through PaddleX's own predictor (:func:`sample_input_shapes`: it runs up to
the runner call, where the shapes are recorded and inference is skipped); recognition from the text-line crops
that PaddleX's OCR pipeline cuts out of the pages with a detection package on the reference runtime.

:func:`plan_gears` is greedy: it starts from the **cover gear**, the largest input the preprocessing can
produce within the limits (so no input is refused), or without one from the element-wise maximum of the
samples, then adds, one at a time, the sample shape whose gear lowers the total padded volume most, until K
gears or no gain. Each sample is charged the volume of the smallest gear that holds it, as the runner picks it.

Padding changes what OCR models compute, so the OCR gears go where padding would happen: detection gets the
shapes whose long side is the pipeline's limit (:func:`long_side_gears`: every page above the limit makes one),
recognition spends every gear on a width at the pipeline's batch size (:func:`rec_gears`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..om.manifest import MAX_GEARS, MIN_GEARS
from ..paddlex.pipelines import sub_modules
from .shapes import REC_MAX_WIDTH

REC_MIN_WIDTH = 320  # PaddleX pads every line batch to at least 320 (48-high lines)

Dims = Tuple[int, ...]


def _cost(samples: Sequence[Dims], gears: Sequence[Dims]) -> int:
    total = 0
    for s in samples:
        total += min(math.prod(g) for g in gears if all(a <= b for a, b in zip(s, g)))
    return total


def plan_gears(
    samples: Sequence[Sequence[int]], max_gears: int, cover: Optional[Sequence[int]] = None
) -> List[List[int]]:
    """Up to ``max_gears`` gears (each a list of the varying dims' values) covering ``samples``. ``cover``: a gear
    that holds every input the preprocessing can make; it is always one of the gears, and samples beyond it
    (clamped to it) run fitted (backend_config ``oversize``)."""
    if not MIN_GEARS <= max_gears <= MAX_GEARS:
        raise ConfigError(f"ATC accepts {MIN_GEARS} to {MAX_GEARS} gears; asked for {max_gears}")
    if not samples:
        raise ConfigError("no sample shapes to plan gears from: give sample inputs")
    pts = sorted({tuple(int(d) for d in s) for s in samples})
    if cover is not None:
        pts = sorted({tuple(min(a, c) for a, c in zip(p, cover)) for p in pts})
    top = tuple(max(p[i] for p in pts) for i in range(len(pts[0])))
    gears = [tuple(cover)] if cover is not None else [top]
    candidates = sorted(set(pts) | {top})
    samples = [tuple(min(a, c) for a, c in zip(s, cover)) for s in samples] if cover is not None else samples
    cost = _cost([tuple(s) for s in samples], gears)
    while len(gears) < max_gears:
        best = None
        for cand in candidates:
            if cand in gears:
                continue
            c = _cost([tuple(s) for s in samples], gears + [cand])
            if best is None or c < best[0]:
                best = (c, cand)
        if best is None or best[0] >= cost:
            break
        cost, gears = best[0], gears + [best[1]]
    if len(gears) < MIN_GEARS:  # ATC needs two gears: add the samples' top, or half of it (holds nothing new)
        half = tuple(max(1, d // 2) for d in top)
        extra = top if top not in gears else half
        gears.append(extra if extra not in gears else tuple(d + 1 for d in top))
    return [list(g) for g in sorted(gears, key=math.prod)]


def fill_ladder(
    gears: Sequence[Sequence[int]],
    low: Sequence[int],
    cover: Sequence[int],
    max_gears: int,
    multiple: Sequence[int],
) -> List[List[int]]:
    """``gears`` plus, up to ``max_gears`` in all, a geometric ladder of gears from ``low`` to ``cover`` (each dim
    rounded up to its ``multiple``; a dim with ``low == cover`` stays fixed): inputs unlike the samples then pad
    by a bounded ratio instead of up to the cover gear."""
    out = {tuple(int(d) for d in g) for g in gears}
    vary = [k for k, (lo, hi) in enumerate(zip(low, cover)) if lo < hi]
    room = max_gears - len(out)
    if not vary or room < 1:
        return [list(g) for g in sorted(out, key=math.prod)]
    steps = max(1, int(room ** (1 / len(vary)) + 1e-9))
    values = []
    for k, (lo, hi, m) in enumerate(zip(low, cover, multiple)):
        if k not in vary:
            values.append([hi])
            continue
        ratio = (hi / lo) ** (1 / steps)
        values.append(sorted({min(hi, -(-int(lo * ratio**i) // m) * m) for i in range(steps)}))
    for point in itertools.product(*values):
        if len(out) >= max_gears:
            break
        out.add(tuple(point))
    return [list(g) for g in sorted(out, key=math.prod)]


def padding_ratio(samples: Sequence[Sequence[int]], gears: Sequence[Sequence[int]]) -> float:
    """Padded volume over real volume when each sample runs at the smallest gear that holds it."""
    real = sum(math.prod(s) for s in samples)
    return _cost([tuple(s) for s in samples], [tuple(g) for g in gears]) / max(1, real)


class _RecordedError(Exception):
    pass


def _preprocess(predictor: Any, model_name: str, batch: List[Any]) -> None:
    """Run the predictor over ``batch`` up to the (replaced) model call; name the input it cannot read."""
    try:
        list(predictor.predict(batch))
    except _RecordedError:
        pass
    except Exception as exc:  # PaddleX raises plain Exception for an unreadable image
        for item in batch if len(batch) > 1 else []:
            _preprocess(predictor, model_name, [item])  # raises, naming the one input that fails
        raise ConfigError(
            f"PaddleX's preprocessing of {model_name} cannot use the sample input {', '.join(map(str, batch))} "
            f"({type(exc).__name__}: {exc}): remove it from --samples or replace it with a readable input"
        ) from exc


def sample_input_shapes(
    model_name: str, package: Path, inputs: Iterable[Any], batch_size: int = 1, **predictor_options: Any
) -> List[List[List[int]]]:
    """Run PaddleX's preprocessing of ``model_name`` over ``inputs``; per call, the shapes (in the model's input
    order) that would reach the model. ``package`` is an OM package with its ONNX (opened on the reference
    runtime for its input names); ``predictor_options`` go to ``create_predictor`` (e.g. ``limit_side_len``).
    The model itself is not run."""
    from ..paddlex.patcher import adapter
    from ..run.runner import sort_inputs

    hooks = adapter()
    predictor = hooks.create_predictor(
        model_name,
        model_dir=str(package),
        device="npu:0",
        batch_size=batch_size,
        use_hpip=True,
        hpi_config={"backend": "om", "device_type": "npu", "backend_config": {"runtime": "reference"}},
        **predictor_options,
    )
    runner = hooks.static_infer_of(predictor)
    shapes: List[List[List[int]]] = []

    def record(x: Any = None, **kwargs: Any) -> None:
        x = kwargs.get("x") if x is None else x
        arrays = [x] if hasattr(x, "shape") else list(x)
        if len(runner.input_names) == len(arrays):
            arrays = sort_inputs(arrays, runner.input_names)
        shapes.append([list(a.shape) for a in arrays])
        raise _RecordedError

    items = list(inputs)
    setattr(predictor, hooks.static_infer_attr(), record)
    try:
        for start in range(0, len(items), batch_size):
            _preprocess(predictor, model_name, items[start : start + batch_size])
    finally:
        setattr(predictor, hooks.static_infer_attr(), runner)
        predictor.close()
    return shapes


@dataclass(frozen=True)
class OcrSettings:
    """The OCR pipeline settings that shape the inputs of its models, as PaddleX's OCR pipeline reads them."""

    source: str
    limit_side_len: int
    limit_type: str
    max_side_limit: int
    rec_batch_size: int

    @classmethod
    def from_config(cls, config: Dict[str, Any], source: str) -> OcrSettings:
        """The settings of an OCR pipeline config (PaddleX's own defaults for keys it leaves out)."""
        subs = dict(sub_modules(config))  # the OCR pipeline's own: SubModules.TextDetection, ...
        det, rec = subs.get("SubModules.TextDetection") or {}, subs.get("SubModules.TextRecognition") or {}
        general = config.get("text_type", "general") == "general"
        limit_type = str(det.get("limit_type", "max" if general else "min"))
        if limit_type not in _LIMIT_TYPES:
            raise ConfigError(f"{source}: limit_type {limit_type!r} is none of PaddleX's {', '.join(_LIMIT_TYPES)}")
        return cls(
            source=source,
            limit_side_len=int(det.get("limit_side_len", 960 if general else 736)),
            limit_type=limit_type,
            max_side_limit=int(det.get("max_side_limit", 4000)),
            rec_batch_size=int(rec.get("batch_size", 1)),
        )

    def det_options(self) -> Dict[str, Any]:
        return {
            "limit_side_len": self.limit_side_len,
            "limit_type": self.limit_type,
            "max_side_limit": self.max_side_limit,
        }

    def describe(self) -> str:
        return (
            f"{self.source}: text detection limit_side_len={self.limit_side_len}, limit_type={self.limit_type}, "
            f"max_side_limit={self.max_side_limit}; text recognition batch_size={self.rec_batch_size}"
        )


_LIMIT_TYPES = ("max", "min", "resize_long")


def det_cover_side(settings: OcrSettings, max_side: Optional[int] = None) -> int:
    """The largest side ``DetResizeForTest`` can produce with these settings (``max``/``resize_long``: the limit;
    ``min``: any page up to ``max_side_limit``), as a multiple of 32, and at most ``max_side``."""
    side = settings.max_side_limit
    if settings.limit_type in ("max", "resize_long"):
        side = min(side, settings.limit_side_len)
    side = max(32, int(round(side / 32)) * 32)
    if max_side is not None:
        side = min(side, max(32, max_side // 32 * 32))
    return side


def _ocr_points(
    kind: str,
    model_name: str,
    package: Path,
    files: Sequence[str],
    settings: OcrSettings,
    config: Dict[str, Any],
    det: Optional[Tuple[str, Path]],
    sample_kind: str,
) -> List[List[int]]:
    """The varying dims of every input the pipeline feeds the model from ``files`` (det: H, W; rec: N, W)."""
    from ..paddlex.planning import rec_input_shapes

    if kind == "text_det":
        seen = sample_input_shapes(model_name, package, files, batch_size=1, **settings.det_options())
        return [[s[0][2], s[0][3]] for s in seen]
    if sample_kind == "lines":
        seen = sample_input_shapes(model_name, package, files, batch_size=settings.rec_batch_size)
        return [[s[0][0], s[0][3]] for s in seen]
    if det is None:
        raise ConfigError(
            "planning a text recognition model from pages runs text detection first: give the detection "
            "package (--det-package DIR), or --samples-are lines for folders of text-line images"
        )
    return [[s[0], s[3]] for s in rec_input_shapes(config, det, (model_name, package), files)]


def spread(values: Sequence[int], k: int, start: int) -> List[int]:
    """``k`` of ``values`` near ``start * (top / start) ** (i / k)``, i = 1..k (all if ``k`` allows): the largest
    always, the others spaced geometrically above ``start``."""
    rest = sorted(values)
    if k >= len(rest):
        return rest
    picked: List[int] = []
    for i in range(k, 0, -1):
        target = start * (rest[-1] / start) ** (i / k) if picked else rest[-1]
        best = min((v for v in rest if v not in picked), key=lambda v: (abs(math.log(v / target)), v))
        picked.append(best)
    return sorted(picked)


def long_side_gears(
    gears: Sequence[Sequence[int]], side: int, max_gears: int, portrait_first: bool, low: int, multiple: int = 32
) -> List[List[int]]:
    """``gears`` plus, up to ``max_gears`` in all, the det shapes whose long side is ``side``: what
    ``DetResizeForTest`` makes of every page above its limit (``max``) or of every page (``resize_long``), one per
    short side (a multiple of ``multiple``). With room for all of them those pages run unpadded, as in dymshape;
    else the short sides from ``low`` up are spread geometrically, the samples' orientation first; room left
    then goes to all the other short sides (the narrow strips below ``low`` included), spread the same way."""
    out = {tuple(int(d) for d in g) for g in gears}
    shorts = list(range(multiple, side + 1, multiple))
    orientations = [lambda s: (side, s), lambda s: (s, side)]  # portrait (H = side), landscape (W = side)
    for floor in (low, multiple):
        for make in orientations if portrait_first else orientations[::-1]:
            missing = [s for s in shorts if s >= floor and make(s) not in out]
            out.update(make(s) for s in spread(missing, max_gears - len(out), floor))
    return [list(g) for g in sorted(out, key=math.prod)]


def det_gears(
    points: List[List[int]], settings: OcrSettings, max_gears: int, max_side: Optional[int]
) -> Tuple[List[List[int]], str, List[int]]:
    """Det gears (H, W): the cover gear, the sample shapes, then for ``max``/``resize_long`` the long-side shapes
    (the samples' orientation first) and a ladder for pages under the limit."""
    side = det_cover_side(settings, max_side)
    cover = [side, side]
    smallest = min(side, min(min(p) for p in points))
    if settings.limit_type not in ("max", "resize_long"):
        planned, what = plan_gears(points, max_gears, cover), f"a ladder up to {side}x{side}"
    else:
        total = 2 * side // 32 - 1  # long side = side, short side any multiple of 32 (the square counted once)
        room_for_all = max_gears >= total + MIN_GEARS  # then the samples get what the long-side shapes leave
        planned = plan_gears(points, max_gears - total if room_for_all else max_gears, cover)
        portrait = sum(h > w for h, w in points) > len(points) / 2
        floor = max(32, min(side // 4, smallest) // 32 * 32)
        planned = long_side_gears(planned, side, max_gears, portrait, floor)
        exact = sum(side in g for g in planned)
        what = f"{exact} of the {total} shapes with a long side of {side} (pages above the limit run unpadded"
        if exact < total:
            need = total + MIN_GEARS
            what += f" in those; --max-gears {need} gives all)" if need <= MAX_GEARS else "; ATC's 100 cannot hold all)"
        else:
            what += ")"
    gears = fill_ladder(planned, [smallest, smallest], cover, max_gears, [32, 32])
    return gears, f"{side}x{side} (the largest page DetResizeForTest makes); {what}", cover


def rec_gears(
    points: List[List[int]], settings: OcrSettings, max_gears: int, max_width: Optional[int]
) -> Tuple[List[List[int]], str, List[int]]:
    """Rec gears (N, W), all at the pipeline's batch size: padding a batch repeats rows and changes no text,
    padding the width is what changes texts, so every gear goes to a width (the samples', then a ladder)."""
    width = min(REC_MAX_WIDTH, max_width or REC_MAX_WIDTH)
    widths = plan_gears([[p[1]] for p in points], max_gears, [width])
    low = min(width, REC_MIN_WIDTH)
    widths = fill_ladder(widths, [low], [width], max_gears, [8])
    useful = [w for w in widths if w[0] >= low]  # PaddleX pads every line batch to at least 320
    widths = useful if len(useful) >= MIN_GEARS else widths
    steps = [b / a for (a,), (b,) in zip(widths, widths[1:]) if a >= REC_MIN_WIDTH]
    what = f"batch {settings.rec_batch_size} x width {width}; widths at most {max(steps, default=1) - 1:.0%} apart"
    return [[settings.rec_batch_size, w] for (w,) in widths], what, [settings.rec_batch_size, width]


def plan_ocr_gears(
    kind: str,
    model_name: str,
    package: Path,
    files: Sequence[str],
    max_gears: int,
    settings: OcrSettings,
    *,
    config: Dict[str, Any],
    max_side: Optional[int] = None,
    max_width: Optional[int] = None,
    det: Optional[Tuple[str, Path]] = None,
    sample_kind: str = "pages",
) -> Tuple[List[List[int]], List[str]]:
    """(gears, notes) for an OCR model (``kind`` ``text_det``: gears H, W; ``text_rec``: gears N, W) planned from
    what the pipeline's preprocessing makes of the sample ``files``, with the cover gear and a ladder up to it."""
    points = _ocr_points(kind, model_name, package, files, settings, config, det, sample_kind)
    if not points:
        raise ConfigError(f"the samples gave no input for {model_name} (no text found?): give pages with text")
    if kind == "text_det":
        gears, what, cover = det_gears(points, settings, max_gears, max_side)
    else:
        gears, what, cover = rec_gears(points, settings, max_gears, max_width)
    over = sum(any(a > c for a, c in zip(pt, cover)) for pt in points)
    points = [[min(a, c) for a, c in zip(pt, cover)] for pt in points]
    if kind == "text_det":
        inputs, measure = "inputs", "padded/real area"
        ratio, alone = padding_ratio(points, gears), padding_ratio(points, [cover])
    else:  # rows padded in a batch change no text: the width is what counts
        inputs, measure = "crop batches", "padded/real width"
        ratio = padding_ratio([p[1:] for p in points], [g[1:] for g in gears])
        alone = padding_ratio([p[1:] for p in points], [cover[1:]])
    notes = [
        f"planned for {settings.describe()}",
        f"planned {len(gears)} gears from {len(points)} {inputs} of {len(files)} sample {sample_kind}: cover gear "
        f"{what}; {measure} = {ratio:.3f} (cover gear alone: {alone:.3f})",
    ]
    if over:
        notes.append(
            f"{over} sample inputs are larger than the cover gear (--max-side / --max-width): at run time they are "
            "resized down to it (backend_config oversize 'fit', the default) or refused (oversize 'error')"
        )
    return gears, notes
