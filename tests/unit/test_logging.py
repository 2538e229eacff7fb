"""The library's logging: importing paddlex-npu attaches only a NullHandler and leaves levels and propagation to
the application; ``configure_logging`` (for programs: the CLI, the servers) writes text or one JSON object per
line, replaces rather than stacks its handler, and is repeated in the processes a server starts."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import pytest

from paddlex_npu import log


def test_importing_the_library_configures_nothing():
    code = (
        "import logging, paddlex_npu, paddlex_npu.log as l\n"
        "lg = logging.getLogger('paddlex_npu')\n"
        "print([type(h).__name__ for h in lg.handlers], lg.level, lg.propagate, logging.getLogger().handlers)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['NullHandler'] 0 True []"


def test_an_application_routes_our_records_the_usual_way(caplog):
    with caplog.at_level(logging.INFO, logger="paddlex_npu"):
        logging.getLogger("paddlex_npu.run.runner").info("a record from %s", "the library")
    assert [r.getMessage() for r in caplog.records] == ["a record from the library"]


@pytest.fixture
def restore_logging(monkeypatch):
    root, ours, paddlex = logging.getLogger(), log.logger, logging.getLogger("paddlex")
    saved = (list(root.handlers), ours.level, list(paddlex.handlers))
    monkeypatch.delenv(log.LOG_FORMAT_ENV, raising=False)
    monkeypatch.delenv(log.LOG_LEVEL_ENV, raising=False)
    yield
    root.handlers[:], paddlex.handlers[:] = saved[0], saved[2]
    ours.setLevel(saved[1])
    logging.captureWarnings(False)


def test_json_lines_carry_the_extra_fields(restore_logging):
    stream = io.StringIO()
    log.configure_logging("INFO", "json", stream=stream)
    log.configure_logging("INFO", "json", stream=stream)  # replaced, not stacked: one line per record
    access = logging.getLogger("paddlex_npu.serve.access")
    access.info("POST /ocr 200", extra={"logId": "abc", "status": 200, "latency_ms": 12.5, "category": "none"})
    logging.getLogger("paddlex_npu").debug("below the level")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("paddlex_npu").exception("failed")
    lines = stream.getvalue().splitlines()
    first, second = (json.loads(line) for line in lines)
    assert len(lines) == 2
    assert first["logId"] == "abc" and first["status"] == 200 and first["latency_ms"] == 12.5
    assert first["category"] == "none" and first["message"] == "POST /ocr 200" and first["level"] == "INFO"
    assert first["logger"] == "paddlex_npu.serve.access" and first["time"].endswith("Z")
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc"]


def test_text_format_and_what_workers_inherit(restore_logging):
    stream = io.StringIO()
    log.configure_logging("warning", "text", stream=stream)
    logging.getLogger("paddlex_npu").info("hidden")
    logging.getLogger("paddlex_npu").warning("shown")
    assert stream.getvalue() == "[paddlex_npu] WARNING shown\n"
    import os

    assert (os.environ[log.LOG_FORMAT_ENV], os.environ[log.LOG_LEVEL_ENV]) == ("text", "WARNING")
    assert log.configure_from_environment() is True


def test_bad_settings_name_the_choices(restore_logging, monkeypatch):
    with pytest.raises(ValueError, match=r"^log format 'xml': give one of text, json"):
        log.configure_logging("INFO", "xml")
    with pytest.raises(ValueError, match=r"^log level 'LOUD': give one of DEBUG, INFO, WARNING, ERROR"):
        log.configure_logging("loud")
    assert log.configure_from_environment() is False  # nothing exported: nothing configured
    monkeypatch.setenv(log.LOG_FORMAT_ENV, "xml")
    with pytest.raises(ValueError, match=r"PADDLEX_NPU_LOG_FORMAT / \$PADDLEX_NPU_LOG_LEVEL: fix or unset them"):
        log.configure_from_environment()
