"""The pipelined executor: a PaddleX pipeline over many inputs with K worker processes per device.

The ais_bench bindings hold the GIL for the whole device call, so within one process nothing overlaps the NPU;
processes do. Each worker (:mod:`.worker`, started with ``spawn``) owns a pipeline and its sessions on one
device; device time of the workers of one device is serialised by the device (and by the simulated device).

- inputs are read lazily and dispatched as workers free up (each worker holds at most ``prefetch`` inputs: the
  one it runs and the next, so it never waits for the parent);
- results are yielded in input order; at most ``max_pending`` inputs are between dispatch and yield, so memory
  does not grow with the input count;
- an input whose pipeline call raises comes back as an :class:`ItemResult` with ``error`` set; the rest go on;
- a worker that dies (crash, killed) is replaced; the inputs it held are retried once on another worker, then
  reported as errors, never dropped; replacements are limited per time window (:class:`~.pool.RestartBudget`,
  default 2 per worker per 10 minutes), so a long-lived executor survives rare crashes for ever;
- with ``timeout``, an input that runs longer is reported as an error and its worker replaced (the ordered
  stream goes on);
- Ctrl-C (``KeyboardInterrupt`` in the parent) stops every worker and re-raises; workers ignore SIGINT.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .. import envs
from ..errors import ExecutorError
from ..log import logger
from .pool import RestartBudget
from .worker import Done, Fatal, Ready, Task, WorkerSpec, thread_env, worker_main


@dataclass
class ItemError:
    """Why one input failed: the exception's type and text in the worker, and its traceback."""

    type: str
    message: str
    traceback: str = ""
    category: str = "runtime"  # paddlex_npu.errors.category_of the exception (input, config, device, runtime)


@dataclass
class ItemResult:
    """One input's outcome, in input order: ``results`` (one per result PaddleX yields for the input, after the
    transform) or ``error``; which worker ran it, and its timings (wall, CPU, simulated device)."""

    index: int
    input: Any
    results: Optional[List[Any]] = None
    error: Optional[ItemError] = None
    worker: int = 0
    device_id: int = 0
    attempts: int = 1
    timing: Dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Task:
    epoch: int
    index: int
    item: Any
    attempts: int = 1
    kwargs: Optional[Dict[str, Any]] = None


@dataclass
class _Worker:
    process: Any
    conn: Any
    device_id: int
    ready: bool = False
    pid: int = 0
    inflight: Deque[_Task] = field(default_factory=collections.deque)
    busy_since: float = 0.0  # when the input at the head of inflight started
    timed_out: bool = False


