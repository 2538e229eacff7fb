"""The simulated device: runtime ``simulated``, an NPU stand-in for throughput work on a CPU machine.

It is the CPU reference :class:`~.reference.InferSession` (same contract, same checks, same errors) with the
model replaced by a device model:

- **outputs are real**: the reference runtime's outputs, computed once (a *recording* pass) and stored under a
  digest of the inputs (SHA-1 of every input's name, dtype, shape and bytes) in a replay store
  (``$PADDLEX_NPU_SIM_STORE``, default ``~/.cache/paddlex_npu/simulated/<model sha256>/``). A replayed call
  spends no CPU on the model, only the digest and mapping the stored outputs (counted as ``replay_ms``). An
  input never seen is computed with ONNX Runtime, stored, and counted (:func:`stats` ``computed``; logged when
  the session is freed);
- **device time** comes from a cost model, ``base_ms + ms_per_melem * (input elements / 1e6)`` (see
  :func:`default_cost` for how the defaults follow from the published 310P3 figures);
- **the GIL is held** for that time, as ais_bench's bindings hold it for the whole device call: the wait is
  libc ``nanosleep`` called through :class:`ctypes.PyDLL` (which keeps the GIL), so no other Python thread of
  the process runs and no CPU is burnt;
- **one device is one device**: device time is serialised across all processes that use the same device id
  and lock folder (``$PADDLEX_NPU_SIM_LOCKS``): a FIFO of slots kept in one lock file per device id
  (:class:`DeviceLock`); a call waits for its slot and for its device time with the GIL held, as a process
  waiting for a busy NPU does.

Not modelled: host-device copies apart from their share of the cost model, device memory limits, streams,
fp16 numerics (outputs are the reference runtime's fp32), warm-up/compile time of a real OM.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import fcntl
import hashlib
import os
import shutil
import struct
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..config import SimulationConfig
from ..errors import ConfigError
from ..log import logger
from .reference import InferSession

STORE_ENV = "PADDLEX_NPU_SIM_STORE"
LOCKS_ENV = "PADDLEX_NPU_SIM_LOCKS"

# Cost model defaults, from the 310P3 OM figures in the reference notes (ModelZoo, model-only throughput):
# - ch_PP-OCRv3_rec, input 3x48x320 (46,080 elements per image): 1547.8 images/s at batch 1 (0.6461 ms per
#   call) and 4845.8 at batch 16 (3.3018 ms per call of 737,280 elements). The line through both points:
#   3.842 ms per million elements, 0.469 ms per call.
# - ch_PP-OCRv3_det, 320.55 images/s at batch 1 (3.1196 ms per call), taken at 3x736x1280 (ICDAR2015's
#   720x1280 images on the smallest of its 736..1536 gears; the README's exact size is an assumption): with
#   the same per-call base, 0.938 ms per million elements. Dense image models (detection, segmentation) take
#   this rate, every other model the recognition rate (the higher one).
BASE_MS = 0.469
SEQUENCE_MS_PER_MELEM = 3.842
DENSE_MS_PER_MELEM = 0.938
_DENSE_TASKS = ("Det", "Seg", "Layout")


@dataclass(frozen=True)
class CostModel:
    """Device time of one call: ``base_ms + ms_per_melem * elements / 1e6`` (elements of all inputs)."""

    base_ms: float
    ms_per_melem: float

    def device_ms(self, elements: int) -> float:
        return self.base_ms + self.ms_per_melem * elements / 1e6


def default_cost(task: Optional[str] = None) -> CostModel:
    """The default cost model for a PaddleX predictor class name (``TextDetPredictor``...; None: unknown)."""
    dense = task is not None and any(t in task for t in _DENSE_TASKS)
    return CostModel(BASE_MS, DENSE_MS_PER_MELEM if dense else SEQUENCE_MS_PER_MELEM)


# ---- the C calls that keep the GIL ---------------------------------------------------------------------------


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_LIBC = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held during each call
_LIBC.nanosleep.argtypes = [ctypes.POINTER(_Timespec), ctypes.POINTER(_Timespec)]
_LIBC.flock.argtypes = [ctypes.c_int, ctypes.c_int]


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
                raw = os.pread(self._fd, 8, 0)
                busy_until = struct.unpack("d", raw)[0] if len(raw) == 8 else 0.0
                start = max(monotonic(), busy_until)
                os.pwrite(self._fd, struct.pack("d", start + seconds), 0)
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


VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"


def physical_npu(device_id: int) -> int:
    """The physical NPU behind logical ``device_id``: the id-th entry of ``$ASCEND_RT_VISIBLE_DEVICES`` when it
    is set (as Ray and container runtimes set it: inside a Ray actor its one chip is device 0), else the id."""
    visible = [v.strip() for v in os.environ.get(VISIBLE_ENV, "").split(",") if v.strip()]
    if not visible:
        return device_id
    if not 0 <= device_id < len(visible) or not visible[device_id].isdigit():
        raise ConfigError(
            f"npu:{device_id} is not among the devices {VISIBLE_ENV}={os.environ[VISIBLE_ENV]} makes visible: "
            f"give a device id below {len(visible)} (ids are logical after {VISIBLE_ENV}), or unset it"
        )
    return int(visible[device_id])


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
    return Path(os.environ.get(STORE_ENV) or Path.home() / ".cache" / "paddlex_npu" / "simulated")


def default_lock_dir() -> Path:
    return Path(os.environ.get(LOCKS_ENV) or Path(tempfile.gettempdir()) / f"paddlex_npu_sim-{os.getuid()}")


def feed_digest(feed: Dict[str, np.ndarray]) -> str:
    """SHA-1 of every input's name, dtype, shape and bytes."""
    h = hashlib.sha1()
    for name, arr in feed.items():
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return h.hexdigest()


