"""Error types, and the one reply table of the servers. Each message names the cause and the fix.

Every error has a ``category``; :data:`REPLIES` maps each category to the HTTP status, the message form and the
metrics label every server answers with (``paddlex-npu serve``, Ray Serve, the Triton models): :func:`reply`
for an exception raised here, :func:`reply_to` for a :class:`Failure` that came back from a worker process.
``docs/errors.md`` holds :func:`markdown_table` (a test checks it).
"""

from __future__ import annotations

import traceback as _traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Reply:
    """How a server answers one category: an error's, or one of its own protocol answers."""

    status: int  # HTTP status (Triton: the answer's errorCode)
    retry_after: bool  # the answer carries Retry-After: the same request may succeed later or elsewhere
    metric: str  # the category label of paddlex_npu_requests_total and of the access record
    meaning: str  # for the docs' table
    headers: Tuple[Tuple[str, str], ...] = ()  # further headers of the answer

    @property
    def server_fault(self) -> bool:
        return server_fault(self.status)


def server_fault(status: int) -> bool:
    """A 5xx: the server's or the device's fault (logged with its traceback), not the client's."""
    return status >= 500


_CLOSE = (("Connection", "close"),)

# The one reply table (a flat table: one row per category). Every status a server answers is chosen here: the
# errors' categories, and the servers' own protocol answers (probes, 401, 413, 415, 499).
REPLIES: Dict[str, Reply] = {
    "ok": Reply(200, False, "none", "answered (a result, a probe that passes)"),
    "input": Reply(422, False, "input", "the request is wrong: an image or shape outside what the model takes"),
    "bad_request": Reply(400, False, "input", "a probe's query is wrong (`/ready?min-workers=N`)"),
    "unauthorized": Reply(
        401, False, "input", "no bearer token, or a wrong one", (("WWW-Authenticate", "Bearer"),) + _CLOSE
    ),
    "too_large": Reply(413, False, "input", "the request body is over the server's limit", _CLOSE),
    "media_type": Reply(415, False, "input", "a POST whose Content-Type is not application/json"),
    "client_gone": Reply(499, False, "input", "the client closed the connection before its answer"),
    "config": Reply(500, False, "config", "the deployment is wrong: options, model files, PaddleX version"),
    "device": Reply(503, True, "device", "the NPU or its runtime is unavailable, or a device call failed"),
    "device_lost": Reply(
        503, True, "device_lost", "the device context is lost: the worker answers, exits and is restarted"
    ),
    "timeout": Reply(504, False, "timeout", "the request ran over the per-request timeout; its worker was replaced"),
    "overload": Reply(
        503, True, "overload", "every worker is busy and the queue is full, or the server starts or drains"
    ),
    "not_ready": Reply(503, False, "not_ready", "a probe that fails: no worker alive, not ready, metrics off"),
    "runtime": Reply(500, False, "runtime", "anything else paddlex-npu raises"),
}
CATEGORIES = tuple(REPLIES)
HTTP_STATUS: Dict[str, int] = {name: r.status for name, r in REPLIES.items()}
METRIC_LABELS = tuple(dict.fromkeys(r.metric for r in REPLIES.values()))  # paddlex_npu_requests_total's category
INTERNAL = "Internal server error"


class PaddlexNpuError(Exception):
    """Base class of every error raised by paddlex-npu."""

    category = "runtime"


class UnsupportedPaddlexError(PaddlexNpuError, RuntimeError):
    """The installed PaddleX is outside the supported range or has an unknown layout."""

    category = "config"


class ModelFileError(PaddlexNpuError, FileNotFoundError):
    """A model folder lacks a file the NPU route needs, or a file cannot be read."""

    category = "config"


class RuntimeUnavailableError(PaddlexNpuError, RuntimeError):
    """The requested inference runtime (ais_bench, onnxruntime) cannot be imported."""

    category = "device"


class NpuDeviceUnavailableError(PaddlexNpuError, RuntimeError):
    """An NPU device was requested on a route that has no NPU support in this environment."""

    category = "device"


class InputMismatchError(PaddlexNpuError, ValueError):
    """The inputs given to a runner do not match the model."""

    category = "input"


