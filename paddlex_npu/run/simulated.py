"""The simulated device: runtime ``simulated``, an NPU stand-in for throughput work on a CPU machine.

It is the CPU reference :class:`~.reference.InferSession` (same contract, same checks, same errors) with the
model replaced by a device model:

- **outputs are real**: the reference runtime's outputs, computed once (a *recording* pass) and stored under a
  digest of the inputs (XXH3-128 of every input's name, dtype, shape and bytes) in a replay store
  (``$PADDLEX_NPU_SIM_STORE``, default ``~/.cache/paddlex_npu/simulated/<model sha256>/``). A replayed call
  spends no CPU on the model, only the digest (about a memory read of the inputs, as a host-to-device copy)
  and mapping the stored outputs copy-on-write, a mapping the pipeline freed unwritten serving the next replay
  of the same call (all counted as ``replay_ms``, CPU time, with the release of the mappings). An input never
  seen is computed with ONNX Runtime, stored, and counted (:func:`stats` ``computed``; logged when the session
  is freed);
- **device time** comes from a cost model, ``base_ms + ms_per_melem * (input elements / 1e6)`` (see
  :func:`default_cost` for how the defaults follow from the published 310P3 figures), plus the **transfers**: the
  input bytes host to device and the output bytes device to host at ``pcie_gbps`` (:data:`PCIE_GBPS`), so that a
  model whose outputs are large (a CTC head's ``[N, T, classes]``) pays for moving them; plus what ais_bench
  does per buffer, from its source (:data:`MALLOC_US`): per input a malloc, a synchronous copy and a free, per
  output a device and a pinned host malloc, a synchronous copy and two frees; and what the graph's structure costs
  (:class:`GraphProfile`, read from the ONNX at the first call): a host sync per ``If`` where GE runs the graph on
  its hybrid executor (value-dependent shapes, a dymshape OM), and each node on the AI CPU;
- **the GIL is held from entry to return** of a replayed call, as ais_bench's bindings hold it for the whole
  device call: every blocking or long step is a C function called through :class:`ctypes.PyDLL` (which keeps
  the GIL): the digest (XXH3 of the ``xxhash`` package's own library: its Python API releases the GIL on large
  buffers, as ``hashlib`` does), opening and mapping the stored outputs (libc ``open``/``mmap``), the device
  lock (``flock``/``pread``/``pwrite``) and the wait for the device time (``clock_nanosleep``: no CPU burnt).
  No other Python thread of the process runs meanwhile. A call on an input never seen runs ONNX Runtime,
  which releases the GIL (a recording pass, not a measured one);
- **one device is one device**: device time is serialised across all processes that use the same device id
  and lock folder (``$PADDLEX_NPU_SIM_LOCKS``): a FIFO of slots kept in one lock file per device id
  (:class:`DeviceLock`); a call waits for its slot and for its device time with the GIL held, as a process
  waiting for a busy NPU does.

Not modelled: copies overlapping compute (a call's transfers and compute are serial, as ais_bench's synchronous
``aclrtMemcpy`` around ``aclmdlExecute`` are), device memory limits, streams,
fp16 numerics beyond the reference runtime's (fp32, or ATC's fp16 storage with
``PADDLEX_NPU_REFERENCE_PRECISION=package``: replayed from a store of their own), warm-up/compile time of a real OM,
the hybrid executor's host-side work per node (shape inference, tiling, launch) beyond its ``If`` syncs.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import fcntl
import hashlib
import itertools
import json
import os
import threading
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import xxhash._xxhash as _xxhash_ext

from .. import envs
from ..config import SimulationConfig
from ..log import logger
from ..om.aicpu_ops import aicpu_nodes as placed_on_aicpu
from ..om.atc_ops import AI_CPU
from . import tasks
from .device_ids import physical_npu
from .reference import InferSession, acl_failure

# Cost model defaults, from the 310P3 OM figures in the reference notes (ModelZoo, model-only throughput):
# - ch_PP-OCRv3_rec, input 3x48x320 (46,080 elements per image): 1547.8 images/s at batch 1 (0.6461 ms per
#   call) and 4845.8 at batch 16 (3.3018 ms per call of 737,280 elements). The line through both points:
#   3.842 ms per million elements, 0.469 ms per call.
# - ch_PP-OCRv3_det, 320.55 images/s at batch 1 (3.1196 ms per call), taken at 3x736x1280 (ICDAR2015's
#   720x1280 images on the smallest of its 736..1536 gears; the docs' exact size is an assumption): with
#   the same per-call base, 0.938 ms per million elements. Dense image models (detection, segmentation) take
#   this rate, every other model the recognition rate (the higher one).
BASE_MS = 0.469
SEQUENCE_MS_PER_MELEM = 3.842
DENSE_MS_PER_MELEM = 0.938
# Host<->device copies, GB/s each way. The Atlas 300I Pro (310P3) sits on PCIe 4.0 x16 (Huawei's Atlas 300I Pro
# data sheet): 16 GT/s x 16 lanes with 128b/130b coding is 31.5 GB/s per direction (PCI-SIG, PCIe 4.0 base
# specification). ais_bench copies every output into a new, pageable NumPy array, and pageable copies reach about
# half of the link (issue 35's 12-16 GB/s): 16 GB/s, an assumption within that span, is the default.
PCIE_GBPS = 16.0
# What ais_bench's ``infer`` does per call besides ``aclmdlExecute`` (Yanguan619/aclruntime @8da7f645, under
# ais-bench_workload/tool/ais_bench/; correction 34), all with the GIL held (correction 14):
# - each input: ``PyInferenceSession.cpp:407`` ``CopyMemory2DeviceMemory`` (``TensorBase.cpp:514-529``): an
#   ``aclrtMalloc`` (``MemoryHelper.cpp:63``) and a synchronous H2D ``aclrtMemcpy`` (``MemoryHelper.cpp:226``);
#   after the call ``PyInferenceSession.cpp:418-419`` ``MemoryHelper::Free``: ``aclrtFree`` (``MemoryHelper.cpp:142``);
# - each output: ``ModelInferenceProcessor.cpp:163-164`` ``CreateOutMemoryData``: an ``aclrtMalloc``; then
#   ``interface.py:97`` ``to_host`` (``TensorBase.cpp:256-277`` ``ToHost``): a host buffer by ``aclrtMallocHost``
#   (``TensorBuffer.cpp:45``, ``MemoryHelper.cpp:56``), a synchronous D2H ``aclrtMemcpy`` (``MemoryHelper.cpp:216``),
#   the device buffer dropped (``TensorBase.cpp:277``; its deleter ``:109`` ``aclrtFree``), and the host buffer
#   freed (``aclrtFreeHost``, ``MemoryHelper.cpp:136``) once NumPy has copied it (``interface.py:104``).
# So a call makes ``inputs + 2 x outputs`` allocations and as many frees, and ``inputs + outputs`` synchronous
# copies. No published figure for these calls on a 310P or 910B was found; the figures are assumptions, set per
# run in ``SimulationConfig``:
# - MALLOC_US, FREE_US: 10 us per aclrtMalloc/aclrtMallocHost and per aclrtFree/aclrtFreeHost, a driver call on the
#   device's allocator (the order CUDA's cudaMalloc/cudaFree are commonly measured at: a few to tens of us);
# - MEMCPY_US: 20 us per synchronous aclrtMemcpy besides its bytes (at pcie_gbps): a DMA task submitted to the
#   device and waited for across PCIe (a small synchronous cudaMemcpy is commonly ~10 us; the ACL runtime's task
#   submission is taken as twice that);
# - a host sync of GE's hybrid executor is one such copy: ``IfOpNodeTask::DoExecuteAsync`` reads the condition
#   with ``ToBool`` (hicann/ge ``runtime/v1/hybrid/node_executor/controlop/control_op_executor.cc:150-153``),
#   a synchronous D2H ``aclrtMemcpy`` of the scalar (``runtime/v1/hybrid/common/tensor_value.h:96-99``): MEMCPY_US;
# - AICPU_US: 50 us per node on the AI CPU per call (task dispatch to the AI CPU and its kernel on a small
#   tensor; CANN's profiler reports AI CPU ops by ``Task_time``/``Dispatch_time`` in us, no typical figure is
#   published): an assumption, meant as the order of magnitude.
MALLOC_US = 10.0
FREE_US = 10.0
MEMCPY_US = 20.0
AICPU_US = 50.0


@dataclass(frozen=True)
class CallCost:
    """What one call costs on the simulated device, by part (ms), and what it did."""

    compute_ms: float  # base + rate x elements: aclmdlExecute
    transfer_ms: float  # the bytes across PCIe
    buffer_ms: float  # per-buffer mallocs, copy launches and frees
    sync_ms: float  # the hybrid executor's host syncs
    aicpu_ms: float  # the AI CPU's nodes
    mallocs: int
    host_syncs: int

    @property
    def device_ms(self) -> float:
        return self.compute_ms + self.transfer_ms + self.buffer_ms + self.sync_ms + self.aicpu_ms


@dataclass(frozen=True)
class CostModel:
    """Device time of one call: ``base_ms + ms_per_melem * elements / 1e6`` (elements of all inputs), the
    transfers ``(input bytes + output bytes) / pcie_gbps``, and ais_bench's per-buffer work (see
    :data:`MALLOC_US`): per input a malloc, a synchronous copy and a free, per output two mallocs (device, pinned
    host), a synchronous copy and two frees; per host sync of the hybrid executor one synchronous copy; per AI CPU
    node ``aicpu_us``."""

    base_ms: float
    ms_per_melem: float
    pcie_gbps: float = PCIE_GBPS
    malloc_us: float = MALLOC_US
    free_us: float = FREE_US
    memcpy_us: float = MEMCPY_US
    aicpu_us: float = AICPU_US

    def device_ms(self, elements: int) -> float:
        return self.base_ms + self.ms_per_melem * elements / 1e6

    def transfer_ms(self, nbytes: int) -> float:
        """Milliseconds to move ``nbytes`` across PCIe (one direction)."""
        return nbytes / (self.pcie_gbps * 1e6) if self.pcie_gbps > 0 else 0.0

    def call(
        self, elements: int, bytes_in: int, bytes_out: int, inputs: int, outputs: int, graph: GraphProfile
    ) -> CallCost:
        """The :class:`CallCost` of one call of ``inputs`` and ``outputs`` buffers on a graph of that profile."""
        mallocs = inputs + 2 * outputs
        buffer_us = mallocs * (self.malloc_us + self.free_us) + (inputs + outputs) * self.memcpy_us
        return CallCost(
            compute_ms=self.device_ms(elements),
            transfer_ms=self.transfer_ms(bytes_in) + self.transfer_ms(bytes_out),
            buffer_ms=buffer_us / 1000.0,
            sync_ms=graph.host_syncs * self.memcpy_us / 1000.0,
            aicpu_ms=len(graph.aicpu) * self.aicpu_us / 1000.0,
            mallocs=mallocs,
            host_syncs=graph.host_syncs,
        )


def default_cost(task: Optional[str] = None) -> CostModel:
    """The default cost model for a PaddleX predictor class name (``TextDetPredictor``...; None: unknown)."""
    dense = task is not None and tasks.task_of_predictor(task) in tasks.DENSE_IMAGE
    return CostModel(BASE_MS, DENSE_MS_PER_MELEM if dense else SEQUENCE_MS_PER_MELEM)


# ---- the graph's structure: GE's hybrid executor, its host syncs, the AI CPU --------------------------------

# Operators whose output shape follows the values of these inputs (ONNX operator specs): with such an input not
# known when the OM is built, GE cannot type the graph statically and runs it on its hybrid executor.
_SHAPE_FROM_VALUES = {
    "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4),
    "Expand": (1,),
    "Tile": (1,),
    "Reshape": (1,),
    "ConstantOfShape": (0,),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Pad": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}
# Output shapes from the data whatever is known (om.graph's DATA_DEPENDENT_OPS), and loops run from the host.
_DATA_SHAPED = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress", "Loop", "Scan"})
_NEVER_FOLDED = _DATA_SHAPED | {"If", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform"}
_NEVER_FOLDED |= {"RandomUniformLike"}


@dataclass(frozen=True)
class GraphProfile:
    """What a graph's structure costs per call: ``hybrid`` says why GE runs it on its hybrid executor (empty: it
    does not), ``if_nodes`` the ``If`` nodes of the main graph (each executed once a call: a host sync each on the
    hybrid executor), ``aicpu`` the nodes on the AI CPU (``op name``)."""

    hybrid: str = ""
    if_nodes: int = 0
    aicpu: Tuple[str, ...] = ()

    @property
    def host_syncs(self) -> int:
        """Host syncs per call: one per ``If`` on the hybrid executor (``hybrid_model_builder.cc:63``: If, Case...
        need their condition ready before they run, ``:492-499``; ``IfOpNodeTask`` copies it to the host,
        ``control_op_executor.cc:150-153``). A static graph's ``If`` runs on the device (GE's stream switch)."""
        return self.if_nodes if self.hybrid else 0


def _types(graph: object, into: Optional[dict] = None) -> dict:
    """Every typed tensor of ``graph`` and its subgraphs: name -> TypeProto.Tensor (after shape inference)."""
    into = {} if into is None else into
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        into[vi.name] = vi.type.tensor_type
    for init in graph.initializer:
        into.setdefault(init.name, types.SimpleNamespace(elem_type=init.data_type, shape=None))
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                _types(attr.g, into)
    return into


def _static(t: object) -> bool:
    shape = getattr(t, "shape", None)
    return shape is not None and t.HasField("shape") and all(d.HasField("dim_value") for d in shape.dim)


def known_values(graph: object, typed: dict, outer: frozenset = frozenset()) -> set:
    """Tensors of ``graph`` whose values are known when the OM is built (GE folds them): initializers, Constant
    outputs, Shape and Size of a tensor of static shape, and what deterministic nodes compute from those alone."""
    known = set(outer) | {i.name for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            known.update(node.output)
        elif node.op_type in ("Shape", "Size"):
            if node.input[0] in known or _static(typed.get(node.input[0])):
                known.update(node.output)
        elif node.op_type not in _NEVER_FOLDED and node.input and all(not i or i in known for i in node.input):
            known.update(node.output)
    return known


def _value_shaped(graph: object, typed: dict, known: set) -> str:
    """The first node of ``graph`` (its subgraphs included) whose output shape depends on values not known at
    build time, as ``op name (why)``; empty when there is none."""
    for node in graph.node:
        name = f"{node.op_type} {node.name or '(unnamed)'}"
        if node.op_type in _DATA_SHAPED:
            return f"{name} (output shape from the data)"
        decide = _SHAPE_FROM_VALUES.get(node.op_type, ())
        if any(i < len(node.input) and node.input[i] and node.input[i] not in known for i in decide):
            return f"{name} (its shape input is computed at run time)"
        if node.op_type == "If" and not all(_static(typed.get(o)) for o in node.output):
            return f"{name} (branches of different shapes or ranks, correction 33)"
        for attr in node.attribute:
            if attr.HasField("g"):
                inner = _value_shaped(attr.g, typed, known_values(attr.g, typed, frozenset(known)))
                if inner:
                    return inner
    return ""


SOC = "Ascend310P3"  # the chip of the cost model's figures: its AI CPU placements where a package names none


def aicpu_nodes(model: object, soc: str = SOC) -> List[str]:
    """The nodes of ``model`` (an ONNX ModelProto, inputs at the call's shapes) on the AI CPU of ``soc`` (``op
    name``): :func:`~..om.aicpu_ops.aicpu_nodes` (the 2022 op-info lists, correction 35; nodes ATC folds left out,
    both branches of an ``If`` counted) and the operators :data:`~..om.atc_ops.AI_CPU` names (NonZero, Unique...)."""
    placement = placed_on_aicpu(model, soc) or placed_on_aicpu(model, SOC)
    found = [f"{issue.op} {issue.node}" for issue in placement.aicpu]
    return found + [f"{node.op_type} {name}" for node, name in _nodes(model.graph) if node.op_type in AI_CPU]


def _nodes(graph: object, where: str = "") -> Iterator[Tuple[object, str]]:
    for node in graph.node:
        name = f"{where}{node.name or '(unnamed)'}"
        yield node, name
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _nodes(attr.g, f"{name}/")


def graph_profile(
    onnx_path: str, shapes: Dict[str, Tuple[int, ...]], dynamic: bool, soc: Optional[str] = None
) -> GraphProfile:
    """The :class:`GraphProfile` of the ONNX at ``onnx_path`` with its inputs of ``shapes`` (a static or gear
    OM's shapes; ``dynamic``: a dymshape OM, which GE runs on its dynamic executor whatever the graph) on the chip
    ``soc`` (default :data:`SOC`)."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    for vi in model.graph.input:
        if vi.name in shapes and vi.type.tensor_type.HasField("shape"):
            for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]):
                d.Clear()
                d.dim_value = int(v)
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a graph inference gives up on: dtypes and shapes as annotated
        pass
    typed = _types(model.graph)
    known = known_values(model.graph, typed)
    why = "dymshape OM (unknown dims)" if dynamic else _value_shaped(model.graph, typed, known)
    ifs = sum(node.op_type == "If" for node in model.graph.node)
    return GraphProfile(why, ifs, tuple(aicpu_nodes(model, soc or SOC)))


