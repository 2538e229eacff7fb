"""What an OM file would tell ACL about itself, for the CPU reference runtime: the ONNX model it was built from
plus the manifest that records how ATC built it (descriptors, ranges, gears). No ais_bench behaviour here:
:mod:`.reference` imitates the session on top of this."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..deps import require
from ..errors import ConfigError, RuntimeUnavailableError, ShapeInferenceError
from ..om.graph import UNKNOWN_RANK, data_dependent_outputs, ge_output_dims, ge_output_names, load_graph, output_dims
from ..om.manifest import OMManifest, default_for, parse, sha256
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

    def __init__(
        self, onnx_path: Path, manifest: Any = None, *, intra_op_num_threads: int = 0, precision: str = "fp32"
    ) -> None:
        """``precision`` ``package``: run with the numerics ATC builds the package with (its manifest's
        ``precision`` fp16: :mod:`.reference_precision`, keeping the operators its ``keep_dtype`` names); ``fp32``:
        the ONNX model as it is."""
        ort = require("onnxruntime", "the CPU reference runtime", RuntimeUnavailableError)

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if intra_op_num_threads:
            options.intra_op_num_threads = intra_op_num_threads
        self.onnx_path = Path(onnx_path)
        self._proto: Any = None
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
        self._check_io(nodes)
        self.precision = "fp32"
        if precision == "package" and (self.manifest.precision or "fp16") == "fp16":
            from .reference_precision import fp16_model_bytes

            model = fp16_model_bytes(str(onnx_path), self.manifest.keep_dtype or ())
            self.ort = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            self.precision = "fp16"
        self.mode = self.manifest.mode
        self.gears = self.manifest.gear_shapes() if self.mode != "dymshape" else []
        ranges = self.manifest.input_ranges()
        self.ranges: List[List[ShapeRange]] = [ranges[n.name] for n in nodes]
        self.input_descs = [self._input_desc(i, n, onnx_shapes[i]) for i, n in enumerate(nodes)]
        self.output_names = [o.name for o in self.ort.get_outputs()]
        self._output_descs: Optional[List[tensor_desc]] = None
        self._ge_inferred = True  # False: GE-like shape inference gave up on the graph (see _ge_dims)
        self._gear_outputs = self._check_gears()

    def _mismatch(self, detail: str) -> ConfigError:
        """The package's ONNX is not the model its manifest describes: name what differs and the checksum."""
        expected = self.manifest.onnx_sha256
        checksum = ""
        if expected:
            same = sha256(self.onnx_path) == expected
            checksum = f" (its sha256 {'matches' if same else 'is not'} the manifest's onnx_sha256)"
        return ConfigError(
            f"{self.onnx_path}{checksum} does not fit the OM manifest: {detail}. The package holds another model than "
            "its manifest describes, or the manifest is wrong: rebuild the package with `paddlex-npu convert`"
        )

    def _check_io(self, nodes: List[Any]) -> None:
        """Input names, dtypes and output names of the manifest against the ONNX."""
        names = [n.name for n in nodes]
        if [i.name for i in self.manifest.inputs] != names:
            raise self._mismatch(
                f"the manifest's inputs are {[i.name for i in self.manifest.inputs]}, the ONNX's {names}"
            )
        for spec, node in zip(self.manifest.inputs, nodes):
            actual = numpy_dtype(ONNX_TYPES[node.type]).name
            if spec.dtype != actual:
                raise self._mismatch(f"input {spec.name!r} is {spec.dtype} in the manifest, {actual} in the ONNX")
        outputs = [o.name for o in self.ort.get_outputs()]
        given = [o.rsplit(":", 1)[-1] for o in self.manifest.outputs]  # an OM names them "op:index:name"
        if given and given != outputs:
            raise self._mismatch(f"the manifest's outputs are {self.manifest.outputs}, the ONNX's {outputs}")

    def _check_gears(self) -> List[Optional[List[List[int]]]]:
        """Every gear (static: the one shape) through ONNX shape inference, without running the model: a gear the
        model cannot take (e.g. text detection H/W not multiples of 32, or another model's ONNX) is refused here,
        naming it, rather than failing inside ONNX Runtime at the first call. Returns the output dims per gear."""
        out = []
        for gear in self.gears:
            try:
                out.append(self._infer_dims(gear))
            except ShapeInferenceError as exc:
                text = ";".join(f"{d.name}:{','.join(map(str, g))}" for d, g in zip(self.input_descs, gear))
                raise self._mismatch(f"the model cannot take the {self.mode} gear {text} ({exc})") from None
        return out

    def _infer_dims(self, shapes: List[List[int]]) -> Optional[List[List[int]]]:
        """Output dims (0: unknown) for inputs of ``shapes`` (:func:`..om.graph.output_dims`)."""
        return output_dims(self._graph(), shapes, self.output_names)

    def _input_desc(self, index: int, node: Any, onnx_dims: List[int]) -> tensor_desc:
        dims = list(self.manifest.inputs[index].shape)
        if len(dims) != len(onnx_dims) or any(o > 0 and d > 0 and o != d for d, o in zip(dims, onnx_dims)):
            raise self._mismatch(f"input {node.name!r} has shape {dims} in the manifest, {onnx_dims} in the ONNX")
        dt = ONNX_TYPES[node.type]
        size = self.manifest.max_bytes(index, numpy_dtype(dt).itemsize)
        return tensor_desc(node.name, dt, 0, dims, size, size)

    def output_descs(self) -> List[tensor_desc]:
        """The outputs as ACL describes a built OM's: named as GE names them, dims as GE infers them from the
        graph (not ONNX's annotations: -1 where inference cannot tell, ``[-2]`` for an unknown rank), sizes as
        ACL reports them (0 where a dim is not known)."""
        if self._output_descs is None:
            sizes = [0] * len(self.output_names)
            dims = self._ge_dims()
            if self.mode == "static":
                dims, sizes = self._static_outputs(dims)
            elif self.gears:
                largest = max(range(len(self.gears)), key=lambda k: sum(math.prod(s) for s in self.gears[k]))
                sizes = self._bytes(self._gear_outputs[largest])
            self._output_descs = [
                tensor_desc(name, ONNX_TYPES[node.type], 0, d, size, size)  # format 0, as an OM reports
                for name, node, d, size in zip(self.ge_names(), self.ort.get_outputs(), dims, sizes)
            ]
        return self._output_descs

    def ge_names(self) -> List[str]:
        """The outputs' names on a built OM: ``"<node>:<index>:<tensor>"`` (correction 32)."""
        return ge_output_names(self._graph())

    def _graph(self) -> Any:
        if self._proto is None:
            self._proto = load_graph(self.onnx_path)
        return self._proto

    def _ge_dims(self) -> List[List[int]]:
        """A static OM's output dims as GE infers them at its one shape (:func:`ge_output_dims`; the ONNX's
        annotations are not used): an output of a rank GE cannot know is ``[-2]``, as ACL would report it. Gear and
        dymshape OMs, and graphs the inference gives up on, keep the ONNX's declared dims (ONNX's inference with
        symbolic dims loses ranks that GE, folding the shape arithmetic, keeps: PP-OCR's recognition head)."""
        declared = [_dims(node.shape) for node in self.ort.get_outputs()]
        if self.mode != "static":
            return declared
        inferred = ge_output_dims(self._graph(), self.gears[0])
        self._ge_inferred = inferred is not None
        return declared if inferred is None else inferred

    def _static_outputs(self, dims: List[Any]) -> Tuple[List[List[int]], List[int]]:
        """A static OM's outputs have the shapes GE inferred when it compiled: an output of a rank GE cannot know
        (``[-2]``: through an ``If`` of two ranks) stays open, with size 0, which the runner refuses for a static OM
        as it would the device's descriptors. Where ONNX's inference only fails to follow the shape arithmetic
        that GE folds at a static shape, the model runs once at that shape, as the best stand-in for GE's own."""
        # without GE-like inference every output takes the run's shape (the declared dims are not GE's)
        unknown = [not self._ge_inferred or d is None or (d != UNKNOWN_RANK and any(x < 0 for x in d)) for d in dims]
        if not any(unknown):
            return dims, self._bytes(dims)
        ran = [list(o.shape) for o in self.run(self.zeros(self.gears[0]))]
        fixed = [
            d if n in self.data_dependent or not u else r for n, d, r, u in zip(self.output_names, dims, ran, unknown)
        ]
        return fixed, self._bytes(fixed)

    def _bytes(self, dims: Optional[List[List[int]]]) -> List[int]:
        """Bytes per output for inferred dims; 0 where a dim is unknown (data-dependent, or beyond what shape
        inference derives), as for an OM output whose size ACL does not know."""
        if dims is None:
            return [0] * len(self.output_names)
        return [
            math.prod(d) * numpy_dtype(ONNX_TYPES[node.type]).itemsize if all(v > 0 for v in d) else 0
            for d, node in zip(dims, self.ort.get_outputs())
        ]

    def zeros(self, shapes: List[List[int]]) -> Dict[str, np.ndarray]:
        return {d.name: np.zeros(s, numpy_dtype(d.datatype)) for d, s in zip(self.input_descs, shapes)}

    def run(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        return self.ort.run(self.output_names, feed)
