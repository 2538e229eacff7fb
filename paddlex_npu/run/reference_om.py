"""What an OM file would tell ACL about itself, for the CPU reference runtime: the ONNX model it was built from
plus the manifest that records how ATC built it (descriptors, ranges, gears). No ais_bench behaviour here:
:mod:`.reference` imitates the session on top of this."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

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
    derived on the first :meth:`output_descs` call by ONNX shape inference, never by running the model (0 where
    it cannot tell: the runner then sizes the buffers per call).
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
        if manifest is None:
            manifest = default_for(
                [n.name for n in nodes], onnx_shapes, [numpy_dtype(ONNX_TYPES[n.type]).name for n in nodes], []
            )
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
            if self.gears:
                largest = max(self.gears, key=lambda g: sum(math.prod(s) for s in g))
                sizes = self.output_sizes(largest)
            self._output_descs = [
                tensor_desc(node.name, ONNX_TYPES[node.type], 2, _dims(node.shape), size, size)
                for node, size in zip(self.ort.get_outputs(), sizes)
            ]
        return self._output_descs

    def output_sizes(self, shapes: List[List[int]]) -> List[int]:
        """Bytes of each output for inputs of ``shapes``, from ONNX shape inference (the model is not run:
        a large gear must not allocate at load); 0 where a dim stays unknown (data-dependent, or beyond what
        shape inference derives), as for an OM output whose size ACL does not know."""
        try:
            import onnx
            from onnx import shape_inference
        except ImportError:  # pragma: no cover - onnx comes with the test and convert environments
            return [0] * len(self.output_names)
        model = onnx.load(str(self.onnx_path), load_external_data=False)
        for node, shape in zip(model.graph.input, shapes):
            dims = node.type.tensor_type.shape.dim
            for d, v in zip(dims, shape):
                d.Clear()
                d.dim_value = int(v)
        try:
            inferred = shape_inference.infer_shapes(model, data_prop=True).graph.output
        except Exception:  # shape inference gives up on some graphs: the size is then unknown
            return [0] * len(self.output_names)
        by_name = {o.name: o.type.tensor_type for o in inferred}
        sizes = []
        for node in self.ort.get_outputs():
            t = by_name.get(node.name)
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim] if t is not None else [0]
            known = t is not None and all(d > 0 for d in dims)
            sizes.append(math.prod(dims) * numpy_dtype(ONNX_TYPES[node.type]).itemsize if known else 0)
        return sizes

    def zeros(self, shapes: List[List[int]]) -> Dict[str, np.ndarray]:
        return {d.name: np.zeros(s, numpy_dtype(d.datatype)) for d, s in zip(self.input_descs, shapes)}

    def run(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.ort.run(self.output_names, feed)