# ---- the C calls that keep the GIL ---------------------------------------------------------------------------


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_LIBC = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held during each call
_LIBC.nanosleep.argtypes = [ctypes.POINTER(_Timespec), ctypes.POINTER(_Timespec)]
_LIBC.flock.argtypes = [ctypes.c_int, ctypes.c_int]
_LIBC.open.argtypes = [ctypes.c_char_p, ctypes.c_int]
_LIBC.close.argtypes = [ctypes.c_int]
_LIBC.lseek.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int]
_LIBC.lseek.restype = ctypes.c_long
_LIBC.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
_LIBC.pread.restype = ctypes.c_ssize_t
_LIBC.pwrite.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
_LIBC.pwrite.restype = ctypes.c_ssize_t
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _check(result: int) -> int:
    """A libc result, or the OSError its errno names."""
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


class _XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def _xxh3_library() -> Tuple[ctypes.PyDLL, object]:
    """XXH3's streaming functions from the ``xxhash`` package's extension, called with the GIL held, and its
    update function: the one that picks the CPU's widest vectors (AVX2/AVX-512, twice as fast as the baseline
    build here, same digest) where the library has it."""
    lib = ctypes.PyDLL(_xxhash_ext.__file__)
    try:
        lib.XXH3_createState.restype = ctypes.c_void_p
        lib.XXH3_freeState.argtypes = [ctypes.c_void_p]
        lib.XXH3_128bits_reset.argtypes = [ctypes.c_void_p]
        update = getattr(lib, "XXH3_128bits_update_dispatch", None) or lib.XXH3_128bits_update
        update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.XXH3_128bits_digest.argtypes = [ctypes.c_void_p]
        lib.XXH3_128bits_digest.restype = _XXH128
    except AttributeError as exc:  # a build of xxhash that hides its C symbols
        raise ImportError(
            f"the simulated device needs XXH3 from the xxhash package's library ({_xxhash_ext.__file__}), which "
            f"does not export it ({exc}): install the PyPI wheel, pip install 'xxhash>=3.0'"
        ) from exc
    return lib, update


