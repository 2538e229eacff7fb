"""The ordered stream: a PaddleX pipeline over many inputs with K worker processes per device, the results in
input order. It is a window over the futures of the one supervised pool (:class:`~.pool.WorkerPool`), which
starts, watches and restarts the workers.

The ais_bench bindings hold the GIL for the whole device call, so within one process nothing overlaps the NPU;
processes do. Each worker (:mod:`.worker`, started with ``spawn``) owns a pipeline and its sessions on one
device; device time of the workers of one device is serialised by the device (and by the simulated device).

- inputs are read lazily and submitted to the pool; at most ``max_pending`` inputs are between submission and
  yield, so memory does not grow with the input count; results are yielded in input order;
- an input whose pipeline call raises comes back as an :class:`ItemResult` with ``error`` set (a
  :class:`~..errors.Failure`); the rest go on;
- a worker that dies (crash, killed) is replaced by the pool; the input it ran is retried once on another
  worker, then reported as an error (``WorkerCrashed``), never dropped; replacements are limited per time window
  (:class:`~.pool.RestartBudget`, default 2 per worker per 10 minutes), so a long-lived executor survives rare
  crashes for ever; a worker whose input hit a device-fatal error answers it and is replaced the same way;
- with ``timeout``, an input that runs longer is reported as an error (``RequestTimeout``) and its worker
  replaced (the ordered stream goes on);
- Ctrl-C (``KeyboardInterrupt`` in the parent) stops every worker and re-raises; workers ignore SIGINT.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import signal
import threading
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .. import envs
from ..errors import ExecutorError, Failure, PoolClosedError, WorkerStartError
from .pool import Outcome, RestartBudget, WorkerInfo, WorkerPool
from .worker import Hook, WorkerSpec, thread_env

ItemError = Failure  # why one input failed: type, message, traceback, category (the pool's one failure type)


@dataclass
class ItemResult:
    """One input's outcome, in input order: ``results`` (one per result PaddleX yields for the input, after the
    transform) or ``error``; which worker ran it, and its timings (wall, CPU, simulated device)."""

    index: int
    input: Any
    results: Optional[List[Any]] = None
    error: Optional[Failure] = None
    worker: int = 0
    device_id: int = 0
    attempts: int = 1
    timing: Dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


class ParallelExecutor:
    """K worker processes per device, each with its own pipeline; :meth:`map` runs inputs through them.

    ``pipeline``: a PaddleX pipeline name, YAML path or config dict. ``create_kwargs``: ``create_pipeline``
    arguments (default: the hpi ``om`` backend); each worker gets ``device="npu:<id>"`` and that ``device_id``.
    ``runtime``: ``PADDLEX_NPU_RUNTIME`` for the workers (``ais_bench``, ``reference``, ``simulated``).
    ``transform``: a picklable function applied to each PaddleX result in the worker (default: plain data,
    ``result.json["res"]``). ``stages``: each item's ``timing`` also holds its pre-processing, model and
    post-processing seconds. ``timeout``: seconds one input may run; its worker is then killed and replaced and
    the input reported as an error (``RequestTimeout``), not retried. ``retries``: how many times an input whose
    worker died runs again (default 1). ``restarts``: how many dead workers are replaced per time window (default:
    2 per worker per 10 minutes, :class:`~.pool.RestartBudget`). Workers start in the constructor; it returns when
    all are ready. This layer knows no pipeline: the hooks below (:class:`~.worker.WorkerSpec`'s) are set by a
    subclass in the layer that does (PaddleX's: :class:`paddlex_npu.paddlex.parallel.ParallelExecutor`).
    """

    factory: Optional[Hook] = None  # builds the pipeline in each worker
    meter: Optional[Hook] = None  # its counters join each input's timing
    stage_meter: Optional[Hook] = None  # the same with the stage times (``stages=True``)
    result: Optional[Hook] = None  # the transform when none is given

    def __init__(
        self,
        pipeline: Union[str, Dict[str, Any]],
        *,
        devices: Sequence[int] = (0,),
        workers_per_device: int = 1,
        create_kwargs: Optional[Dict[str, Any]] = None,
        predict_kwargs: Optional[Dict[str, Any]] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        runtime: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        max_pending: Optional[int] = None,
        retries: int = 1,
        start_timeout: float = 900.0,
        stages: bool = False,
        restarts: Optional[RestartBudget] = None,
        timeout: Optional[float] = None,
    ) -> None:
        if workers_per_device < 1 or not devices:
            raise ValueError(
                f"need at least one device and one worker per device (devices={list(devices)}, "
                f"workers_per_device={workers_per_device})"
            )
        _refuse_in_bootstrapping_worker()
        worker_env = {**thread_env(len(devices) * workers_per_device), **(env or {})}
        if runtime:
            worker_env[envs.RUNTIME.name] = runtime
        meter = self.stage_meter if stages else self.meter
        predict = dict(predict_kwargs or {})
        specs = {
            d: WorkerSpec(
                pipeline, d, create_kwargs, predict, transform or self.result, worker_env, self.factory, meter
            )
            for d in devices
        }
        self.size = len(devices) * workers_per_device
        self.max_pending = max_pending or 4 * self.size
        self.timeout = timeout
        self._closed = False
        self._pool = WorkerPool(
            specs,
            workers_per_device,
            max_queue=self.max_pending,
            timeout=timeout,
            retries=retries,
            restarts=restarts,
        )
        try:
            self._pool.start(start_timeout)
        except WorkerStartError as exc:
            raise ExecutorError(str(exc)) from None

    @property
    def restarts(self) -> RestartBudget:
        return self._pool.restarts

    @property
    def worker_pids(self) -> List[int]:
        """The pids of the loaded workers."""
        return self._pool.worker_pids

    @property
    def workers(self) -> List[WorkerInfo]:
        """The workers now, loaded or loading (pid, device)."""
        return self._pool.workers

    # ---- running -----------------------------------------------------------------------------------------
    def map(self, inputs: Iterable[Any], predict_kwargs: Optional[Dict[str, Any]] = None) -> Iterator[ItemResult]:
        """Run every input; yield one :class:`ItemResult` per input, in input order. ``predict_kwargs`` (this
        call's ``pipeline.predict`` keywords) are added to the executor's own."""
        if self._closed:
            raise ExecutorError("the executor is closed")
        kwargs = dict(predict_kwargs) if predict_kwargs else None
        window: Deque[Tuple[int, Any, Future]] = collections.deque()
        with _ctrl_c_remembered() as pressed:
            try:
                yield from self._stream(iter(inputs), kwargs, window, pressed)
            except BaseException as exc:  # Ctrl-C, or an error of the input iterable: stop the workers
                if not isinstance(exc, GeneratorExit):
                    self.close(force=True)
                raise
            finally:  # the caller stopped early: inputs not yet started never reach a worker
                for _, _, future in window:
                    future.cancel()

    def _stream(
        self, inputs: Iterator[Any], kwargs: Optional[Dict[str, Any]], window: Deque, pressed: threading.Event
    ) -> Iterator[ItemResult]:
        """Keep up to ``max_pending`` inputs submitted; yield the oldest as soon as it is done."""
        count, exhausted = 0, False
        while True:
            if pressed.is_set():  # a Ctrl-C whose KeyboardInterrupt was lost (raised inside a finalizer)
                raise KeyboardInterrupt
            while not exhausted and len(window) < self.max_pending:
                try:
                    item = next(inputs)
                except StopIteration:
                    exhausted = True
                    break
                window.append((count, item, self._submit(item, kwargs, count)))
                count += 1
            if not window:
                return
            index, item, future = window[0]
            try:
                outcome = future.result(timeout=0.5)  # wakes up to see a remembered Ctrl-C
            except FutureTimeout:
                continue
            except PoolClosedError as exc:
                raise ExecutorError(f"{exc}; inputs {index}..{count - 1} were not completed") from None
            except (CancelledError, Exception) as exc:  # the input could not be sent (it does not pickle)
                outcome = exc
            window.popleft()
            yield _item_result(index, item, outcome)

    def _submit(self, item: Any, kwargs: Optional[Dict[str, Any]], index: int) -> Future:
        try:
            return self._pool.submit(item, kwargs)
        except PoolClosedError as exc:
            raise ExecutorError(f"{exc}; inputs from {index} on were not started (see the errors above)") from None

    def close(self, force: bool = False, timeout: float = 30.0) -> None:
        """Stop the workers: each finishes its input and exits (``force``: terminated at once). A second Ctrl-C
        while closing still leaves no worker behind."""
        self._closed = True
        self._pool.close(wait=not force, timeout=timeout, force=force)

    def __enter__(self) -> ParallelExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(force=exc[0] is not None)


def _item_result(index: int, item: Any, outcome: Union[Outcome, BaseException]) -> ItemResult:
    """The :class:`ItemResult` of one input from its pool outcome."""
    if not isinstance(outcome, Outcome):
        return ItemResult(index, item, error=Failure.of(outcome, with_traceback=False))
    return ItemResult(
        index,
        item,
        outcome.results,
        outcome.failure,
        outcome.pid,
        outcome.device_id,
        outcome.attempts,
        outcome.timing,
    )


@contextlib.contextmanager
def _ctrl_c_remembered() -> Iterator[threading.Event]:
    """While :meth:`ParallelExecutor.map` runs, Ctrl-C raises ``KeyboardInterrupt`` at once as usual and is also
    remembered: Python ignores an exception raised inside a finalizer (``__del__``), and a Ctrl-C lost there is
    raised at the executor's next step instead. Only in the main thread, and only over Python's default handler."""
    pressed = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield pressed
        return

    def on_ctrl_c(signum: int, frame: Any) -> None:
        pressed.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _refuse_in_bootstrapping_worker() -> None:
    """A spawned worker imports the caller's main module again; a script that starts the executor at its top
    level would start it in every worker, each dying with Python's obscure bootstrapping error."""
    if getattr(mp.current_process(), "_inheriting", False):
        raise ExecutorError(
            "paddlex-npu's executor was started while a worker process was importing your main module (workers are "
            'spawned and import it again): put the code that calls parallel(), ParallelExecutor or a device="npu:0,1"'
            ' pipeline under if __name__ == "__main__":'
        )