class ParallelExecutor:
    """K worker processes per device, each with its own pipeline; :meth:`map` runs inputs through them.

    ``pipeline``: a PaddleX pipeline name, YAML path or config dict. ``create_kwargs``: ``create_pipeline``
    arguments (default: the hpi ``om`` backend); each worker gets ``device="npu:<id>"`` and that ``device_id``.
    ``runtime``: ``PADDLEX_NPU_RUNTIME`` for the workers (``ais_bench``, ``reference``, ``simulated``).
    ``transform``: a picklable function applied to each PaddleX result in the worker (default: plain data,
    ``result.json["res"]``). ``stages``: each item's ``timing`` also holds its pre-processing, model and
    post-processing seconds. ``timeout``: seconds one input may run; its worker is then killed and replaced and
    the input reported as an error (``RequestTimeout``), not retried. ``restarts``: how many dead workers are
    replaced per time window (default: 2 per worker per 10 minutes, :class:`~.pool.RestartBudget`). Workers start
    in the constructor; it returns when all are ready.
    """

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
        prefetch: int = 2,
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
        self._specs = {
            d: WorkerSpec(pipeline, d, create_kwargs, dict(predict_kwargs or {}), transform, worker_env, stages)
            for d in devices
        }
        self.size = len(devices) * workers_per_device
        self.prefetch = max(1, prefetch)
        self.max_pending = max_pending or 4 * self.size
        self.retries = retries
        self.restarts = restarts or RestartBudget(2 * self.size)
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")
        self._workers: List[_Worker] = []
        self._epoch = 0
        self._closed = False
        try:
            for d in devices:
                for _ in range(workers_per_device):
                    self._workers.append(self._spawn(d))
            self._wait_ready(start_timeout)
        except BaseException:
            self.close(force=True)
            raise

    # ---- workers ---------------------------------------------------------------------------------------
    @property
    def worker_pids(self) -> List[int]:
        return [w.pid for w in self._workers if w.ready]

    def _spawn(self, device_id: int) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main, args=(child, self._specs[device_id]), daemon=True, name=f"paddlex-npu:{device_id}"
        )
        process.start()
        child.close()
        return _Worker(process, parent, device_id)

    def _wait_ready(self, timeout: float) -> None:
        starting = [w for w in self._workers if not w.ready]
        while starting:
            if not wait([w.conn for w in starting], timeout=timeout):
                raise ExecutorError(f"{len(starting)} worker(s) did not load the pipeline within {timeout:.0f} s")
            for w in list(starting):
                if w.conn.poll():
                    self._on_start_message(w)
                    starting.remove(w)

    def _on_start_message(self, w: _Worker) -> None:
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            w.process.join(5)
            msg = Fatal(
                0,
                f"the worker exited with code {w.process.exitcode} while loading; its error is printed above (if "
                "it is Python's 'bootstrapping phase' error, or paddlex-npu's about importing the main module: the "
                'script starts the executor at import; put that code under if __name__ == "__main__":)',
            )
        if isinstance(msg, Fatal):
            raise ExecutorError(f"a worker on npu:{w.device_id} could not create the pipeline:\n{msg.text}")
        w.ready, w.pid = True, msg.pid

    def _replace(self, dead: _Worker) -> None:
        self._workers.remove(dead)
        dead.conn.close()
        dead.process.join(timeout=5)
        if self.restarts.take():
            self._workers.append(self._spawn(dead.device_id))
            logger.warning(
                "executor: worker %d on npu:%d exited (code %s); a new worker is starting",
                dead.pid,
                dead.device_id,
                dead.process.exitcode,
            )

    # ---- running -----------------------------------------------------------------------------------------
    def map(self, inputs: Iterable[Any], predict_kwargs: Optional[Dict[str, Any]] = None) -> Iterator[ItemResult]:
        """Run every input; yield one :class:`ItemResult` per input, in input order. ``predict_kwargs`` (this
        call's ``pipeline.predict`` keywords) are added to the executor's own."""
        if self._closed:
            raise ExecutorError("the executor is closed")
        self._epoch += 1
        kwargs = dict(predict_kwargs) if predict_kwargs else None
        with _ctrl_c_remembered() as pressed:
            run = _Run(self, self._epoch, iter(inputs), pressed, kwargs)
            try:
                yield from run.results()  # if the caller stops early, results in flight are dropped by epoch
            except BaseException as exc:  # Ctrl-C, or an error of the input iterable: stop the workers
                if isinstance(exc, GeneratorExit):
                    raise
                self.close(force=True)
                raise

    def close(self, force: bool = False, timeout: float = 30.0) -> None:
        """Stop the workers: each finishes its input and exits (``force``: terminated at once). A second Ctrl-C
        while closing still leaves no worker behind."""
        self._closed = True
        workers, self._workers = self._workers, []
        try:
            if not force:
                for w in workers:
                    try:
                        w.conn.send(None)
                    except OSError:
                        pass
                for w in workers:
                    w.process.join(timeout)
        finally:
            _stop_all(workers)

    def __enter__(self) -> ParallelExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(force=exc[0] is not None)


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


def _stop_all(workers: List[_Worker]) -> None:
    """Terminate every worker still alive (signals first, all at once, then joins); killed if they linger."""
    try:
        for w in workers:
            if w.process.is_alive():
                w.process.terminate()
        for w in workers:
            w.process.join(5)
    finally:
        for w in workers:
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5)
            w.conn.close()


