"""The one supervised worker pool, under ``paddlex-npu serve`` and the executor's ordered stream
(:mod:`.executor`): worker processes (:mod:`.worker`) that each hold one pipeline on one device, and a supervisor
thread that feeds them from a bounded queue and replaces the dead. :class:`Pool` is the interface the servers and
the executor depend on (Ray Serve's replica implements it over a pipeline in its own process).

- :meth:`WorkerPool.submit` returns a :class:`~concurrent.futures.Future` at once, or raises
  :class:`QueueFullError` when ``max_queue`` requests already wait (the server answers 503 + ``Retry-After``);
  a future cancelled while it waits (the client went away) never reaches a worker;
- each worker runs one request at a time; a request running longer than ``timeout`` seconds fails (a
  ``RequestTimeout`` failure, category ``timeout``) and its worker is killed and replaced;
- every request that reached a worker comes back as one flat :class:`Outcome`: its results, or a
  :class:`~..errors.Failure` and its :class:`~.worker.Cause`, with its timing, the worker's pid and device and
  the attempts; only admission raises (:class:`~..errors.QueueFullError`, :class:`~..errors.PoolClosedError`),
  and close fails what still waits (:class:`~..errors.PoolClosedError`);
- a worker that dies (crash, ``kill -9``, out of memory) is replaced; the request it was running is retried on
  another worker up to ``retries`` times (default once; ``0`` when inputs are not safe to run twice), then fails
  (a ``WorkerCrashed`` failure, :class:`~..errors.WorkerCrashedError`'s category); the other requests are not
  touched;
- a worker whose input hit a device-fatal error (:class:`~..errors.DeviceLostError`) answers it and exits; it is
  replaced on a fresh process like a crashed one, and the input is retried on another worker as a crashed one's
  is (the error is its answer only once the retries are spent);
- replacements are limited by a :class:`RestartBudget` (so many per time window, not per lifetime): a pipeline
  that crashes on every start does not restart for ever, and one that crashes rarely lives for ever;
- :attr:`WorkerPool.status` says whether every worker is loaded (readiness) and whether any is alive (liveness).
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing as mp
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Protocol

from ..errors import (
    Failure,
    PoolClosedError,
    QueueFullError,
    RequestTimeoutError,
    WorkerCrashedError,
    WorkerStartError,
)
from ..log import logger
from .worker import Cause, Done, Fatal, Ready, Task, WorkerSpec, worker_main

DEFAULT_RESTART_WINDOW = 600.0  # seconds


class RestartBudget:
    """At most ``limit`` worker restarts within any ``window`` seconds (a sliding window): a restart is allowed
    when fewer than ``limit`` happened in the last ``window`` seconds."""

    def __init__(
        self, limit: int, window: float = DEFAULT_RESTART_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if limit < 0 or window <= 0:
            raise ValueError(f"a restart budget needs limit >= 0 and window > 0, got {limit} and {window}")
        self.limit, self.window, self._clock = limit, window, clock
        self._times: Deque[float] = collections.deque()

    def _expire(self) -> None:
        now = self._clock()
        while self._times and now - self._times[0] >= self.window:
            self._times.popleft()

    def take(self) -> bool:
        """Use one restart; False when the window's restarts are spent."""
        self._expire()
        if len(self._times) >= self.limit:
            return False
        self._times.append(self._clock())
        return True

    @property
    def used(self) -> int:
        """Restarts within the current window."""
        self._expire()
        return len(self._times)


@dataclass(frozen=True)
class Outcome:
    """What became of one input: its ``results`` (one per result the pipeline yielded, transformed), or its
    ``failure`` and ``cause``; its ``timing`` (wall, CPU, the meter's counters); the ``pid`` and ``device_id`` of
    the worker that answered, and how many workers ran it (``attempts``)."""

    results: Optional[List[Any]]
    failure: Optional[Failure]
    cause: Optional[Cause]
    timing: Dict[str, float]
    pid: int
    device_id: int
    attempts: int

    @property
    def ok(self) -> bool:
        return self.failure is None

    @classmethod
    def of(cls, done: Done, pid: int, device_id: int, attempts: int) -> Outcome:
        """The outcome of a worker's answer."""
        return cls(done.results, done.failure, done.cause, done.timing, pid, device_id, attempts)


