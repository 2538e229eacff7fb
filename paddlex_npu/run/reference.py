"""CPU reference of ``ais_bench.infer.interface.InferSession``.

The same contract as the Ascend session (constructor, ``get_inputs``/``get_outputs`` descriptors,
``infer(feeds, mode, custom_sizes, out_array)`` with its checks and errors, ``free_resource``), running
the ONNX model the ``.om`` was converted from with ONNX Runtime, under the shape rules the OM was built
with. Everything above the session (runner, shape policy, PaddleX adapters) is the same code on an NPU
and here, so a mistake that would fail on the device fails here too.

As on the device, a failing device-side check raises ``RuntimeError("[-1][ACL: general failure] ")`` and prints
its detail to stdout (ais_bench's ``ERROR_LOG``); the Python-side checks of ais_bench's ``interface.py`` keep
their own texts. Known, documented differences from a real OM:
- output descriptors are named as GE names a built OM's outputs (``"<node>:<index>:<tensor>"``, correction 32) and
  shaped as GE infers them from the graph (-1 where it cannot tell, ``[-2]`` for an unknown rank; correction 33),
  not by the ONNX's annotations; their format is 0, as ais_bench's own ``add_model`` OM reports
  (``test_get_inputs_outputs.py``);
- ``size``/``realsize`` follow the CANN rules for static and range (``dymshape``) models.
The full table is in ``docs/runtimes.md``; ais_bench's own test cases run against this class in
``tests/unit/om/test_upstream_aclruntime.py``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .. import envs
from ..deps import require
from ..errors import RuntimeUnavailableError
from ..om.atc import dym_shape_text
from ..om.manifest import in_ranges
from ..om.paths import check_model_path
from .dtypes import dtype, numpy_dtype
from .reference_om import ReferenceOM, tensor_desc

__all__ = ["InferSession", "dtype", "numpy_dtype", "sumary", "tensor_desc"]

MODES = ("static", "dymbatch", "dymhw", "dymdims", "dymshape")
MAX_FEEDS = 1024
MAX_CUSTOM_SIZES = 256
MAX_CUSTOM_SIZE = 16 * 1024**3
OM_MODEL_MAX_SIZE = 10 * 1024**3
_DYM_NAME = re.compile(r"^[A-Za-z0-9_./-]{1,256}$")


_NP_SCALARS = (
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.float16,
    np.float32,
    np.float64,
)


@dataclass
class sumary:  # noqa: N801 - mirrors ``aclruntime.sumary``
    """``exec_time_list``: (start_ms, end_ms) since session creation, one per model execution."""

    exec_time_list: List[Tuple[float, float]] = field(default_factory=list)


class InferSession:
    """CPU stand-in for ``ais_bench.infer.interface.InferSession``.

    ``model_path`` names the ``.om`` file as on the device. The ONNX model it was built from is taken from
    ``onnx_path`` or, by default, the ``.onnx`` file beside it with the same stem; the ``.om`` itself need
    not exist. ``manifest`` (an :class:`~paddlex_npu.manifest.OMManifest` or its dict) says how ATC built
    the OM: static, batch / H-W / dims gears or dymshape ranges, and the session accepts exactly that. By
    default the ONNX's symbolic dims are unbounded dymshape dims (a model with none is a static OM).
    """

    def __init__(
        self,
        device_id: int,
        model_path: str,
        acl_json_path: Optional[str] = None,
        debug: bool = False,
        loop: int = 1,
        *,
        onnx_path: Optional[str] = None,
        manifest: Any = None,
        intra_op_num_threads: int = 0,
        precision: Optional[str] = None,
    ) -> None:
        _check_session_args(device_id, model_path, acl_json_path, loop)
        onnx_file = Path(onnx_path) if onnx_path else Path(model_path).with_suffix(".onnx")
        check_model_path(model_path, onnx_file)  # ais_bench's path checks, on the ONNX that stands in for the OM
        if not onnx_file.is_file():
            raise RuntimeError(
                f"reference runtime: no ONNX model {onnx_file} for {model_path}; the CPU reference runs the "
                "ONNX the OM was converted from, put it beside the .om as inference.onnx"
            )
        require("onnxruntime", "the CPU reference runtime", RuntimeUnavailableError)

        self.device_id = device_id
        self.model_path = str(model_path)
        self.onnx_path = str(onnx_file)
        self.acl_json_path = acl_json_path
        self.debug = debug
        self.loop = loop
        precision = precision or PRECISION_OVERRIDE.get("precision") or envs.reference_precision()
        self._om = ReferenceOM(onnx_file, manifest, intra_op_num_threads=intra_op_num_threads, precision=precision)
        self.precision = self._om.precision  # fp32, or fp16 as ATC builds the package
        self.manifest = self._om.manifest
        self.built_mode = self._om.mode
        self._ranges = self._om.ranges
        self._gears = self._om.gears
        self.intensors_desc = self._om.input_descs
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._summary = sumary()
        self._freed = False
        self._custom_sizes: List[int] = []
        self._cur_shapes: List[List[int]] = [list(d.shape) for d in self.intensors_desc]
        self._dyn_type = "static"  # the C++ dynamicType: which kind of shape was set last
        self.infer_mode_switch = {
            "static": self._static_prepare,
            "dymbatch": self._dymbatch_prepare,
            "dymhw": self._dymhw_prepare,
            "dymdims": self._dymdims_prepare,
            "dymshape": self._dymshape_prepare,
        }

    # ---- introspection -------------------------------------------------------------
    def get_inputs(self) -> List[tensor_desc]:
        self._check_alive()
        return self.intensors_desc

    def get_outputs(self) -> List[tensor_desc]:
        self._check_alive()
        return self._om.output_descs()

    @property
    def outputs_names(self) -> List[str]:
        """As ais_bench's ``interface.py``: the descriptors' names (GE's ``"<node>:<index>:<tensor>"``)."""
        return [d.name for d in self.get_outputs()]

    def get_max_dym_batchsize(self) -> int:
        return max(g[0] for g in self.manifest.gears) if self.built_mode == "dymbatch" else 0

    # ---- main API --------------------------------------------------------------------
    def infer(
        self,
        feeds: list,
        mode: str = "static",
        custom_sizes: Union[int, List[int], None] = 100000,
        out_array: bool = True,
    ) -> list:
        _check_list(feeds)
        if not isinstance(out_array, bool):
            raise TypeError(f"value:{out_array!r} is not a bool!")
        _check_custom_size(custom_sizes, mode)
        inputs, shapes = [], []
        for feed in feeds:
            if isinstance(feed, np.ndarray):
                arr = feed if feed.flags.c_contiguous else np.ascontiguousarray(feed)
                shapes.append(list(arr.shape))
            elif type(feed) in _NP_SCALARS:
                arr = np.array(feed)
                shapes.append([arr.size])
            else:
                raise RuntimeError(f"type:{type(feed)} invalid")
            inputs.append(arr)
        with self._lock:
            self._check_alive()
            self.infer_mode_switch[mode](shapes, custom_sizes)
            return self._run(inputs, mode)

    def run(self, feeds: list, out_array: bool = False) -> list:
        with self._lock:
            self._check_alive()
            return self._run(list(feeds), "run")

    # ---- dynamic setters -------------------------------------------------------------
    def set_staticbatch(self) -> None:
        """As ``SetStaticBatch`` in C++: static execution from now on, ``realsize`` and the shapes left as the last
        gear set them (no gear is chosen). ``infer`` then refuses it on a dims-gear OM, as ``SetInputsData`` does."""
        self._check_alive()
        self._dyn_type = "static"

    def set_dynamic_batchsize(self, dym_batch: int) -> None:
        self._check_alive()
        self._require_built("dymbatch")
        gears = [g[0] for g in self.manifest.gears]
        if dym_batch not in gears:
            raise acl_failure(f"the dymBatch parameter {dym_batch} is not correct, the OM's batch gears are {gears}")
        gear = self._gears[gears.index(dym_batch)]
        self._set_gear(gear)

    def set_dynamic_hw(self, w: int, h: int) -> None:
        """(first, second) is (H, W), as ais_bench passes them."""
        self._check_alive()
        self._require_built("dymhw")
        gears = [tuple(g) for g in self.manifest.gears]
        if (w, h) not in gears:
            raise acl_failure(f"the dymHW parameter {w},{h} is not correct, the OM's H,W gears are {gears}")
        self._set_gear(self._gears[gears.index((w, h))])

    def set_dynamic_dims(self, dym_dims: str) -> None:
        self._check_alive()
        self._require_built("dymdims")
        parsed = _parse_dym_string(dym_dims, "dims")
        shapes = [parsed.get(d.name) for d in self.intensors_desc]
        for gear in self._gears:
            if shapes == gear:
                self._set_gear(gear)
                return
        raise acl_failure(
            f"the dynamic_dims parameter {dym_dims} is not correct: not one of the OM's {self.manifest.describe()}"
        )

    def _set_gear(self, gear: List[List[int]]) -> None:
        self._dyn_type = self.built_mode
        for i, (desc, shape) in enumerate(zip(self.intensors_desc, gear)):
            desc.realsize = math.prod(shape) * numpy_dtype(desc.datatype).itemsize
            self._cur_shapes[i] = list(shape)

    def _require_built(self, mode: str) -> None:
        if self.built_mode != mode:
            raise RuntimeError(
                f"not a {mode} model! this OM was built as {self.built_mode}; infer with mode='{self.built_mode}'"
            )

    def set_dynamic_shape(self, dym_shape: str) -> None:
        self._check_alive()
        if self.built_mode != "dymshape":
            raise acl_failure(f"set_dynamic_shape on a {self.built_mode} OM: it was built without shape ranges")
        parsed = _parse_dym_string(dym_shape, "shape")
        by_name = {d.name: i for i, d in enumerate(self.intensors_desc)}
        for name, dims in parsed.items():
            if name not in by_name:
                raise RuntimeError(f"set_dynamic_shape: no input named {name!r} (inputs: {list(by_name)})")
            i = by_name[name]
            if not in_ranges(dims, self._ranges[i]):
                raise acl_failure(
                    f"input {name!r} shape {dims} is outside the range the OM was built with: "
                    f"{self.manifest.describe()}"
                )
            desc = self.intensors_desc[i]
            desc.realsize = math.prod(dims) * numpy_dtype(desc.datatype).itemsize
            self._cur_shapes[i] = list(dims)
        self._dyn_type = "dymshape"

    def set_custom_outsize(self, custom_sizes: List[int]) -> None:
        self._check_alive()
        if not 0 < len(custom_sizes) <= MAX_CUSTOM_SIZES or any(not 0 < s <= MAX_CUSTOM_SIZE for s in custom_sizes):
            raise RuntimeError(f"set_custom_outsize: invalid custom sizes {custom_sizes}")
        self._custom_sizes = [int(s) for s in custom_sizes]

    def set_loop_count(self, loop: int) -> None:
        self.loop = loop

    def set_context(self) -> None:
        """No-op on the CPU (binds this session's ACL context to the calling thread on an NPU)."""

    # ---- stats & lifetime ------------------------------------------------------------
    def summary(self) -> sumary:
        return self._summary

    def reset_summaryinfo(self) -> None:
        self._summary.exec_time_list.clear()

    def free_resource(self) -> None:
        self._freed = True
        self._om = None

    @staticmethod
    def finalize() -> None:
        """Process-wide teardown on the NPU; nothing to do on the CPU."""

    # ---- internals -------------------------------------------------------------------
    def _check_alive(self) -> None:
        if self._freed:
            raise RuntimeError("the session's resources were freed (free_resource); create a new InferSession")

    def _static_prepare(self, shapes: List[List[int]], custom_sizes: Any) -> None:
        self.set_staticbatch()

    def _dymbatch_prepare(self, shapes: List[List[int]], custom_sizes: Any) -> None:
        if len(shapes) != len(self.intensors_desc):
            raise RuntimeError("input datas and intensors nums not matched!")
        self._require_built("dymbatch")
        for desc, shape in zip(self.intensors_desc, shapes):
            for j, d in enumerate(desc.shape):
                if d < 0:
                    self.set_dynamic_batchsize(shape[j])
                    return
                if j >= len(shape) or d != shape[j]:
                    raise RuntimeError("input datas and intensors dim not matched!")
        raise RuntimeError("not a dymbatch model!")

    def _dymhw_prepare(self, shapes: List[List[int]], custom_sizes: Any) -> None:
        """As ais_bench's scan: ``shape[2]`` (then ``[3]``) of every input's descriptor until the image, so an
        earlier input of rank < 3 raises ``IndexError``."""
        if len(shapes) != len(self.intensors_desc):
            raise RuntimeError("input datas and intensors nums not matched!")
        for desc, shape in zip(self.intensors_desc, shapes):
            if desc.shape[2] < 0 and desc.shape[3] < 0:
                self.set_dynamic_hw(shape[2], shape[3])
                return
        raise RuntimeError("not a dymhw model!")

    def _dymdims_prepare(self, shapes: List[List[int]], custom_sizes: Any) -> None:
        if len(shapes) != len(self.intensors_desc):
            raise RuntimeError("input datas and intensors nums not matched!")
        self.set_dynamic_dims(self._dym_string(shapes))

    def _dymshape_prepare(self, shapes: List[List[int]], custom_sizes: Union[int, List[int]]) -> None:
        if len(shapes) != len(self.intensors_desc):
            raise RuntimeError("input datas and intensors nums not matched!")
        self.set_dynamic_shape(self._dym_string(shapes))
        sizes = [custom_sizes] * len(self._om.output_names) if isinstance(custom_sizes, int) else custom_sizes
        self.set_custom_outsize(list(sizes))

    def _dym_string(self, shapes: List[List[int]]) -> str:
        return dym_shape_text([d.name for d in self.intensors_desc], shapes)

    def _run(self, inputs: List[np.ndarray], mode: str) -> List[np.ndarray]:
        if len(inputs) != len(self.intensors_desc):
            raise RuntimeError("input datas and intensors nums not matched!")
        for i, (arr, desc) in enumerate(zip(inputs, self.intensors_desc)):
            if arr.nbytes != desc.realsize:
                raise acl_failure(
                    f"check i:{i} name:{desc.name} in size:{arr.nbytes} needsize:{desc.realsize} not match"
                )
        self._check_dynamic_type()
        feed = {}
        for i, (arr, desc) in enumerate(zip(inputs, self.intensors_desc)):
            # The device consumes raw bytes in the model's dtype and current shape.
            raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            feed[desc.name] = raw.view(numpy_dtype(desc.datatype)).reshape(self._cur_shapes[i])
        outputs: List[np.ndarray] = []
        for _ in range(self.loop):
            start = (time.perf_counter() - self._t0) * 1000.0
            outputs = self._compute(feed)
            self._summary.exec_time_list.append((start, (time.perf_counter() - self._t0) * 1000.0))
        return [self._output(i, out, desc) for i, (out, desc) in enumerate(zip(outputs, self._om.output_descs()))]

    def _check_dynamic_type(self) -> None:
        """``SetInputsData``: a dims-gear OM runs only with a dims gear set; and a gear OM whose gear was never set
        has no defined shape to run (undefined on the device; refused here)."""
        if self.built_mode == "dymdims" and self._dyn_type != "dymdims":
            raise acl_failure(
                f"check failed dym gearcount:{len(self._gears)} but dymtype:{self._dyn_type} not set "
                "(a dymdims OM runs in mode dymdims only)"
            )
        if any(d < 0 for s in self._cur_shapes for d in s):
            raise acl_failure(
                f"{self._dyn_type} execution of a {self.built_mode} OM before any gear or shape was set "
                f"(realsize {[d.realsize for d in self.intensors_desc]})"
            )

    def _output(self, i: int, out: np.ndarray, desc: tensor_desc) -> np.ndarray:
        """One output as the device returns it. Outside dymshape ACL knows only compiled output shapes
        (``aclmdlGetCurOutputDims``): a data-dependent output comes back as the whole reserved buffer, 1-D."""
        reserved = self._custom_sizes[i] if i < len(self._custom_sizes) else desc.size
        if reserved == 0:
            raise acl_failure(f"output {i} ({desc.name}) size is 0: no buffer reserved (custom_sizes)")
        if out.nbytes > reserved:
            raise acl_failure(
                f"output {i} ({desc.name}) needs {out.nbytes} bytes, larger than the {reserved} "
                "bytes reserved (custom_sizes)"
            )
        if self._dyn_type == "dymshape" or self._om.output_names[i] not in self._om.data_dependent:
            return np.ascontiguousarray(out)
        flat = np.zeros(reserved // out.dtype.itemsize, out.dtype)  # the device leaves the rest undefined
        flat[: out.size] = out.reshape(-1)
        return flat

    def _compute(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        """The model itself, on inputs already checked (the simulated runtime replays this instead)."""
        return self._om.run(feed)

    def __repr__(self) -> str:
        return f"<reference InferSession {os.path.basename(self.onnx_path)} device:{self.device_id}>"


PRECISION_OVERRIDE: Dict[str, str] = {}  # set by :func:`numerics` for the sessions opened meanwhile


@contextlib.contextmanager
def numerics(precision: str) -> Iterator[None]:
    """Reference sessions opened inside run with ``precision`` (``fp32`` or ``package``: as ATC builds the package),
    whatever ``$PADDLEX_NPU_REFERENCE_PRECISION`` says."""
    saved = PRECISION_OVERRIDE.get("precision")
    PRECISION_OVERRIDE["precision"] = precision
    try:
        yield
    finally:
        if saved is None:
            PRECISION_OVERRIDE.pop("precision", None)
        else:
            PRECISION_OVERRIDE["precision"] = saved


ACL_GENERAL_FAILURE = "[-1][ACL: general failure] "


def acl_failure(detail: str) -> RuntimeError:
    """What a failing C++ call gives on the device: the detail goes to stdout (ais_bench's ERROR_LOG) and the
    exception carries only the generic ACL text, so nothing above the session can decide from it."""
    print(f"[ERROR] {detail}", flush=True)
    return RuntimeError(ACL_GENERAL_FAILURE)


def _check_session_args(device_id: Any, model_path: Any, acl_json_path: Any, loop: Any) -> None:
    """The constructor's checks, with ais_bench's errors."""
    if not model_path:
        raise RuntimeError("empty model path!")
    if not str(model_path).endswith("om"):
        raise ValueError(f"model path {model_path!r} is not an OM file (suffix 'om' expected)")
    if acl_json_path is not None and not str(acl_json_path).endswith("json"):
        raise ValueError(f"acl json path {acl_json_path!r} is not a json file")
    if not isinstance(device_id, int) or isinstance(device_id, bool):
        raise TypeError(f"device_id:{device_id!r} is not a integer!")
    if not 0 <= device_id <= 255:
        raise ValueError(f"device_id:{device_id} out of range [0, 255]")
    if not isinstance(loop, int) or isinstance(loop, bool):
        raise TypeError(f"loop:{loop!r} is not a integer!")
    if not 1 <= loop <= 100000:
        raise ValueError(f"loop:{loop} out of range [1, 100000]")


def _check_list(feeds: Any) -> None:
    if not isinstance(feeds, list):
        raise ValueError("the list be checked is not a list!")
    if not feeds:
        raise ValueError("the list is empty")
    if len(feeds) > MAX_FEEDS:
        raise ValueError(f"the length of list is larger than {MAX_FEEDS}")


def _check_custom_size(custom_sizes: Any, mode: str) -> None:
    if mode not in MODES:
        raise ValueError("infer mode is illegal, Please check.")
    if custom_sizes is None:
        if mode == "dymshape":
            raise ValueError("custom_sizes can not be None in dymshape mode")
        return
    if isinstance(custom_sizes, list):
        if not 0 < len(custom_sizes) <= MAX_CUSTOM_SIZES:
            raise ValueError(f"the length of custom_sizes list must be in [1, {MAX_CUSTOM_SIZES}]")
        for v in custom_sizes:
            if type(v) is not int:
                raise ValueError(f"some value in list is not the expected type: {v!r} is not int")
            if not 0 < v <= MAX_CUSTOM_SIZE:
                raise ValueError(f"value:{v} of custom_sizes is out of range (0, {MAX_CUSTOM_SIZE}]")
        return
    if type(custom_sizes) is not int:
        raise TypeError(f"value:{custom_sizes!r} is not a integer!")
    if not 0 < custom_sizes <= MAX_CUSTOM_SIZE:
        raise ValueError(f"value:{custom_sizes} of custom_sizes is out of range (0, {MAX_CUSTOM_SIZE}]")


INPUT_DYM_SHAPE_MAX_LENGTH = 30  # C++ Utils::SplitStringByComma: one input's dims text


def _parse_dym_string(text: str, kind: str = "shape") -> Dict[str, List[int]]:
    """``Utils::IsLegalDymString``: ``name:d,d;...``; one input's dims text over 30 characters makes C++ throw
    ``Input dymShpae out of length`` (sic); at most 6 dims of 1-9 digits, no leading zero."""
    illegal = RuntimeError(f"the format of dynamic {kind} string is illegal, please check")
    if not text or len(text) > 4096:
        raise illegal
    parsed: Dict[str, List[int]] = {}
    for part in text.split(";"):
        fields = part.split(":")
        if len(fields) != 2 or not _DYM_NAME.match(fields[0]):
            raise illegal
        name, dims_text = fields
        if len(dims_text) > INPUT_DYM_SHAPE_MAX_LENGTH:
            raise RuntimeError("Input dymShpae out of length")
        dims_s = dims_text.split(",")
        if not 0 < len(dims_s) <= 6 or any(not re.fullmatch(r"[1-9][0-9]{0,8}", d) for d in dims_s):
            raise illegal
        parsed[name] = [int(d) for d in dims_s]
    return parsed