class _Run:
    """The state of one :meth:`ParallelExecutor.map` call."""

    def __init__(
        self,
        ex: ParallelExecutor,
        epoch: int,
        inputs: Iterator[Any],
        pressed: threading.Event,
        kwargs: Optional[Dict[str, Any]],
    ) -> None:
        self.ex, self.epoch, self.inputs, self.pressed, self.kwargs = ex, epoch, inputs, pressed, kwargs
        self.next_in = self.next_out = 0
        self.exhausted = False
        self.retry: Deque[_Task] = collections.deque()
        self.done: Dict[int, ItemResult] = {}
        self.items: Dict[int, Any] = {}

    def results(self) -> Iterator[ItemResult]:
        while True:
            if self.pressed.is_set():  # a Ctrl-C whose KeyboardInterrupt was lost (raised inside a finalizer)
                raise KeyboardInterrupt
            self._dispatch()
            while self.next_out in self.done:
                self.items.pop(self.next_out, None)
                yield self.done.pop(self.next_out)
                self.next_out += 1
            if self.exhausted and self.next_out == self.next_in:
                return
            self._receive()

    def _next_task(self) -> Optional[_Task]:
        if self.retry:
            return self.retry.popleft()
        if self.exhausted or self.next_in - self.next_out >= self.ex.max_pending:
            return None
        try:
            item = next(self.inputs)
        except StopIteration:
            self.exhausted = True
            return None
        task = _Task(self.epoch, self.next_in, item, kwargs=self.kwargs)
        self.items[task.index] = item
        self.next_in += 1
        return task

    def _free_worker(self) -> Optional[_Worker]:
        """The least busy ready worker that can take one more input."""
        ready = [w for w in self.ex._workers if w.ready and len(w.inflight) < self.ex.prefetch]
        return min(ready, key=lambda w: len(w.inflight)) if ready else None

    def _dispatch(self) -> None:
        """Send inputs while a worker has room. A busy worker takes a second input only if it is small (a path
        or URL), so that a send never blocks on the pipe of a worker that is still running."""
        while True:
            if not self.ex._workers:
                raise ExecutorError(
                    f"every worker died and the restart budget is spent; inputs {self.next_out}..{self.next_in - 1} "
                    "were not completed (see the errors above)"
                )
            worker = self._free_worker()
            task = self._next_task() if worker is not None else None
            if task is None:
                return
            if worker.inflight and not isinstance(task.item, (str, os.PathLike)):
                idle = [w for w in self.ex._workers if w.ready and not w.inflight]
                if not idle:
                    self.retry.appendleft(task)
                    return
                worker = idle[0]
            if not worker.inflight:
                worker.busy_since = time.monotonic()
            worker.inflight.append(task)
            worker.conn.send(Task((task.epoch, task.index), task.item, task.kwargs))

    def _receive(self) -> None:
        """Wait for a worker's message or death and handle it (a dead worker's last messages first)."""
        by_handle: Dict[Any, Tuple[_Worker, bool]] = {}
        for w in self.ex._workers:
            by_handle[w.conn] = (w, False)
            by_handle[w.process.sentinel] = (w, True)
        self._expire()
        for handle in wait(list(by_handle), timeout=0.5):  # wakes up to see a remembered Ctrl-C
            w, is_sentinel = by_handle[handle]
            if w not in self.ex._workers:
                continue
            if not is_sentinel:
                if not self._message(w):
                    self._crashed(w)
                continue
            while w in self.ex._workers and w.conn.poll() and self._message(w):
                pass
            if w in self.ex._workers:
                self._crashed(w)

    def _message(self, w: _Worker) -> bool:
        """Handle one message from ``w``; False if its pipe is closed (it died)."""
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            return False
        if isinstance(msg, Fatal):
            logger.error("executor: a replacement worker on npu:%d failed to load:\n%s", w.device_id, msg.text)
            self.ex._workers.remove(w)
            w.process.join(timeout=5)
            return True
        if isinstance(msg, Ready):
            w.ready, w.pid = True, msg.pid
            return True
        assert isinstance(msg, Done), msg
        (epoch, index), ok, payload, timing = msg.key, msg.ok, msg.payload, msg.timing
        task = w.inflight.popleft()
        w.busy_since = time.monotonic()
        if epoch == self.epoch:
            result = ItemResult(index, self.items.get(index), worker=w.pid, device_id=w.device_id)
            result.attempts, result.timing = task.attempts, timing
            if ok:
                result.results = payload
            else:
                result.error = ItemError(*payload)
            self.done[index] = result
        return True

    def _expire(self) -> None:
        """Kill a worker whose input has run over the executor's timeout (its sentinel then reports it)."""
        if not self.ex.timeout:
            return
        now = time.monotonic()
        for w in self.ex._workers:
            if w.inflight and not w.timed_out and now - w.busy_since > self.ex.timeout:
                logger.warning(
                    "executor: an input ran over %.3g s on worker %d; it is replaced", self.ex.timeout, w.pid
                )
                w.timed_out = True
                w.process.kill()

    def _crashed(self, w: _Worker) -> None:
        """``w`` died: the input it was running is retried once, or reported; the inputs queued behind it (never
        started) go back to the queue as they were. A replacement worker starts."""
        held = [t for t in w.inflight if t.epoch == self.epoch]
        w.process.join(timeout=5)
        code = w.process.exitcode
        if held and w.timed_out:
            task = held.pop(0)
            error = ItemError("RequestTimeout", f"the input ran over the executor's timeout of {self.ex.timeout:g} s")
            self.done[task.index] = ItemResult(
                task.index, task.item, error=error, worker=w.pid, device_id=w.device_id, attempts=task.attempts
            )
        elif held and held[0].attempts > self.ex.retries:
            task = held.pop(0)
            error = ItemError(
                "WorkerCrashed",
                f"the worker (pid {w.pid}, npu:{w.device_id}) exited with code {code} while running this input, "
                f"{task.attempts} time(s)",
            )
            self.done[task.index] = ItemResult(
                task.index, task.item, error=error, worker=w.pid, device_id=w.device_id, attempts=task.attempts
            )
        elif held:
            held[0].attempts += 1
        self.retry.extendleft(reversed(held))
        self.ex._replace(w)


def parallel(pipeline: Union[str, Dict[str, Any]], inputs: Iterable[Any], **options: Any) -> Iterator[ItemResult]:
    """Run ``pipeline`` over ``inputs`` with worker processes (see :class:`ParallelExecutor` for ``options``);
    yields one :class:`ItemResult` per input, in input order, then stops the workers."""
    with ParallelExecutor(pipeline, **options) as ex:
        yield from ex.map(inputs)