class InputShapeError(InputMismatchError):
    """An input fits none of the OM's gears or ranges."""


class ConfigError(PaddlexNpuError, ValueError):
    """An invalid ``backend_config`` / ``engine_config`` for the OM route."""

    category = "config"


class DeviceCallError(PaddlexNpuError, RuntimeError):
    """A session call failed after the inputs passed every check; the message names the model, the input shapes
    and the output sizes reserved, and the option to raise."""

    category = "device"


class IllegalPathError(ModelFileError, ValueError):
    """A model path ais_bench refuses (``ValueError("The path:... is illegal...")``), with the fix."""


class ShapeInferenceError(PaddlexNpuError, ValueError):
    """ONNX shape inference (strict) refuses the input shapes."""


class ConvertError(PaddlexNpuError, RuntimeError):
    """The conversion cannot go on; the message says why and what to do."""


class PatchError(PaddlexNpuError, RuntimeError):
    """A fork patch cannot be found, checked or applied."""


class MismatchError(PatchError):
    """A file of the patch is missing, or one of its hunks does not apply."""

    def __init__(self, message: str, path: Path, first: bool, line: Optional[int] = None):
        super().__init__(message)
        self.path = path
        self.first = first  # the patch's first hunk (or its first file missing): a wrong version fails here
        self.line = line  # 1-based line of the file that differs, when known


def category_of(exc: BaseException) -> str:
    """The category of an exception (a key of :data:`REPLIES`); ``runtime`` for anything without one."""
    category = getattr(exc, "category", None)
    return category if category in REPLIES else "runtime"


@dataclass(frozen=True)
class Failure:
    """An error that crossed a process boundary (a worker's input that raised, a worker that died or ran over
    its time): the exception's type name, text, traceback and category (a key of :data:`REPLIES`)."""

    type: str
    message: str
    traceback: str = ""
    category: str = "runtime"
    internal: bool = False  # another library's exception without a category: its text is for the log only

    @classmethod
    def of(cls, exc: BaseException, with_traceback: bool = True) -> Failure:
        """The failure of ``exc`` (call it while ``exc`` is being handled for its traceback)."""
        trace = _traceback.format_exc() if with_traceback else ""
        internal = not isinstance(exc, PaddlexNpuError) and getattr(exc, "category", None) not in REPLIES
        return cls(type(exc).__name__, str(exc), trace, category_of(exc), internal)

    @property
    def device_lost(self) -> bool:
        """The device context is lost: the worker that hit it exits after answering (it is restarted)."""
        return self.category == "device_lost"


def reply_to(failure: Failure) -> Tuple[int, str, bool]:
    """``(status, message, retry_after)`` every server answers for ``failure``: the status of its category, and
    ``"<Type>: <text>"`` for an error of paddlex-npu (or any with a known category); other exceptions are the
    server's own bugs: 500 with only their type named (their text may hold internals; the log has it)."""
    reply = REPLIES.get(failure.category, REPLIES["runtime"])
    if failure.internal:
        return REPLIES["runtime"].status, f"{INTERNAL} ({failure.type}); the details are in the server log", False
    text = failure.message.strip()
    return reply.status, f"{failure.type}: {text}" if text else failure.type, reply.retry_after


def reply(exc: BaseException) -> Tuple[int, str, bool]:
    """:func:`reply_to` for an exception raised in this process (another library's exception reads as ours when
    it carries a known ``category`` attribute)."""
    return reply_to(Failure.of(exc, with_traceback=False))


def http_status(exc: BaseException) -> Tuple[int, str]:
    """``(status, message)`` of :func:`reply` (the answer a server gives to a request that raised ``exc``)."""
    status, message, _ = reply(exc)
    return status, message


def metric_of(category: Optional[str], status: int) -> str:
    """The metrics label of an answer: its row's when whoever answered named the category; else (an answer
    PaddleX's app or Starlette wrote itself: 404, 405, a 2xx) ``none`` below 400, ``input`` for a 4xx, ``runtime``
    for a 5xx."""
    if category in REPLIES:
        return REPLIES[category].metric
    ok, bad = REPLIES["bad_request"].status, REPLIES["runtime"].status
    return REPLIES["ok"].metric if status < ok else "input" if status < bad else REPLIES["runtime"].metric


