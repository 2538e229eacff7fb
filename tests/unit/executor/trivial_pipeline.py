"""A trivial pipeline for the pool's unit tests (no PaddleX, no simulator): module-level hooks a spawned worker
imports by reference. ``predict(item)`` yields ``item * scale`` for a number; a string names what goes wrong:

- ``"pid"``: yields the worker's pid;   ``"raise"``: raises ``ValueError``;   ``"lost"``: raises
  :class:`~paddlex_npu.errors.DeviceLostError`;   ``"die"``: the process exits (code 3);   ``"unsendable"``:
  yields a lambda (does not pickle);
- ``"die-once:<path>"``: the first worker to see it creates ``path`` and exits; the next one yields ``"again"``;
- ``"gate:<path>"``: waits (bounded, 30 s) until ``path`` exists, then writes ``"<path>.done"`` and yields
  ``"opened"``; ``"<path>.started"`` is written first, so the test knows the worker holds the input (``"hang:<path>"``
  the same, never opened);
- ``"process-name"``: yields the worker process's name; ``"mark"``: yields :data:`MARK` as this process sees it;
- ``"device:<path>"``: one device call judged by the real :class:`~paddlex_npu.run.acl_errors.LossJudge` without
  pyACL, on a stand-in device of ais_bench (fails ``"[-1][ACL: general failure] "``, as ais_bench's ``infer``); the
  first worker to see it creates ``path`` and its device is lost from that process's very first call; yields
  ``"answered"``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from paddlex_npu.errors import ConfigError, DeviceLostError

LOADED: List[Echo] = []  # the pipelines this process built (in-process tests look at them)
MARK = "as imported"  # a test changes it in its own process: a spawned worker imports its own


class Echo:
    """The pipeline: one result per input; counts its calls (for the meter)."""

    def __init__(self, device_id: int, options: Optional[Dict[str, Any]]) -> None:
        self.device_id, self.options, self.calls, self.tag = device_id, dict(options or {}), 0, ""
        self.closed = False

    def predict(self, item: Any, scale: int = 1, **extra: Any) -> Iterator[Any]:
        self.calls += 1
        if not isinstance(item, str):
            yield {"value": item * scale, "extra": extra, "device": self.device_id, "tag": self.tag}
            return
        kind, _, path = item.partition(":")
        yield _misbehave(kind, path)

    def close(self) -> None:
        self.closed = True


def _misbehave(kind: str, path: str) -> Any:
    if kind == "pid":
        return os.getpid()
    if kind == "process-name":
        return mp.current_process().name
    if kind == "mark":
        return MARK
    if kind == "env":
        return os.environ.get(path)
    if kind == "raise":
        raise ValueError("the input is not a number")
    if kind == "lost":
        raise DeviceLostError("the device context is lost (test)")
    if kind == "die":
        os._exit(3)
    if kind == "lost-once":
        if not os.path.exists(path):
            Path(path).touch()
            raise DeviceLostError("the device context is lost (test, once)")
        return "again"
    if kind == "device":
        return _device_call(path)
    if kind == "unsendable":
        return lambda: None
    if kind == "die-once":
        if not os.path.exists(path):
            Path(path).touch()
            os._exit(3)
        return "again"
    if kind in ("gate", "hang"):
        Path(path + ".started").touch()
        opened = Path(path)
        for _ in range(3000):  # a cross-process gate: polled, bounded at 30 s
            if opened.exists():
                Path(path + ".done").touch()
                return "opened"
            time.sleep(0.01)
        return "never opened"
    raise AssertionError(f"unknown marker {kind!r}")


_DEVICE: Dict[str, Any] = {}  # this process's judge and whether its device is lost (``"device:<path>"``)


def _device_call(path: str) -> str:
    import numpy as np

    from paddlex_npu.run.acl_errors import LossJudge
    from tests.fake_ascend import ACL_GENERAL_FAILURE

    if not _DEVICE:
        lost = not os.path.exists(path)
        if lost:
            Path(path).touch()
        _DEVICE.update(judge=LossJudge(None, 0), lost=lost)  # no pyACL: nothing to ask but the device itself

    def infer(feeds: List[Any], **options: Any) -> List[Any]:
        if _DEVICE["lost"]:
            raise RuntimeError(ACL_GENERAL_FAILURE)
        return feeds

    _DEVICE["judge"].run("infer (dymshape) on npu:0", infer, [np.zeros((1, 3, 8, 8), np.float32)], mode="dymshape")
    return "answered"


def create(pipeline: Any, device_id: int, create_kwargs: Optional[Dict[str, Any]]) -> Echo:
    """The factory: ``pipeline`` ``"echo"``, or ``"refuse"`` (raises) / ``"exit"`` (the process exits) / ``"slow"``
    (loads after 5 s), or ``{"refuse_if": path}`` (raises once ``path`` exists: a replacement that cannot load)."""
    if pipeline == "slow":
        time.sleep(5)
    if pipeline == "refuse" or (isinstance(pipeline, dict) and os.path.exists(pipeline["refuse_if"])):
        raise ConfigError("this pipeline cannot load (test)")
    if pipeline == "exit":
        os._exit(4)
    LOADED.append(Echo(device_id, create_kwargs))
    return LOADED[-1]


def tag(pipeline: Echo, device_id: int) -> Echo:
    """The wrap hook: marks the pipeline with its device."""
    pipeline.tag = f"wrapped on {device_id}"
    return pipeline


def calls(pipeline: Echo) -> Callable[[], Dict[str, float]]:
    """The meter: the pipeline's call count."""
    return lambda: {"calls": float(pipeline.calls)}


def doubled(result: Any, twice: bool = False) -> Any:
    """The transform: the value doubled (``twice``: four times)."""
    if isinstance(result, dict):
        return {**result, "value": result["value"] * (4 if twice else 2)}
    return result