@dataclass(frozen=True)
class WorkerInfo:
    """One worker of a pool: its pid (0 while it loads), device, and whether it is loaded."""

    pid: int
    device_id: int
    ready: bool


@dataclass
class PoolStatus:
    size: int  # workers the pool should have
    ready: int  # workers loaded and taking requests
    starting: int  # replacements still loading
    busy: int
    queued: int
    restarts: int  # within the restart window
    closing: bool
    last_error: str = ""

    @property
    def alive(self) -> bool:
        """Liveness: some worker is ready or starting, and the pool takes requests."""
        return not self.closing and self.ready + self.starting > 0

    @property
    def all_ready(self) -> bool:
        """Readiness: every worker is loaded, none restarting, no drain."""
        return not self.closing and self.ready == self.size


class Pool(Protocol):
    """What ``serve``, Ray Serve and the executor need of a pool (:class:`WorkerPool`, Ray Serve's replica):
    ``submit`` returns a future of an :class:`Outcome` or raises :class:`~..errors.QueueFullError` /
    :class:`~..errors.PoolClosedError`; ``status`` is the pool's state now. Timeouts and retries are the
    implementation's own settings (a replica cannot kill its own device call; Ray Serve replaces it)."""

    size: int

    def submit(
        self,
        item: Any,
        kwargs: Optional[Dict[str, Any]] = None,
        transform_kwargs: Optional[Dict[str, Any]] = None,
    ) -> Future: ...

    @property
    def status(self) -> PoolStatus: ...

    def close(self, wait: bool = True) -> None: ...


@dataclass
class _Job:
    id: int
    item: Any
    kwargs: Optional[Dict[str, Any]]
    transform_kwargs: Optional[Dict[str, Any]]
    future: Future
    attempts: int = 0


@dataclass
class _Worker:
    device_id: int
    process: Any
    conn: Any
    ready: bool = False
    pid: int = 0
    job: Optional[_Job] = None
    started: float = 0.0  # when its job was sent
    ending: str = ""  # why it exits: its device context is lost (after answering), or it could not load


@dataclass
class _Counters:
    crashed: int = 0
    timed_out: int = 0
    retried: int = 0
    dropped: int = 0  # cancelled before reaching a worker
    refused: int = 0  # queue full


