"""The one logger of paddlex-npu, and how programs (the CLI, the servers) set up output.

The library only attaches a :class:`logging.NullHandler` to ``paddlex_npu``: an application that imports it routes,
filters or silences our records the usual way (``logging.getLogger("paddlex_npu")``). :func:`configure_logging`
is for programs, not for the library: the CLI calls it, and a server's worker processes repeat it with
:func:`configure_from_environment`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import IO, Any, Dict, Optional

from . import envs

logger = logging.getLogger("paddlex_npu")
logger.addHandler(logging.NullHandler())

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# What configure_logging chose, for the processes a server starts (spawned workers read it at start-up).
LOG_FORMAT_ENV = envs.LOG_FORMAT.name
LOG_LEVEL_ENV = envs.LOG_LEVEL.name
TEXT_FORMAT = "[%(name)s] %(levelname)s %(message)s"
# Loggers that do not propagate to the root logger (PaddleX sets up its own stderr handler): in json mode they
# get our handler instead, so that every line on stderr is one JSON object.
OWN_HANDLER_LOGGERS = ("paddlex",)

# Attributes every LogRecord has: anything else on a record came from ``extra=`` and goes into the JSON object.
# (uvicorn's color_message repeats the message with terminal colours)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the record's ``extra`` fields
    (e.g. an access line's ``logId``, ``status``, ``latency_ms``, ``category``), and ``exc`` for a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        out: Dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _OurHandler(logging.StreamHandler):
    """The handler configure_logging installs (replaced, never stacked, when it is called again)."""


def configure_logging(level: str = "INFO", fmt: str = "text", stream: Optional[IO[str]] = None) -> None:
    """Send log records to ``stream`` (stderr): one handler on the root logger, ``fmt`` ``text`` or ``json`` (one
    object per line), paddlex-npu's records from ``level`` up. Other libraries keep their own levels; their records
    that reach the root logger get the same format (in ``json``, also PaddleX's records and Python warnings, so that
    every line is one JSON object). Also exported to the environment (``PADDLEX_NPU_LOG_FORMAT``,
    ``PADDLEX_NPU_LOG_LEVEL``) so that worker processes started afterwards log the same way."""
    level = str(level).upper()
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: give one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: give one of {', '.join(FORMATS)}")
    handler = _OurHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    logger.setLevel(level)
    for name in OWN_HANDLER_LOGGERS:
        other = logging.getLogger(name)
        for old in [h for h in other.handlers if isinstance(h, _OurHandler) or fmt == "json"]:
            other.removeHandler(old)
        if fmt == "json":
            other.addHandler(handler)  # PaddleX adds its own handler only to a logger that has none
    logging.captureWarnings(fmt == "json")
    os.environ[LOG_FORMAT_ENV], os.environ[LOG_LEVEL_ENV] = fmt, level


def configure_from_environment() -> bool:
    """In a process a server started: log as the server does (what :func:`configure_logging` exported); False
    (and nothing changed) when no program configured logging."""
    fmt, level = os.environ.get(LOG_FORMAT_ENV), os.environ.get(LOG_LEVEL_ENV)
    if not fmt and not level:
        return False
    try:
        configure_logging(level or "INFO", fmt or "text")
    except ValueError as exc:
        raise ValueError(f"{exc} (from ${LOG_FORMAT_ENV} / ${LOG_LEVEL_ENV}: fix or unset them)") from None
    return True
