"""Output buffer sizes (``custom_sizes``) for dynamic-shape OM inference, derived from the model.

On the device a ``dymshape`` OM reports output size 0, and ais_bench allocates exactly ``custom_sizes[i]``
bytes for output ``i`` on every call; a call whose output does not fit fails with a generic ACL error and
leaks its input memory, so there is no retry and the size must hold on the first call. Per output:

- a fully static descriptor shape: exactly its bytes;
- dims solved from the graph (:mod:`..om.output_shapes`: ints and expressions of the input dims, from the
  manifest's ``output_dims`` or the package's ONNX): the bytes of the shape those give for this call's input
  shapes, with a data-dependent dim (boxes kept by NMS) at ``backend_config['data_dependent_max']``;
- otherwise ONNX shape inference on the call's concrete input shapes (the package's ONNX);

every size at least :data:`MIN_BYTES` and rounded up to 4 KiB. Sizes are cached per input shapes (the shapes of
a call decide them, never the history of calls). An explicit ``custom_sizes`` overrides all of it.
"""

from __future__ import annotations

import math
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import envs
from ..errors import ConfigError
from ..om.output_shapes import OutputShapes

MIN_BYTES = 64 * 1024
MAX_BYTES = 16 * 1024**3
CACHE_SHAPES = 4096  # input shapes whose sizes are kept (PP-OCR rec: one per width; cleared when full)
DEFAULT_BUDGET = 1024**3  # input + output buffers of one gear; PaddleX's own limits (4000 px det) need ~256 MiB

ShapeInference = Callable[[List[List[int]]], Optional[List[List[int]]]]


def _aligned(n: float) -> int:
    """Round up to 4 KiB, within ais_bench's (0, 16 GiB] limit."""
    return int(min(MAX_BYTES, max(MIN_BYTES, math.ceil(n / 4096) * 4096)))


class OutputSizer:
    """Bytes to reserve per output for given input shapes (see the module docstring).

    ``shapes``: the solved dims (None where the graph did not tell); ``infer``: ONNX shape inference on concrete
    input shapes (dims, 0 where unknown), for the outputs ``shapes`` leaves open; ``fixed``: ``custom_sizes``.
    """

    def __init__(
        self,
        output_shapes: Sequence[Sequence[int]],
        output_itemsizes: Sequence[int],
        fixed: Optional[Sequence[int]] = None,
        shapes: Optional[OutputShapes] = None,
        infer: Optional[ShapeInference] = None,
        output_names: Optional[Sequence[str]] = None,
    ) -> None:
        self._static: List[Optional[int]] = [
            math.prod(s) * size if all(d > 0 for d in s) else None for s, size in zip(output_shapes, output_itemsizes)
        ]
        self._itemsizes = list(output_itemsizes)
        self._fixed = list(fixed) if fixed is not None else None
        self._shapes = shapes
        self._infer = infer
        self._names = list(output_names or [f"output {i}" for i in range(len(self._static))])
        self._cache: Dict[Tuple[Tuple[int, ...], ...], List[int]] = {}
        self._lock = threading.Lock()

    def unsized(self) -> List[str]:
        """Outputs whose size nothing here can tell (no static shape, no solved dims, no ONNX)."""
        if self._fixed is not None or self._infer is not None:
            return []
        return [
            n
            for i, (n, s) in enumerate(zip(self._names, self._static))
            if s is None and not (self._shapes is not None and self._shapes.known(i))
        ]

    def sizes(self, inputs: Sequence[np.ndarray]) -> List[int]:
        """Bytes to reserve per output for these inputs."""
        if self._fixed is not None:
            return list(self._fixed)
        key = tuple(a.shape for a in inputs)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        sizes = self._compute([list(s) for s in key])
        with self._lock:
            if len(self._cache) >= CACHE_SHAPES:
                self._cache.clear()
            self._cache[key] = sizes
        return sizes

    def shapes_for(self, input_shapes: List[List[int]]) -> List[Optional[List[int]]]:
        """The output shapes the sizes are computed from (None: static descriptor); for tests and tools."""
        inferred: Optional[List[List[int]]] = None
        out: List[Optional[List[int]]] = []
        for i, static in enumerate(self._static):
            if static is not None:
                out.append(None)
            elif self._shapes is not None and self._shapes.known(i):
                out.append(self._shapes.shape(i, input_shapes))
            else:
                if inferred is None:
                    inferred = self._infer(input_shapes) if self._infer is not None else None
                dims = inferred[i] if inferred is not None and i < len(inferred) else None
                if dims is None or any(d <= 0 for d in dims):
                    raise ConfigError(
                        f"{self._names[i]}: its size for inputs {input_shapes} cannot be derived from the model "
                        "(no output_dims in the manifest, and ONNX shape inference does not tell): set "
                        "backend_config['custom_sizes'] (bytes per output), or rebuild the package with "
                        "`paddlex-npu convert`, which records the output dims"
                    )
                out.append(list(dims))
        return out

    def _compute(self, input_shapes: List[List[int]]) -> List[int]:
        return [
            _aligned(static if dims is None else math.prod(dims) * size)
            for static, dims, size in zip(self._static, self.shapes_for(input_shapes), self._itemsizes)
        ]


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
