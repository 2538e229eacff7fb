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
    """How a server answers an error of one category."""

    status: int  # HTTP status (Triton: the answer's errorCode)
    retry_after: bool  # the answer carries Retry-After: the same request may succeed later or elsewhere
    metric: str  # the category label of paddlex_npu_requests_total and of the access record
    meaning: str  # for the docs' table


# The one reply table (a flat table: one row per category).
REPLIES: Dict[str, Reply] = {
    "input": Reply(422, False, "input", "the request is wrong: an image or shape outside what the model takes"),
    "config": Reply(500, False, "config", "the deployment is wrong: options, model files, PaddleX version"),
    "device": Reply(503, True, "device", "the NPU or its runtime is unavailable, or a device call failed"),
    "device_lost": Reply(
        503, True, "device_lost", "the device context is lost: the worker answers, exits and is restarted"
    ),
    "timeout": Reply(504, False, "timeout", "the request ran over the per-request timeout; its worker was replaced"),
    "overload": Reply(503, True, "overload", "every worker is busy and the queue is full (or the server drains)"),
    "runtime": Reply(500, False, "runtime", "anything else paddlex-npu raises"),
}
CATEGORIES = tuple(REPLIES)
HTTP_STATUS: Dict[str, int] = {name: r.status for name, r in REPLIES.items()}
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
        return 500, f"{INTERNAL} ({failure.type}); the details are in the server log", False
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


def markdown_table() -> str:
    """The docs' table of :data:`REPLIES` (``docs/errors.md``; a test checks the page holds it)."""
    rows = ["| category | HTTP status | Retry-After | metrics label | meaning |", "|---|---|---|---|---|"]
    for name, r in REPLIES.items():
        rows.append(f"| `{name}` | {r.status} | {'yes' if r.retry_after else 'no'} | `{r.metric}` | {r.meaning} |")
    return "\n".join(rows) + "\n"


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