def markdown_table() -> str:
    """The docs' table of :data:`REPLIES` (``docs/errors.md``; a test checks the page holds it)."""
    rows = ["| category | HTTP status | Retry-After | metrics label | meaning |", "|---|---|---|---|---|"]
    for name, r in REPLIES.items():
        rows.append(f"| `{name}` | {r.status} | {'yes' if r.retry_after else 'no'} | `{r.metric}` | {r.meaning} |")
    return "\n".join(rows) + "\n"


def metrics_markdown_table() -> str:
    """The monitoring page's table of the ``category`` label (``docs/monitoring.md``; a test checks it): each
    label with the rows of :data:`REPLIES` it counts."""
    rows = ["| category | answers |", "|---|---|"]
    for label in METRIC_LABELS:
        mine = [(n, r) for n, r in REPLIES.items() if r.metric == label]
        said = "; ".join(f"{r.status} `{n}`: {r.meaning}" for n, r in mine)
        rows.append(f"| `{label}` | {said} |")
    return "\n".join(rows) + "\n"


class RequestRefusedError(PaddlexNpuError, ValueError):
    """A request a server refuses itself (a field, a file, a header, a probe's query, its own state); ``category``
    names the row of :data:`REPLIES` (``input`` unless given), and the answer's message is the text as is, without
    the type's name (PaddleX's own form of these answers)."""

    category = "input"
    named = False  # the answer's message is the text alone

    def __init__(self, message: str, category: Optional[str] = None) -> None:
        super().__init__(message)
        if category is not None:
            if category not in REPLIES:
                raise ValueError(f"no reply row {category!r}: give one of {', '.join(REPLIES)}")
            self.category = category


class ExecutorError(PaddlexNpuError, RuntimeError):
    """The parallel executor cannot go on: its workers did not start, or all of them died and none could be
    restarted."""


class WorkerCrashedError(PaddlexNpuError, RuntimeError):
    """The worker running the request died (crash, killed, out of memory); it has been replaced. Retry."""

    category = "device"


class RequestTimeoutError(PaddlexNpuError, TimeoutError):
    """The request ran longer than the server's per-request timeout; its worker was replaced."""

    category = "timeout"


class QueueFullError(PaddlexNpuError, RuntimeError):
    """Too many requests are waiting for a worker; retry later or on another server."""

    category = "overload"


class PoolClosedError(PaddlexNpuError, RuntimeError):
    """The pool is shutting down (or has lost every worker) and takes no more requests."""

    category = "overload"


class DeviceLostError(PaddlexNpuError, RuntimeError):
    """The device context is lost (an AI Core exception, a device that dropped out, a context error): every later
    call in this process would fail too. The input that hit it is answered with this error, then the worker
    exits and its supervisor starts a fresh process (a fresh context); its restart budget bounds a device that
    keeps failing."""

    category = "device_lost"


class WorkerStartError(ExecutorError):
    """A worker could not load its pipeline; the message ends with the worker's own error (its last line)."""


class WorkerFailureError(PaddlexNpuError):
    """A request's :class:`Failure` in a worker process, raised again where the request waits (a server's
    request path) to be answered by its category (:func:`reply_to`)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.category = failure.category


class AclCallError(PaddlexNpuError, RuntimeError):
    """A pyACL call answered with ``ret`` != 0 or with a value of the wrong shape (``selftest``'s checks)."""

    category = "device"

    def __init__(self, call: str, ret: Optional[int], why: str = "") -> None:
        self.call, self.ret = call, ret
        super().__init__(f"{call} returned {ret}" + (f" ({why})" if why else ""))


class UrlRefusedError(RequestRefusedError):
    """A URL input the server does not fetch (URL inputs off, a host or address not allowed), or whose fetch went
    over a limit (size, time, redirects); ``outcome`` says which (``serve.fetch``'s metric label), ``category``
    the reply row (``input`` unless given)."""

    def __init__(self, message: str, outcome: str = "error", category: Optional[str] = None) -> None:
        super().__init__(message, category)
        self.outcome = outcome
