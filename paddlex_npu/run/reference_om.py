"""What an OM file would tell ACL about itself, for the CPU reference runtime: the ONNX model it was built from
plus the manifest that records how ATC built it (descriptors, ranges, gears). No ais_bench behaviour here:
:mod:`.reference` imitates the session on top of this."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..om.graph import data_dependent_outputs
from ..om.manifest import OMManifest, default_for, parse
from .dtypes import ONNX_TYPES, dtype, numpy_dtype

ShapeRange = Tuple[int, int]  # (lo, hi); hi == -1 means unbounded


@dataclass
class tensor_desc:  # noqa: N801 - mirrors ``aclruntime.tensor_desc``
    """Mirror of ``aclruntime.tensor_desc``. Dynamic dims are -1; ``size`` is 0 for range models."""

    name: str
    datatype: dtype
    format: int
    shape: List[int]
    size: int
    realsize: int


def _dims(shape: Any) -> List[int]:
    return [d if isinstance(d, int) and d > 0 else -1 for d in shape]


class ReferenceOM:
    """An ONNX model seen as the OM ``manifest`` describes it.

    ``manifest`` None: the ONNX's symbolic dims are unbounded dymshape dims (none at all: a static OM).
    Output sizes are what ACL reports: 0 for dymshape; for gear and static OMs the size at the largest gear,
    computed on the first :meth:`output_descs` call (one run of the model, as ATC compiled it).
    """

    def __init__(self, onnx_path: Path, manifest: Any = None, *, intra_op_num_threads: int = 0) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if intra_op_num_threads:
            options.intra_op_num_threads = intra_op_num_threads
        self.onnx_path = Path(onnx_path)
        self.ort = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        nodes = self.ort.get_inputs()
        onnx_shapes = [_dims(n.shape) for n in nodes]
        outs = self.ort.get_outputs()
        if manifest is None:
            manifest = default_for(
                [n.name for n in nodes],
                onnx_shapes,
                [numpy_dtype(ONNX_TYPES[n.type]).name for n in nodes],
                [o.name for o in outs],
                [_dims(o.shape) for o in outs],
            )
        # What the compiled OM cannot know before it runs: outputs shaped by the input values (NMS boxes).
        self.data_dependent = data_dependent_outputs(onnx_path)
        self.manifest: OMManifest = parse(manifest, f"the manifest of {onnx_path}")
        if [i.name for i in self.manifest.inputs] != [n.name for n in nodes]:
            raise RuntimeError(
                f"the manifest's inputs {[i.name for i in self.manifest.inputs]} are not the ONNX model's "
                f"{[n.name for n in nodes]} (in order): the manifest does not belong to {onnx_path}"
            )
        self.mode = self.manifest.mode
        self.gears = self.manifest.gear_shapes() if self.mode != "dymshape" else []
        ranges = self.manifest.input_ranges()
        self.ranges: List[List[ShapeRange]] = [ranges[n.name] for n in nodes]
        self.input_descs = [self._input_desc(i, n, onnx_shapes[i]) for i, n in enumerate(nodes)]
        self.output_names = [o.name for o in self.ort.get_outputs()]
        self._output_descs: Optional[List[tensor_desc]] = None

    def _input_desc(self, index: int, node: Any, onnx_dims: List[int]) -> tensor_desc:
        dims = list(self.manifest.inputs[index].shape)
        if len(dims) != len(onnx_dims) or any(o > 0 and d > 0 and o != d for d, o in zip(dims, onnx_dims)):
            raise RuntimeError(f"manifest shape {dims} of input {node.name!r} does not fit the ONNX's {onnx_dims}")
        dt = ONNX_TYPES[node.type]
        size = self.manifest.max_bytes(index, numpy_dtype(dt).itemsize)
        return tensor_desc(node.name, dt, 0, dims, size, size)

    def output_descs(self) -> List[tensor_desc]:
        if self._output_descs is None:
            sizes = [0] * len(self.output_names)
            dims = [_dims(node.shape) for node in self.ort.get_outputs()]
            if self.gears:
                largest = max(self.gears, key=lambda g: sum(math.prod(s) for s in g))
                outs = self.run(self.zeros(largest))
                sizes = [o.nbytes for o in outs]
                if self.mode == "static":  # a static OM's outputs have the compiled shapes, unless data-dependent
                    dims = [
                        d if n in self.data_dependent else list(o.shape)
                        for n, d, o in zip(self.output_names, dims, outs)
                    ]
            self._output_descs = [
                tensor_desc(node.name, ONNX_TYPES[node.type], 2, d, size, size)
                for node, d, size in zip(self.ort.get_outputs(), dims, sizes)
            ]
        return self._output_descs

    def zeros(self, shapes: List[List[int]]) -> Dict[str, np.ndarray]:
        return {d.name: np.zeros(s, numpy_dtype(d.datatype)) for d, s in zip(self.input_descs, shapes)}

    def run(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.ort.run(self.output_names, feed)