_XXH3, _XXH3_UPDATE = _xxh3_library()


def _flock(fd: int, op: int) -> bool:
    """libc ``flock`` with the GIL held; False when a non-blocking attempt finds the lock taken."""
    if _LIBC.flock(fd, op) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EWOULDBLOCK, errno.EINTR):
        return False
    raise OSError(err, os.strerror(err))


# ---- the device ------------------------------------------------------------------------------------------

_LIBC.clock_nanosleep.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.c_void_p]
_TIMER_ABSTIME = 1


def monotonic() -> float:
    """The clock of device time (CLOCK_MONOTONIC: one clock for every process of the machine)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def gil_sleep_until(deadline: float) -> None:
    """Wait in C until ``deadline`` (:func:`monotonic`) without releasing the GIL; a signal only lets Python's
    handler run (Ctrl-C raises ``KeyboardInterrupt`` here)."""
    ts = _Timespec(int(deadline), int(round((deadline % 1) * 1e9)))
    while True:
        err = _LIBC.clock_nanosleep(time.CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(ts), None)
        if err == 0:
            return
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


class DeviceLock:
    """One simulated device, a FIFO queue shared by threads and processes: its lock file holds the time the
    device is busy until. A call reserves ``[max(now, busy_until), + device time]`` in a critical section of a
    few microseconds (``flock``), then waits for the end of its slot with the GIL held. The device is free at
    the slot's end whether or not the waiting process gets a CPU at once, as an NPU finishes a call while its
    host thread waits to be scheduled."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o666)

    def reserve(self, seconds: float) -> Tuple[float, float]:
        """The (start, end) of the next free slot of ``seconds`` on the device (:func:`monotonic` times)."""
        with self._thread_lock:
            while not _flock(self._fd, fcntl.LOCK_EX):
                pass  # EINTR: Python's signal handlers ran between the calls
            try:
                # libc, not os.pread/os.pwrite: those release the GIL
                slot = ctypes.c_double(0.0)
                got = _check(_LIBC.pread(self._fd, ctypes.byref(slot), 8, 0))
                start = max(monotonic(), slot.value if got == 8 else 0.0)
                slot.value = start + seconds
                _check(_LIBC.pwrite(self._fd, ctypes.byref(slot), 8, 0))
            finally:
                _flock(self._fd, fcntl.LOCK_UN)
        return start, start + seconds

    def run(self, seconds: float) -> Tuple[float, float]:
        """One device call of ``seconds``: wait (GIL held) for the device and for the call; returns its slot."""
        start, end = self.reserve(seconds)
        gil_sleep_until(end)
        return start, end