class WorkerPool:
    """``workers_per_device`` worker processes per device of ``specs`` (device id -> :class:`WorkerSpec`)."""

    def __init__(
        self,
        specs: Mapping[int, WorkerSpec],
        workers_per_device: int = 1,
        *,
        max_queue: int = 64,
        timeout: Optional[float] = None,
        retries: int = 1,
        restarts: Optional[RestartBudget] = None,
    ) -> None:
        """``timeout``: seconds one input may run (``None``: no limit); ``retries``: how many times an input whose
        worker died runs again; ``restarts``: the replacements allowed (default 2 per worker per 10 minutes)."""
        if workers_per_device < 1 or not specs:
            raise ValueError(f"need a device and at least one worker per device, got {workers_per_device}")
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.specs = dict(specs)
        self.size = len(self.specs) * workers_per_device
        self.workers_per_device = workers_per_device
        self.max_queue, self.timeout, self.retries = max_queue, timeout, retries
        self.restarts = restarts or RestartBudget(2 * self.size)
        self.counters = _Counters()
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Lock()
        self._queue: Deque[_Job] = collections.deque()
        self._workers: List[_Worker] = []
        self._ids = itertools.count()
        self._closing = False
        self._last_error = ""
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread: Optional[threading.Thread] = None

    # ---- life cycle ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 900.0) -> None:
        """Start every worker and wait until each has loaded its pipeline; a worker that cannot load raises
        :class:`WorkerStartError` naming its device and ending with the worker's error."""
        try:
            for device_id in self.specs:
                for _ in range(self.workers_per_device):
                    self._workers.append(self._start_worker(device_id))
            end = time.monotonic() + timeout
            for w in self._workers:
                left = end - time.monotonic()
                if not w.conn.poll(max(0.0, left)):
                    raise WorkerStartError(
                        f"a worker on npu:{w.device_id} did not create the pipeline within {timeout:.0f} s"
                    )
                msg = self._recv(w)
                if not isinstance(msg, Ready):
                    raise WorkerStartError(self._start_failure(w, msg))
                w.ready, w.pid = True, msg.pid
        except BaseException:
            self.close(force=True)
            raise
        self._thread = threading.Thread(target=self._supervise, name="paddlex-npu-pool", daemon=True)
        self._thread.start()

    def _start_failure(self, w: _Worker, msg: Any) -> str:
        if isinstance(msg, Fatal):
            head = f"a worker on npu:{w.device_id} could not create the pipeline: {msg.cause}"
            return f"{head}\nthe worker's traceback:\n{msg.text.rstrip()}\n{msg.cause}"
        w.process.join(5)
        return (
            f"a worker on npu:{w.device_id} could not create the pipeline: it exited with code {w.process.exitcode} "
            "while loading (killed, or out of memory?); its output is above (if it is Python's 'bootstrapping phase' "
            "error, or paddlex-npu's about importing the main module: the script starts the executor at import; "
            'put that code under if __name__ == "__main__":)'
        )

    def close(self, wait: bool = True, timeout: float = 30.0, force: bool = False) -> None:
        """Stop taking requests; waiting ones fail with :class:`PoolClosedError`; workers finish their request
        (``wait``) and exit, and are terminated if they linger (``force``: at once, e.g. after Ctrl-C). The workers
        are stopped whatever happens meanwhile (a second Ctrl-C)."""
        with self._lock:  # the supervisor starts no worker once closing is set
            self._closing = True
            queued, self._queue = list(self._queue), collections.deque()
            workers, self._workers = self._workers, []
        try:
            if not force:
                _ask_to_stop(workers, time.monotonic() + (timeout if wait else 2.0))
        finally:
            _stop_all(workers)
            self._wake()
            for job in queued + [w.job for w in workers if w.job is not None]:
                _fail(job.future, PoolClosedError("the pool is shutting down; retry on another server"))
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(5)
            for sock in (self._wake_r, self._wake_w):
                sock.close()

    # ---- requests -----------------------------------------------------------------------------------------
    def submit(
        self,
        item: Any,
        kwargs: Optional[Dict[str, Any]] = None,
        transform_kwargs: Optional[Dict[str, Any]] = None,
    ) -> Future:
        """A future of an :class:`Outcome` for ``pipeline.predict(item, **kwargs)`` in a worker. Raises
        :class:`QueueFullError` when ``max_queue`` requests already wait, :class:`PoolClosedError` when closing."""
        future: Future = Future()
        with self._lock:
            if self._closing:
                raise PoolClosedError("the pool is shutting down; retry on another server")
            if not any(w for w in self._workers):
                raise PoolClosedError(f"every worker died and none could be restarted: {self._last_error}")
            idle = sum(1 for w in self._workers if w.ready and w.job is None)
            if len(self._queue) >= self.max_queue + idle:  # first free the places of requests cancelled meanwhile
                kept = collections.deque(j for j in self._queue if j.attempts or not j.future.cancelled())
                self.counters.dropped += len(self._queue) - len(kept)
                self._queue = kept
            if len(self._queue) >= self.max_queue + idle:
                self.counters.refused += 1
                raise QueueFullError(
                    f"{len(self._queue)} requests are waiting for a worker (the server's --max-queue is "
                    f"{self.max_queue}): retry later or on another server"
                )
            job = _Job(next(self._ids), item, kwargs, transform_kwargs, future)
            self._queue.append(job)
        self._wake()
        return future

    @property
    def status(self) -> PoolStatus:
        with self._lock:
            return PoolStatus(
                size=self.size,
                ready=sum(1 for w in self._workers if w.ready),
                starting=sum(1 for w in self._workers if not w.ready),
                busy=sum(1 for w in self._workers if w.job is not None),
                queued=len(self._queue),
                restarts=self.restarts.used,
                closing=self._closing,
                last_error=self._last_error,
            )

    @property
    def workers(self) -> List[WorkerInfo]:
        """The pool's workers now, loaded or loading."""
        with self._lock:
            return [WorkerInfo(w.pid, w.device_id, w.ready) for w in self._workers]

    @property
    def worker_pids(self) -> List[int]:
        """The pids of the loaded workers."""
        return [w.pid for w in self.workers if w.ready]

    # ---- the supervisor -----------------------------------------------------------------------------------
    def _start_worker(self, device_id: int) -> _Worker:
        """Start one worker process for ``device_id`` (it loads its pipeline, then says :class:`~.worker.Ready`)."""
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main, args=(child, self.specs[device_id]), daemon=True, name=f"paddlex-npu:{device_id}"
        )
        process.start()
        child.close()
        return _Worker(device_id, process, parent)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):  # already awake (buffer full) or closed
            pass

    @staticmethod
    def _recv(w: _Worker) -> Any:
        try:
            return w.conn.recv()
        except (EOFError, OSError):
            return None

    def _supervise(self) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                self._dispatch()
                handles: Dict[Any, Any] = {self._wake_r: None}
                for w in self._workers:
                    handles[w.conn] = w
                    handles[w.process.sentinel] = w
                wait_for = self._next_deadline()
            try:
                fired = wait(list(handles), timeout=wait_for)
            except OSError:  # a handle closed under us (close() at the same time)
                continue
            with self._lock:
                if self._closing:
                    return
                for handle in fired:
                    w = handles[handle]
                    if w is None:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, OSError):
                            pass
                    elif w in self._workers:
                        self._on_worker(w)
                self._expire_timeouts()

    def _next_deadline(self) -> float:
        now, soonest = time.monotonic(), 1.0
        for w in self._workers:
            if w.job is not None and self.timeout:
                soonest = min(soonest, max(0.0, w.started + self.timeout - now))
        return soonest

    def _dispatch(self) -> None:
        for w in self._workers:
            if not (w.ready and w.job is None) or w.ending:
                continue
            while self._queue:
                job = self._queue.popleft()
                # A job put back after a failed send is already running: set_running once only (twice raises).
                if not job.future.running() and not job.future.set_running_or_notify_cancel():
                    self.counters.dropped += 1  # the client went away while it waited
                    continue
                job.attempts += 1
                try:
                    w.conn.send(Task(job.id, job.item, job.kwargs, job.transform_kwargs))
                except (OSError, ValueError):  # the worker died just now: its sentinel comes next
                    self._queue.appendleft(job)
                    job.attempts -= 1
                    break
                except Exception as exc:  # the input does not pickle: the caller's problem, not the worker's
                    _fail(job.future, exc)
                    continue
                w.job, w.started = job, time.monotonic()
                break

    def _on_worker(self, w: _Worker) -> None:
        """A message or the death of ``w`` (its last messages first)."""
        while w.process.is_alive() or w.conn.poll():
            if not w.conn.poll():
                return  # alive, nothing to read
            msg = self._recv(w)
            if msg is None:
                break
            if isinstance(msg, Ready):
                w.ready, w.pid = True, msg.pid
                logger.info("pool: a new worker (pid %d) on npu:%d is ready", msg.pid, w.device_id)
            elif isinstance(msg, Fatal):
                self._last_error = w.ending = f"a replacement on npu:{w.device_id} could not load: {msg.cause}"
                logger.error("a replacement worker on npu:%d could not load the pipeline:\n%s", w.device_id, msg.text)
            elif isinstance(msg, Done) and w.job is not None and msg.key == w.job.id:
                if msg.cause is Cause.DEVICE_LOST:
                    w.ending = f"npu:{w.device_id} lost its device context ({msg.failure.message})"
                    if self._can_retry(w.job):
                        continue  # the worker exits: _dead puts its input back for a fresh worker, as for a crash
                job, w.job = w.job, None
                if not job.future.done():
                    job.future.set_result(Outcome.of(msg, w.pid, w.device_id, job.attempts))
        self._dead(w)

    def _dead(self, w: _Worker, timed_out: str = "") -> None:
        """``w`` is gone (crashed, killed after ``timed_out``, or exited after a device-fatal error): its request
        is retried or answered with a failure, and a replacement starts while the restart budget allows."""
        w.process.join(5)
        self._workers.remove(w)
        w.conn.close()
        job = w.job
        why = w.ending or f"the worker (pid {w.pid}, npu:{w.device_id}) exited with code {w.process.exitcode}"
        if not timed_out:
            self.counters.crashed += 1
            self._last_error = w.ending or self._last_error or why
            retried = job is not None and self._can_retry(job)
            logger.warning("%s%s; it is replaced", why, "; its request is retried" if retried else "")
        if job is not None and not job.future.done():
            if timed_out:
                failure = Failure("RequestTimeout", timed_out, "", RequestTimeoutError.category)
                job.future.set_result(Outcome(None, failure, Cause.TIMED_OUT, {}, w.pid, w.device_id, job.attempts))
            elif self._can_retry(job):
                self.counters.retried += 1
                self._queue.appendleft(job)
            else:
                text = f"{why} while running this input, {job.attempts} time(s); retry it"
                failure = Failure("WorkerCrashed", text, "", WorkerCrashedError.category)
                job.future.set_result(Outcome(None, failure, Cause.CRASHED, {}, w.pid, w.device_id, job.attempts))
        if self.restarts.take():
            self._workers.append(self._start_worker(w.device_id))
            return
        self._last_error = (
            f"npu:{w.device_id} lost a worker ({why}) and the restart budget ({self.restarts.limit} per "
            f"{self.restarts.window:g} s) is spent"
        )
        logger.error("%s", self._last_error)
        if not self._workers:
            for queued in self._queue:
                _fail(queued.future, PoolClosedError(f"every worker died: {self._last_error}"))
            self._queue.clear()

    def _can_retry(self, job: _Job) -> bool:
        return job.attempts <= self.retries

    def _expire_timeouts(self) -> None:
        now = time.monotonic()
        for w in list(self._workers):
            job = w.job
            if job is not None and self.timeout and now - w.started > self.timeout:
                self.counters.timed_out += 1
                logger.warning(
                    "a request ran over %.3g s on worker %d (npu:%d): the worker is replaced",
                    self.timeout,
                    w.pid,
                    w.device_id,
                )
                w.process.kill()
                self._dead(
                    w,
                    f"the input ran over the timeout of {self.timeout:g} s (serve's --request-timeout, the executor's "
                    "timeout); its worker was replaced",
                )


def _fail(future: Future, exc: BaseException) -> None:
    if future.done():
        return
    if not future.running() and not future.set_running_or_notify_cancel():
        return
    future.set_exception(exc)


def _ask_to_stop(workers: List[_Worker], deadline: float) -> None:
    """Ask each worker to exit after its request (``None``) and wait for them until ``deadline``."""
    for w in workers:
        try:
            w.conn.send(None)
        except (OSError, ValueError):
            pass
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))


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
