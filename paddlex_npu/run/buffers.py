"""Output buffer sizes (``custom_sizes``) for dynamic-shape OM inference.

On the device a ``dymshape`` OM reports output size 0, and ais_bench allocates exactly ``custom_sizes[i]``
bytes for output ``i`` on every call. Reserving one blanket constant wastes device memory on small inputs and
fails on large ones, so sizes are computed per call from the actual input shapes:

- an output whose descriptor shape is fully static gets exactly its byte size;
- a dynamic output gets ``ratio * input_elements`` bytes, where ``ratio`` is the largest output-bytes per
  input-element seen so far for that output (OCR's DB maps, CTC logits and classifier scores all scale
  linearly with the input), seeded at load from ONNX shape inference when the package has its ONNX
  (:func:`..run.runner.seed_output_sizes`); without either, a generous multiple of the input bytes is used;
- every size is at least :data:`MIN_BYTES`.

There is no retry: on a device a failed call leaks memory and its error says nothing, so the sizes must hold
on the first call; an explicit ``custom_sizes`` overrides them.
"""

from __future__ import annotations

import math
import threading
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import envs
from ..errors import ConfigError

MIN_BYTES = 64 * 1024
INITIAL_BYTES_PER_INPUT_BYTE = 16
HEADROOM = 1.25
MAX_BYTES = 16 * 1024**3
DEFAULT_BUDGET = 1024**3  # input + output buffers of one gear; PaddleX's own limits (4000 px det) need ~256 MiB


def _aligned(n: float) -> int:
    """Round up to 4 KiB, within ais_bench's (0, 16 GiB] limit."""
    return int(min(MAX_BYTES, max(MIN_BYTES, math.ceil(n / 4096) * 4096)))


class OutputSizer:
    """Computes and learns per-output ``custom_sizes`` (see the module docstring)."""

    def __init__(
        self,
        output_shapes: Sequence[Sequence[int]],
        output_itemsizes: Sequence[int],
        fixed: Optional[Sequence[int]] = None,
    ) -> None:
        self._static: List[Optional[int]] = [
            math.prod(s) * size if all(d > 0 for d in s) else None for s, size in zip(output_shapes, output_itemsizes)
        ]
        self._fixed = list(fixed) if fixed is not None else None
        self._ratio: List[Optional[float]] = [None] * len(self._static)
        self._lock = threading.Lock()

    def seed(self, ratios: Sequence[Optional[float]]) -> None:
        """Output bytes per input element known before any call (ONNX shape inference), so that the first call
        does not reserve the blanket guess; what calls observe can still raise them."""
        with self._lock:
            self._ratio = [r if r is not None else old for r, old in zip(ratios, self._ratio)]

    def sizes(self, inputs: Sequence[np.ndarray]) -> List[int]:
        """Bytes to reserve per output for these inputs."""
        if self._fixed is not None:
            return list(self._fixed)
        elements = sum(a.size for a in inputs)
        in_bytes = sum(a.nbytes for a in inputs)
        out = []
        for static, ratio in zip(self._static, self._ratio):
            if static is not None:
                out.append(_aligned(static))
            elif ratio is not None:
                out.append(_aligned(ratio * elements * HEADROOM))
            else:
                out.append(_aligned(in_bytes * INITIAL_BYTES_PER_INPUT_BYTE))
        return out

    def observe(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Learn from the real output sizes of one call."""
        elements = max(1, sum(a.size for a in inputs))
        with self._lock:
            for i, out in enumerate(outputs[: len(self._ratio)]):
                r = out.nbytes / elements
                if self._ratio[i] is None or r > self._ratio[i]:
                    self._ratio[i] = r


def memory_budget(configured: Optional[int]) -> Tuple[int, str]:
    """(bytes, where it came from): ``backend_config['memory_budget']``, else ``$PADDLEX_NPU_MEMORY_BUDGET``,
    else :data:`DEFAULT_BUDGET`."""
    if configured is not None:
        return configured, "backend_config['memory_budget']"
    raw = envs.memory_budget() or ""
    if not raw:
        return (
            DEFAULT_BUDGET,
            f"the default (set backend_config['memory_budget'] or ${envs.MEMORY_BUDGET.name} to change it)",
        )
    if not raw.isdigit() or int(raw) <= 0:
        raise ConfigError(
            f"${envs.MEMORY_BUDGET.name}={raw!r} is not a positive number of bytes (e.g. {DEFAULT_BUDGET} for 1 GiB)"
        )
    return int(raw), f"${envs.MEMORY_BUDGET.name}"


def check_gear_budget(
    name: str,
    gears: Sequence[Sequence[Sequence[int]]],
    input_names: Sequence[str],
    input_itemsizes: Sequence[int],
    output_bytes: int,
    budget: Tuple[int, str],
) -> None:
    """Refuse a gear whose input buffers, plus (for the largest gear, which the OM's output sizes describe) the
    output buffers, exceed the budget: on the device they are reserved for every call of that gear, and on the
    reference runtime a call at that gear needs them (and ONNX Runtime several times more)."""
    limit, where = budget
    totals = [sum(math.prod(s) * size for s, size in zip(g, input_itemsizes)) for g in gears]
    largest = max(range(len(gears)), key=totals.__getitem__) if gears else 0
    for k, (gear, in_bytes) in enumerate(zip(gears, totals)):
        out_bytes = output_bytes if k == largest else 0
        if in_bytes + out_bytes > limit:
            text = ";".join(f"{n}:{','.join(map(str, s))}" for n, s in zip(input_names, gear))
            raise ConfigError(
                f"{name}: the gear {text} needs {_mib(in_bytes)} of input buffers"
                + (f" + {_mib(out_bytes)} of output buffers" if out_bytes else "")
                + f", above the memory budget of {_mib(limit)} ({where}): rebuild the OM without that gear "
                "(paddlex-npu convert --gears / --max-side), or raise the budget"
            )


def _mib(n: int) -> str:
    """Bytes for a message: ``123 bytes``, ``48.0 KiB``, ``4577.6 MiB``."""
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"