class ReplayStore:
    """Outputs by input digest: a folder per call with one ``.npy`` per output, written atomically (processes
    may record the same input at once). Replayed outputs are private copy-on-write maps of those files: the
    model's outputs are read from the page cache as the pipeline uses them, with no copy up front."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, digest: str) -> Path:
        return self.folder / digest[:2] / digest

    def get(self, digest: str, count: int) -> Optional[List[np.ndarray]]:
        path = self._path(digest)
        try:
            return [np.asarray(np.load(path / f"{i}.npy", mmap_mode="c")) for i in range(count)]
        except FileNotFoundError:
            return None

    def put(self, digest: str, outputs: List[np.ndarray]) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.mkdir(exist_ok=True)
        for i, out in enumerate(outputs):
            np.save(tmp / f"{i}.npy", out)
        try:
            os.rename(tmp, path)
        except OSError:  # recorded meanwhile by another process: same outputs, keep theirs
            shutil.rmtree(tmp, ignore_errors=True)


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


_STATS = SimStats()
_STATS_LOCK = threading.Lock()


def stats() -> Dict[str, float]:
    """A snapshot of this process's counters: calls, replayed, computed (inputs never seen), device_ms, and the
    simulation's own host time: replay_ms (digest + load), compute_ms (ONNX Runtime on inputs never seen)."""
    with _STATS_LOCK:
        return asdict(_STATS)


def _count(**deltas: float) -> None:
    with _STATS_LOCK:
        for key, value in deltas.items():
            setattr(_STATS, key, getattr(_STATS, key) + value)


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
        self.cost = CostModel(
            default.base_ms if sim.base_ms is None else sim.base_ms,
            default.ms_per_melem if sim.ms_per_melem is None else sim.ms_per_melem,
        )
        self.store = ReplayStore(Path(sim.store or default_store()) / model_key(self.onnx_path))
        self.device = device_lock(Path(sim.lock_dir or default_lock_dir()), device_id)
        self.device_intervals: collections.deque = collections.deque(maxlen=4096)  # monotonic() (start, end)
        self._own = SimStats()

    def _compute(self, feed: Dict[str, np.ndarray]) -> List[np.ndarray]:
        t0 = time.perf_counter()
        digest = feed_digest(feed)
        outputs = self.store.get(digest, len(self._om.output_names))
        t1 = time.perf_counter()
        computed = outputs is None
        if outputs is None:
            outputs = [np.ascontiguousarray(o) for o in self._om.run(feed)]
            self.store.put(digest, outputs)
        t2 = time.perf_counter()
        device_ms = self.cost.device_ms(sum(int(a.size) for a in feed.values()))
        start, end = self.device.run(device_ms / 1000.0)
        self.device_intervals.append((start, end))
        deltas = {
            "calls": 1,
            "replayed": int(not computed),
            "computed": int(computed),
            "device_ms": (end - start) * 1000.0,
            "replay_ms": (t1 - t0) * 1000.0,
            "compute_ms": (t2 - t1) * 1000.0,
        }
        _count(**deltas)
        for key, value in deltas.items():
            setattr(self._own, key, getattr(self._own, key) + value)
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
        super().free_resource()

    def __repr__(self) -> str:
        return f"<simulated InferSession {os.path.basename(self.onnx_path)} npu:{self.device_id} {self.cost}>"