_DEVICES: Dict[Tuple[int, str], DeviceLock] = {}
_DEVICES_LOCK = threading.Lock()


def device_lock(lock_dir: Path, device_id: int) -> DeviceLock:
    """The process's lock of one simulated device, keyed by the physical NPU (:func:`physical_npu`), so that
    processes that see the chip under different logical ids share it (a fresh file description after a fork)."""
    path = Path(lock_dir) / f"npu{physical_npu(device_id)}.lock"
    key = (os.getpid(), str(path))
    with _DEVICES_LOCK:
        if key not in _DEVICES:
            _DEVICES[key] = DeviceLock(path)
        return _DEVICES[key]


# ---- the replay store ----------------------------------------------------------------------------------------


def default_store() -> Path:
    return envs.sim_store()


def default_lock_dir() -> Path:
    return envs.sim_locks()


def feed_digest(feed: Dict[str, np.ndarray]) -> str:
    """XXH3-128 of every input's name, dtype, shape and bytes, computed with the GIL held (:data:`_XXH3`)."""
    state = _XXH3.XXH3_createState()
    if not state:
        raise MemoryError("XXH3_createState")
    try:
        _XXH3.XXH3_128bits_reset(state)
        for name, arr in feed.items():
            arr = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
            meta = f"{name}|{arr.dtype.str}|{arr.shape}|".encode()
            _XXH3_UPDATE(state, meta, len(meta))
            _XXH3_UPDATE(state, arr.ctypes.data, arr.nbytes)
        h = _XXH3.XXH3_128bits_digest(state)
    finally:
        _XXH3.XXH3_freeState(state)
    return f"{h.high64:016x}{h.low64:016x}"


_MAGIC = b"PXNSIM01"  # then the header's length (uint64), the JSON header, the outputs at 64-byte offsets
_ALIGN = 64


