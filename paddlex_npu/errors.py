"""Error types. Each message names the cause and the fix.

Every error has a ``category`` a server maps to an HTTP status (:func:`http_status`):

- ``input``: the request is wrong (an image or shape outside what the model takes) -> 422, as PaddleX's app;
- ``config``: the deployment is wrong (options, model files, PaddleX version) -> 500 with the message;
- ``device``: the NPU or its runtime is unavailable or a device call failed -> 503 with the message;
- ``runtime``: anything else paddlex-npu raises -> 500 with the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Tuple

CATEGORIES = ("input", "config", "device", "runtime")
HTTP_STATUS: Dict[str, int] = {"input": 422, "config": 500, "device": 503, "runtime": 500}


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
    """The category of an exception (see the module docstring); ``runtime`` for anything without one."""
    category = getattr(exc, "category", None)
    return category if category in CATEGORIES else "runtime"


def http_status(exc: BaseException) -> Tuple[int, str]:
    """``(status, message)`` for a server's reply to a request that raised ``exc``.

    paddlex-npu errors (and any exception with a known ``category`` attribute) give their category's status
    (input 422, config 500, device 503, runtime 500) and their own message, prefixed with the category. Other
    exceptions are the server's own bugs: 500 with only their type named (their text may hold internals).
    """
    category = getattr(exc, "category", None)
    if category not in CATEGORIES:
        return 500, f"internal server error ({type(exc).__name__}); the details are in the server log"
    text = str(exc).strip() or type(exc).__name__
    label = {"input": "bad input", "config": "configuration error", "device": "device unavailable"}
    return HTTP_STATUS[category], f"{label.get(category, 'error')}: {text}"


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

    category = "device"


class WorkerStartError(ExecutorError):
    """A worker could not load its pipeline; the message ends with the worker's own error (its last line)."""


class UrlRefusedError(PaddlexNpuError, ValueError):
    """A URL input the server does not fetch (URL inputs off, a host or address not allowed), or whose fetch went
    over a limit (size, time, redirects); ``outcome`` says which (``serve.fetch``'s metric label)."""

    category = "input"

    def __init__(self, message: str, outcome: str = "error") -> None:
        super().__init__(message)
        self.outcome = outcome
