"""Gear planning: choose at most K gears that hold every sample input shape with the least padding.

Sample shapes come from the model's own PaddleX preprocessing (:func:`sample_input_shapes`): the predictor
runs as usual up to the runner call, where the shapes are recorded and inference is skipped.

:func:`plan_gears` is greedy: it starts from the one gear that holds everything (the element-wise maximum,
which must stay so that every sample fits), then adds, one at a time, the sample shape whose gear lowers the
total padded volume most, until K gears or no gain. Each sample is charged the volume of the smallest gear
that holds it, as the runner picks it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, List, Sequence, Tuple

from ..errors import ConfigError
from ..om.manifest import MAX_GEARS, MIN_GEARS

Dims = Tuple[int, ...]


def _cost(samples: Sequence[Dims], gears: Sequence[Dims]) -> int:
    total = 0
    for s in samples:
        total += min(math.prod(g) for g in gears if all(a <= b for a, b in zip(s, g)))
    return total


def plan_gears(samples: Sequence[Sequence[int]], max_gears: int) -> List[List[int]]:
    """Up to ``max_gears`` gears (each a list of the varying dims' values) covering ``samples``."""
    if not MIN_GEARS <= max_gears <= MAX_GEARS:
        raise ConfigError(f"ATC accepts {MIN_GEARS} to {MAX_GEARS} gears; asked for {max_gears}")
    if not samples:
        raise ConfigError("no sample shapes to plan gears from: give sample inputs")
    pts = sorted({tuple(int(d) for d in s) for s in samples})
    top = tuple(max(p[i] for p in pts) for i in range(len(pts[0])))
    gears = [top]
    cost = _cost([tuple(s) for s in samples], gears)
    while len(gears) < max_gears:
        best = None
        for cand in pts:
            if cand in gears:
                continue
            c = _cost([tuple(s) for s in samples], gears + [cand])
            if best is None or c < best[0]:
                best = (c, cand)
        if best is None or best[0] >= cost:
            break
        cost, gears = best[0], gears + [best[1]]
    if len(gears) < MIN_GEARS:  # ATC needs two gears: add half of the top one (still holds nothing new)
        half = tuple(max(1, d // 2) for d in top)
        gears.append(half if half != top else tuple(d + 1 for d in top))
    return [list(g) for g in sorted(gears, key=math.prod)]


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