def _data_start(header_length: int) -> int:
    """Where a replay file's outputs begin: after magic, length and header, at a 64-byte boundary."""
    return -(-(16 + header_length) // _ALIGN) * _ALIGN


_UNMAP_SECONDS = [0.0]  # CPU time of releasing replayed outputs (when the pipeline frees them): the simulator's
_PAGE = os.sysconf("SC_PAGE_SIZE")
# a pagemap entry's top byte: bit 63 (0x80) the page is present, 62 (0x40) swapped, 61 (0x20) a file page; present
# and not a file page, or swapped, is a private copy: written to since it was mapped
_WRITTEN = bytes(1 if b & 0xA0 == 0x80 or b & 0x40 else 0 for b in range(256))
_PAGEMAP = [-2]  # the fd of /proc/self/pagemap (-2: not opened yet, -1: not readable here) and its pid
_PAGEMAP_PID = [0]
_PAGEMAP_BUF = [ctypes.create_string_buffer(0)]  # grown to the largest mapping checked


def _untouched(address: int, size: int) -> bool:
    """Whether no page of a private mapping was written since it was mapped (``/proc/self/pagemap``, read with
    the GIL held). False where pagemap cannot be read: the mapping is then not reused."""
    if _PAGEMAP_PID[0] != os.getpid():
        _PAGEMAP[0] = _LIBC.open(b"/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        _PAGEMAP_PID[0] = os.getpid()
    fd = _PAGEMAP[0]
    if fd < 0:
        return False
    n = -(-size // _PAGE) * 8
    if len(_PAGEMAP_BUF[0]) < n:
        _PAGEMAP_BUF[0] = ctypes.create_string_buffer(n)
    buf = _PAGEMAP_BUF[0]
    if _LIBC.pread(fd, buf, n, (address // _PAGE) * 8) != n:
        return False
    return 1 not in memoryview(buf).cast("B")[7:n:8].tobytes().translate(_WRITTEN)  # each entry's top byte


class _Mapping:
    """A private (copy-on-write) map of one stored file. When the last array over it is freed, it goes back
    to its store for the next replay of the same call if no page of it was written (the pipeline only read
    the outputs), else it is unmapped."""

    def __init__(self, address: int, size: int, store: Optional[ReplayStore] = None, digest: str = "") -> None:
        self.address, self.size, self.store, self.digest = address, size, store, digest
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}

    def __del__(self) -> None:
        try:
            c0 = time.thread_time()
            if self.store is None or not self.store._give_back(self.digest, self.address, self.size):
                _LIBC.munmap(self.address, self.size)
            _UNMAP_SECONDS[0] += time.thread_time() - c0  # no lock: a finalizer may run inside a locked section
        except Exception:  # interpreter shutdown: the process's mappings go with it
            pass


@dataclass(frozen=True)
class _Entry:
    """A stored call kept open: its file, size and outputs (byte offset, byte count, dtype, shape)."""

    fd: int
    size: int
    outputs: Tuple[Tuple[int, int, np.dtype, Tuple[int, ...]], ...]


class ReplayStore:
    """Outputs by input digest: one file per call (all its outputs), written atomically (processes may record
    the same input at once). Replayed outputs are private copy-on-write maps of that file, opened and mapped
    through libc with the GIL held: the model's outputs are read from the page cache as the pipeline uses
    them, with no copy up front. The last ``keep_open`` files stay open with their headers read, so a replay
    is one ``mmap``; and up to ``keep_mapped`` mappings (``keep_mapped_bytes`` in all) that the pipeline freed
    without writing to them are kept for the next replay of the same call (no ``mmap``, page faults or
    ``munmap``)."""

    def __init__(
        self, folder: Path, keep_open: int = 256, keep_mapped: int = 64, keep_mapped_bytes: int = 256 << 20
    ) -> None:
        self.folder = Path(folder)
        self._prefix = os.fsencode(self.folder) + b"/"
        self._open: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._keep_open = keep_open
        self._unused: collections.OrderedDict[Tuple[str, int], int] = collections.OrderedDict()  # -> size
        self._keep_mapped, self._keep_mapped_bytes, self._mapped_bytes = keep_mapped, keep_mapped_bytes, 0
        self.reused = 0  # replays served by a mapping given back untouched

    def _path(self, digest: str) -> Path:
        return self.folder / digest[:2] / f"{digest}.out"

    def get(self, digest: str, count: int) -> Optional[List[np.ndarray]]:
        entry = self._open.get(digest)
        if entry is None:
            entry = self._load(digest, count)
            if entry is None:
                return None
        else:
            self._open.move_to_end(digest)
        address = self._take_unused(digest)
        if address is None:
            address = _LIBC.mmap(None, entry.size, 0x1 | 0x2, 0x02, entry.fd, 0)  # PROT_READ|WRITE, MAP_PRIVATE
            if address in (None, _MAP_FAILED):
                _check(-1)
        else:
            self.reused += 1
        whole = np.asarray(_Mapping(address, entry.size, self, digest))
        return [whole[at : at + n].view(dtype).reshape(shape) for at, n, dtype, shape in entry.outputs]

    def _load(self, digest: str, count: int) -> Optional[_Entry]:
        """Open a stored call and read its header (libc with the GIL held); None if it was never recorded."""
        fd = _LIBC.open(self._prefix + f"{digest[:2]}/{digest}.out".encode(), os.O_RDONLY | os.O_CLOEXEC)
        if fd == -1:
            err = ctypes.get_errno()
            if err == errno.ENOENT:
                return None
            raise OSError(err, os.strerror(err), str(self._path(digest)))
        try:
            size = _check(_LIBC.lseek(fd, 0, os.SEEK_END))
            head = ctypes.create_string_buffer(16)
            got = _check(_LIBC.pread(fd, head, 16, 0))
            if got < 16 or head.raw[:8] != _MAGIC:
                raise OSError(f"{self._path(digest)} is no replay file (a store of another version?): delete it")
            length = int.from_bytes(head.raw[8:16], "little")
            text = ctypes.create_string_buffer(length)
            _check(_LIBC.pread(fd, text, length, 16))
            header = json.loads(text.raw)
            if len(header) != count:
                raise OSError(f"{self._path(digest)} holds {len(header)} outputs, the model has {count}: delete it")
        except BaseException:
            _LIBC.close(fd)
            raise
        start = _data_start(length)
        outputs = tuple((start + h["at"], h["nbytes"], np.dtype(h["dtype"]), tuple(h["shape"])) for h in header)
        entry = _Entry(fd, size, outputs)
        self._open[digest] = entry
        while len(self._open) > self._keep_open:
            _LIBC.close(self._open.popitem(last=False)[1].fd)
        return entry

    def _take_unused(self, digest: str) -> Optional[int]:
        for key in self._unused:
            if key[0] == digest:
                self._mapped_bytes -= self._unused.pop(key)
                return key[1]
        return None

    def _give_back(self, digest: str, address: int, size: int) -> bool:
        """Keep a freed mapping for the next replay of ``digest`` if untouched (True), else refuse it."""
        if self._keep_mapped <= 0 or not _untouched(address, size):
            return False
        self._unused[(digest, address)] = size
        self._mapped_bytes += size
        while len(self._unused) > self._keep_mapped or self._mapped_bytes > self._keep_mapped_bytes:
            (_, old), old_size = self._unused.popitem(last=False)
            self._mapped_bytes -= old_size
            _LIBC.munmap(old, old_size)
        return True

    def close(self) -> None:
        """Close the files kept open and unmap the mappings kept."""
        while self._open:
            _LIBC.close(self._open.popitem()[1].fd)
        while self._unused:
            (_, address), size = self._unused.popitem()
            _LIBC.munmap(address, size)
        self._mapped_bytes = 0

    def put(self, digest: str, outputs: List[np.ndarray]) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        header, offset = [], 0
        for out in outputs:
            if out.dtype.hasobject:
                raise TypeError(f"the simulated device stores numeric outputs only, not {out.dtype}")
            header.append({"dtype": out.dtype.str, "shape": list(out.shape), "nbytes": out.nbytes, "at": offset})
            offset += -(-out.nbytes // _ALIGN) * _ALIGN
        text = json.dumps(header).encode()
        start = _data_start(len(text))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(_MAGIC + len(text).to_bytes(8, "little") + text)
            for h, out in zip(header, outputs):
                f.write(b"\0" * (start + h["at"] - f.tell()))
                f.write(memoryview(np.ascontiguousarray(out)).cast("B"))
        os.replace(tmp, path)  # a copy recorded meanwhile by another process holds the same outputs


def model_key(onnx_path: str) -> str:
    """The replay folder of a model: the SHA-256 of its ONNX (so a changed model never replays old outputs)."""
    h = hashlib.sha256()
    with open(onnx_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:32]


# ---- counters ------------------------------------------------------------------------------------------------


@dataclass
class SimStats:
    """What the simulated sessions of this process did (times in ms)."""

    calls: int = 0
    replayed: int = 0
    computed: int = 0
    device_ms: float = 0.0
    replay_ms: float = 0.0
    compute_ms: float = 0.0
    transfer_ms: float = 0.0  # part of device_ms: the copies host to device and back
    bytes_in: int = 0
    bytes_out: int = 0
    host_syncs: int = 0  # the hybrid executor's host syncs (one per If a call)
    mallocs: int = 0  # ais_bench's device and pinned host allocations


_STATS = SimStats()
_STATS_LOCK = threading.Lock()
_MODELS: Dict[str, Dict[str, float]] = {}  # model folder -> its cost model and counters, in this process


def stats() -> Dict[str, float]:
    """A snapshot of this process's counters: calls, replayed, computed (inputs never seen), device_ms, and the
    simulation's own host work: replay_ms (digest, mapping and unmapping, CPU time of the threads), compute_ms (ONNX
    Runtime on inputs never seen, wall time); device memory as ais_bench allocates it (:class:`DeviceMemory`):
    device_bytes in use between calls, device_peak_bytes, device_leaked_bytes (inputs of failed calls)."""
    with _STATS_LOCK:
        out = asdict(_STATS)
    out["replay_ms"] += _UNMAP_SECONDS[0] * 1000.0
    out.update(device_bytes=MEMORY.resident, device_peak_bytes=MEMORY.peak, device_leaked_bytes=MEMORY.leaked)
    return out


def model_stats() -> Dict[str, Dict[str, float]]:
    """Per model (its folder's name) of this process: ``task``, the cost model (``base_ms``, ``ms_per_melem``,
    ``pcie_gbps``, ``malloc_us``, ``free_us``, ``memcpy_us``, ``aicpu_us``), its graph's structure (``hybrid``: why
    GE runs it on its hybrid executor, empty if not; per call ``if_nodes``, ``aicpu_nodes``, ``buffers``: mallocs)
    and what its calls cost, summed: ``calls``, ``elements`` (input elements), ``bytes_in``, ``bytes_out`` (moved
    host to device and back), ``host_syncs``, ``mallocs``, ``device_ms`` (all of it) and its parts
    ``transfer_ms``, ``buffer_ms`` (mallocs, copy launches, frees), ``sync_ms``, ``aicpu_ms``."""
    with _STATS_LOCK:
        return {name: dict(m) for name, m in _MODELS.items()}


def _count(model: str, elements: int, parts: Dict[str, float], **deltas: float) -> None:
    with _STATS_LOCK:
        for key, value in deltas.items():
            setattr(_STATS, key, getattr(_STATS, key) + value)
        m = _MODELS[model]
        m["calls"] += 1
        m["elements"] += elements
        for key in _MODEL_SUMS:
            m[key] += parts[key] if key in parts else deltas[key]
        m["buffers"] = deltas["mallocs"]  # per call


_MODEL_SUMS = ("device_ms", "transfer_ms", "bytes_in", "bytes_out", "host_syncs", "mallocs")
_MODEL_SUMS += ("buffer_ms", "sync_ms", "aicpu_ms")


_CALLS = itertools.count(1)  # device calls of this process, for the device-lost fault
LOST_CODE = 507015  # what ACL reports for the simulated loss: ACL_ERROR_RT_AICORE_EXCEPTION (rt_error_codes.h)
DEVICE_BYTES = 32 * 2**30  # the simulated device's HBM: an Ascend 910B4's 32 GB


class SimulatedAcl:
    """What pyACL answers about the simulated device, as on a real box (CANN pyACL reference):
    ``acl.rt.get_last_error(level)`` (the calling thread's last runtime error, cleared by the read),
    ``acl.rt.peek_at_last_error(level)`` (not cleared), ``acl.rt.query_device_status(device_id)`` ->
    ``(status, ret)`` (0 normal, 1 abnormal) and ``acl.rt.get_mem_info(attr)`` -> ``(free, total, ret)``. The route
    asks it after a failed call (:class:`~.acl_errors.LossJudge`); the failed call itself says only
    ``[-1][ACL: general failure]``. Memory: the simulated device has :data:`DEVICE_BYTES` of HBM and no DDR (a
    910B's answers); in use is what every live process published on this process's device
    (:class:`DeviceMemory`), device-wide as ACL answers it."""

    def __init__(self) -> None:
        self._thread = threading.local()
        self.abnormal: set = set()  # device ids lost in this process
        self.rt = types.SimpleNamespace(
            get_last_error=self.get_last_error,
            peek_at_last_error=self.peek_at_last_error,
            query_device_status=self.query_device_status,
            get_mem_info=self.get_mem_info,
        )

    def record(self, code: int) -> None:
        """A runtime call of this thread failed with ``code``."""
        self._thread.last = code

    def peek_at_last_error(self, level: int) -> int:
        return getattr(self._thread, "last", 0)

    def get_last_error(self, level: int) -> int:
        code, self._thread.last = getattr(self._thread, "last", 0), 0
        return code

    def query_device_status(self, device_id: int) -> Tuple[int, int]:
        return int(device_id in self.abnormal), 0

    def get_mem_info(self, attr: int) -> Tuple[int, int, int]:
        if attr != 1:  # aclrtMemAttr: ACL_HBM_MEM is 1; this device has no DDR of its own
            return 0, 0, 0
        used = MEMORY.device_wide()
        return max(0, DEVICE_BYTES - used), DEVICE_BYTES, 0


ACL = SimulatedAcl()


class DeviceMemory:
    """Device memory of this process's simulated sessions, allocated as ais_bench allocates it (Yanguan619/
    aclruntime @8da7f645, ``backend/``): the model's weights for the life of the session (the OM's size; the ONNX's
    here), and per call the inputs (``PyInferenceSession.cpp:398-420`` ``CopyMemory2DeviceMemory`` per feed, freed
    after the call) and the outputs at their reserved sizes (``ModelInferenceProcessor.cpp:148-175``
    ``CreateOutMemoryData``: ``customOutTensorSize_`` or the OM's size each), released when the call's tensors
    are. A failed call never frees its inputs (``PyInferenceSession.cpp:414-420`` throws before
    ``MemoryHelper::Free``): they stay allocated until the process ends.

    As ``npu-smi info`` lists each process's device memory on a box, every change is published to
    ``<lock folder>/memory/<pid>.json`` (:func:`device_memory_of`), so a supervisor reads its workers' figures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resident = 0  # weights of open sessions + inputs leaked by failed calls
        self.leaked = 0
        self.peak = 0  # resident + the largest call's transient allocations
        self.path: Optional[Path] = None  # where this process publishes its figures
        self.device = 0

    def publish_to(self, lock_dir: Path, device_id: int) -> None:
        self.path, self.device = Path(lock_dir) / "memory" / f"{os.getpid()}.json", physical_npu(device_id)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _changed(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        figures = {"npu": self.device, "bytes": self.resident, "peak_bytes": self.peak, "leaked_bytes": self.leaked}
        tmp.write_text(json.dumps(figures))
        os.replace(tmp, self.path)

    def device_wide(self) -> int:
        """Bytes in use on this process's device by every live process that published its figures (this one's
        own resident bytes where it publishes nothing)."""
        if self.path is None:
            return self.resident
        used = 0
        for path in self.path.parent.glob("*.json"):
            try:
                pid, figures = int(path.stem), json.loads(path.read_text())
                os.kill(pid, 0)  # a process that ended has freed its device memory
            except (OSError, ValueError):
                continue
            used += figures["bytes"] if figures.get("npu") == self.device else 0
        return used

    def hold(self, nbytes: int) -> None:
        with self.lock:
            self.resident += nbytes
            self.peak = max(self.peak, self.resident)
            self._changed()

    def call(self, nbytes: int) -> None:
        """A call's transient allocations (inputs + reserved outputs), freed when it returns."""
        with self.lock:
            if self.resident + nbytes > self.peak:
                self.peak = self.resident + nbytes
                self._changed()

    def leak(self, nbytes: int) -> None:
        with self.lock:
            self.resident += nbytes
            self.leaked += nbytes
            self.peak = max(self.peak, self.resident)
            self._changed()


def device_memory_of(pids: List[int], lock_dir: Optional[Path] = None) -> Dict[int, Dict[str, int]]:
    """What the simulated device says of each process's device memory (``bytes`` between calls, ``peak_bytes``,
    ``leaked_bytes``, ``npu``), for those of ``pids`` that published any."""
    folder = Path(lock_dir or default_lock_dir()) / "memory"
    out = {}
    for pid in pids:
        try:
            out[pid] = json.loads((folder / f"{pid}.json").read_text())
        except (OSError, ValueError):
            continue
    return out


MEMORY = DeviceMemory()


def _lose_device_on_cue(device_id: int) -> None:
    """The device-lost fault (``$PADDLEX_NPU_SIM_DEVICE_LOST=N``): this process's Nth device call and every later
    one fail as ais_bench's ``infer`` fails on a lost context: ``RuntimeError("[-1][ACL: general failure] ")``
    (Yanguan619/aclruntime @8da7f645 ``model_process.cpp:1196-1203``, ``ModelInferenceProcessor.cpp:630-634``,
    ``ErrorCode.cpp:98-104``), the ACL code on stdout only (``ACLERR_LOG(aclGetRecentErrMsg())``) and through
    :data:`ACL`'s queries on the calling thread."""
    call, lost_at = next(_CALLS), envs.sim_device_lost()
    if lost_at is not None and call >= lost_at:
        ACL.record(LOST_CODE)
        ACL.abnormal.add(device_id)
        raise acl_failure(
            f"aclmdlExecute failed with {LOST_CODE} on simulated npu:{device_id} at call {call} of this process "
            f"({envs.SIM_DEVICE_LOST.name}={lost_at})"
        )


# ---- the session ---------------------------------------------------------------------------------------------


class SimulatedSession(InferSession):
    """The reference ``InferSession`` contract on the simulated device (see the module's docstring)."""

    def __init__(
        self,
        device_id: int,
        model_path: str,
        acl_json_path: Optional[str] = None,
        debug: bool = False,
        loop: int = 1,
        *,
        onnx_path: Optional[str] = None,
        manifest: object = None,
        simulation: Optional[SimulationConfig] = None,
        task: Optional[str] = None,
    ) -> None:
        super().__init__(device_id, model_path, acl_json_path, debug, loop, onnx_path=onnx_path, manifest=manifest)
        sim = simulation or SimulationConfig()
        default = default_cost(task)
        given = {k: getattr(sim, k) for k in ("malloc_us", "free_us", "memcpy_us", "aicpu_us")}
        self.cost = CostModel(
            default.base_ms if sim.base_ms is None else sim.base_ms,
            default.ms_per_melem if sim.ms_per_melem is None else sim.ms_per_melem,
            default.pcie_gbps if sim.pcie_gbps is None else sim.pcie_gbps,
            **{k: v for k, v in given.items() if v is not None},
        )
        self.graph: Optional[GraphProfile] = None  # read from the ONNX at the first call (its input shapes)
        key = model_key(self.onnx_path) + ("" if self.precision == "fp32" else f"-{self.precision}")
        self.store = ReplayStore(Path(sim.store or default_store()) / key)  # fp16 outputs never replay as fp32
        self.device = device_lock(Path(sim.lock_dir or default_lock_dir()), device_id)
        self.device_intervals: collections.deque = collections.deque(maxlen=4096)  # monotonic() (start, end)
        self._own = SimStats()
        self._model = Path(self.onnx_path).parent.name
        self._weights = os.path.getsize(self.onnx_path)  # the OM's weights stand in: the ONNX's size
        MEMORY.publish_to(Path(sim.lock_dir or default_lock_dir()), device_id)
        MEMORY.hold(self._weights)
        with _STATS_LOCK:
            _MODELS.setdefault(
                self._model,
                {
                    "task": task or "",
                    "base_ms": self.cost.base_ms,
                    "ms_per_melem": self.cost.ms_per_melem,
                    "pcie_gbps": self.cost.pcie_gbps,
                    "malloc_us": self.cost.malloc_us,
                    "free_us": self.cost.free_us,
                    "memcpy_us": self.cost.memcpy_us,
                    "aicpu_us": self.cost.aicpu_us,
                    "hybrid": "",
                    "if_nodes": 0,
                    "aicpu_nodes": 0,
                    "buffers": 0,
                    "calls": 0,
                    "elements": 0,
                    **dict.fromkeys(_MODEL_SUMS, 0),
                },
            )

    def _profile(self, feed: Dict[str, np.ndarray]) -> GraphProfile:
        """The graph's :class:`GraphProfile`, read once, at the first call (a static OM's shapes are its)."""
        if self.graph is None:
            shapes = {name: tuple(a.shape) for name, a in feed.items()}
            soc = getattr(self.manifest, "soc_version", None)
            self.graph = graph_profile(self.onnx_path, shapes, self.built_mode == "dymshape", soc)
            with _STATS_LOCK:
                m = _MODELS[self._model]
                m.update(hybrid=self.graph.hybrid, if_nodes=self.graph.if_nodes, aicpu_nodes=len(self.graph.aicpu))
        return self.graph

    def _compute(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        graph = self._profile(feed)
        inputs = sum(a.nbytes for a in feed.values())
        MEMORY.call(inputs + sum(self._custom_sizes or [d.size for d in self._om.output_descs()]))
        try:
            _lose_device_on_cue(self.device_id)
        except RuntimeError:
            MEMORY.leak(inputs)  # the failed call's inputs are never freed on the device
            raise
        c0 = time.thread_time()  # the simulator's own work as CPU time: a busy machine does not inflate it
        digest = feed_digest(feed)
        outputs = self.store.get(digest, len(self._om.output_names))
        c1, t1 = time.thread_time(), time.perf_counter()
        computed = outputs is None
        if outputs is None:
            outputs = [np.ascontiguousarray(o) for o in self._om.run(feed)]
            self.store.put(digest, outputs)
        t2 = time.perf_counter()
        elements = sum(int(a.size) for a in feed.values())
        bytes_in, bytes_out = sum(a.nbytes for a in feed.values()), sum(o.nbytes for o in outputs)
        cost = self.cost.call(elements, bytes_in, bytes_out, len(feed), len(outputs), graph)
        start, end = self.device.reserve(cost.device_ms / 1000.0)
        self.device_intervals.append((start, end))
        deltas = {
            "calls": 1,
            "replayed": int(not computed),
            "computed": int(computed),
            "device_ms": (end - start) * 1000.0,
            "replay_ms": (c1 - c0) * 1000.0,
            "compute_ms": (t2 - t1) * 1000.0,
            "transfer_ms": cost.transfer_ms,
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "host_syncs": cost.host_syncs,
            "mallocs": cost.mallocs,
        }
        parts = {"buffer_ms": cost.buffer_ms, "sync_ms": cost.sync_ms, "aicpu_ms": cost.aicpu_ms}
        _count(self._model, elements, parts, **deltas)
        for key, value in deltas.items():
            setattr(self._own, key, getattr(self._own, key) + value)
        gil_sleep_until(end)  # last: the bookkeeping is done before, so nothing runs between the wait and return
        return outputs

    def free_resource(self) -> None:
        if not self._freed and self._own.calls:
            s = self._own
            logger.info(
                "simulated npu:%d %s: %d calls, %d replayed, %d computed (inputs never seen), device time %.1f ms",
                self.device_id,
                Path(self.onnx_path).parent.name,
                s.calls,
                s.replayed,
                s.computed,
                s.device_ms,
            )
        if not self._freed:
            MEMORY.hold(-self._weights)
        self.store.close()
        super().free_resource()

    def __repr__(self) -> str:
        return f"<simulated InferSession {os.path.basename(self.onnx_path)} npu:{self.device_id} {self.cost}>"
