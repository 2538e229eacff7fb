"""Error types. Each message names the cause and the fix."""

from __future__ import annotations


class PaddlexNpuError(Exception):
    """Base class of every error raised by paddlex-npu."""


class UnsupportedPaddlexError(PaddlexNpuError, RuntimeError):
    """The installed PaddleX is outside the supported range or has an unknown layout."""


class ModelFileError(PaddlexNpuError, FileNotFoundError):
    """A model folder lacks a file the NPU route needs, or a file cannot be read."""


class RuntimeUnavailableError(PaddlexNpuError, RuntimeError):
    """The requested inference runtime (ais_bench, onnxruntime) cannot be imported."""


class NpuDeviceUnavailableError(PaddlexNpuError, RuntimeError):
    """An NPU device was requested on a route that has no NPU support in this environment."""


class InputMismatchError(PaddlexNpuError, ValueError):
    """The inputs given to a runner do not match the model."""


class ConfigError(PaddlexNpuError, ValueError):
    """An invalid ``backend_config`` / ``engine_config`` for the OM route."""


class DeviceCallError(PaddlexNpuError, RuntimeError):
    """A session call failed after the inputs passed every check; the message names the model, the input shapes
    and the output sizes reserved, and the option to raise."""


class ExecutorError(PaddlexNpuError, RuntimeError):
    """The parallel executor cannot go on: its workers did not start, or all of them died and none could be
    restarted."""
