"""Errors carry a category a server maps to an HTTP status: client input 4xx, configuration 500, device 503."""

from __future__ import annotations

import numpy as np
import pytest

import paddlex_npu
from paddlex_npu import errors
from paddlex_npu.config import OMBackendConfig
from paddlex_npu.errors import PatchError, http_status
from paddlex_npu.run.gears import InputShapeError
from paddlex_npu.run.runner import build_om_runner
from tests.onnx_models import tiny_package


@pytest.mark.parametrize(
    "cls, category, status",
    [
        (errors.InputMismatchError, "input", 422),
        (InputShapeError, "input", 422),
        (errors.ConfigError, "config", 500),
        (errors.ModelFileError, "config", 500),
        (errors.UnsupportedPaddlexError, "config", 500),
        (errors.DeviceCallError, "device", 503),
        (errors.NpuDeviceUnavailableError, "device", 503),
        (errors.RuntimeUnavailableError, "device", 503),
        (errors.DeviceLostError, "device_lost", 503),
        (errors.RequestTimeoutError, "timeout", 504),
        (errors.QueueFullError, "overload", 503),
        (errors.PoolClosedError, "overload", 503),
        (PatchError, "runtime", 500),
    ],
)
def test_every_error_has_a_category_and_a_status(cls, category, status):
    exc = cls("what went wrong: do this")
    assert exc.category == category and errors.category_of(exc) == category
    code, message = http_status(exc)
    assert code == status and message == f"{cls.__name__}: what went wrong: do this"


def test_every_error_is_importable_from_the_package():
    """What docs/errors.md names, a user imports from ``paddlex_npu`` (the one error module)."""
    names = [n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.PaddlexNpuError)]
    assert "InputShapeError" in names and InputShapeError is errors.InputShapeError
    missing = [n for n in names if getattr(paddlex_npu, n, None) is not getattr(errors, n)]
    assert not missing, missing


def test_other_exceptions_are_500_without_their_text():
    code, message = http_status(KeyError("/secret/path"))
    assert code == 500 and "KeyError" in message and "secret" not in message


def test_an_input_outside_the_oms_ranges_is_a_client_error(tmp_path):
    tiny_package(tmp_path)
    manifest = {
        "mode": "dymshape",
        "inputs": [
            {"name": "x", "shape": [-1, 3, -1, -1], "range": [[1, 4], [3, 3], [8, 64], [8, 64]]},
            {"name": "a", "dtype": "int32", "shape": [-1, 2], "range": [[1, 4], [2, 2]]},
        ],
    }
    runner = build_om_runner(tmp_path, runtime="reference", device_id=0, config=OMBackendConfig(manifest=manifest))
    with pytest.raises(errors.PaddlexNpuError) as info:
        runner([np.zeros((1, 2), np.int32), np.zeros((1, 3, 128, 8), np.float32)])
    code, message = http_status(info.value)
    assert code == 422 and "[1, 3, 128, 8]" in message and message.startswith("InputShapeError: ")


def test_the_docs_table_is_the_reply_table():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text(encoding="utf-8")
    table = page.split("<!-- table: generated from paddlex_npu/errors.py -->\n", 1)[1].split("<!-- end of table", 1)[0]
    assert table == errors.markdown_table(), "docs/errors.md is stale: paste errors.markdown_table() into it"


def test_the_monitoring_pages_category_table_is_generated_from_the_reply_table():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "monitoring.md").read_text(encoding="utf-8")
    table = page.split("<!-- table: generated from paddlex_npu/errors.py -->\n", 1)[1].split("<!-- end of table", 1)[0]
    assert table == errors.metrics_markdown_table(), "docs/monitoring.md is stale: paste metrics_markdown_table()"


def test_a_refused_request_answers_its_row_with_its_message_as_is():
    assert errors.RequestRefusedError("bad field").category == "input"
    assert errors.RequestRefusedError("full", "overload").category == "overload"
    with pytest.raises(ValueError, match="no reply row 'nope'"):
        errors.RequestRefusedError("x", "nope")
    assert errors.metric_of("too_large", 413) == "input" and errors.metric_of(None, 404) == "input"
    assert errors.metric_of(None, 204) == "none" and errors.metric_of(None, 502) == "runtime"


def test_every_category_an_error_class_has_is_in_the_reply_table():
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.PaddlexNpuError)]
    assert {c.category for c in classes if isinstance(c.category, str)} <= set(errors.REPLIES)
    assert {"timeout", "overload", "device_lost"} <= set(errors.REPLIES)


def test_a_failure_reads_as_the_exception_it_came_from():
    exc = errors.DeviceLostError("the context is gone")
    assert (
        errors.reply_to(errors.Failure.of(exc))
        == errors.reply(exc)
        == (503, "DeviceLostError: the context is gone", True)
    )
    code, message, retry = errors.reply_to(errors.Failure("KeyError", "/secret", "", "runtime", internal=True))
    assert code == 500 and "secret" not in message and not retry
