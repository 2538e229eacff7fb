"""The pool's worker in this process (no PaddleX): its hooks by reference or dotted path, one input's run (results,
failure and cause, timing from the meter), and its message loop over a pipe filled beforehand."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import threading

import pytest

from paddlex_npu.executor import worker
from paddlex_npu.executor.worker import (
    Cause,
    Done,
    Fatal,
    Ready,
    Runner,
    Task,
    WorkerSpec,
    _serve_tasks,
    load,
    resolve,
    worker_main,
)
from tests.unit.executor import trivial_pipeline as tp

HERE = "tests.unit.executor.trivial_pipeline"


def test_a_hook_is_a_callable_or_a_dotted_path():
    assert resolve(None) is None and resolve(tp.create) is tp.create
    assert resolve(f"{HERE}:create") is tp.create
    for bad in ("tests.unit.executor.trivial_pipeline", ":create", f"{HERE}:", "create", f"{HERE}:create:x"):
        with pytest.raises(ValueError, match="a hook is a callable or 'module:name'"):
            resolve(bad)


def test_a_spec_names_its_factory_this_layer_has_none():
    """The executor knows no pipeline: a spec without a factory is refused; nothing else is assumed."""
    with pytest.raises(ValueError, match="a WorkerSpec needs factory="):
        WorkerSpec("ocr", 0)
    spec = WorkerSpec("ocr", 0, factory=tp.create)
    assert (spec.factory, spec.meter, spec.transform, spec.wrap) == (tp.create, None, None, None)
    assert spec.create_kwargs is None and spec.predict_kwargs == {} and spec.env == {}


def test_load_builds_wraps_and_meters_the_pipeline():
    spec = WorkerSpec("echo", 2, {"o": 1}, {"scale": 5}, f"{HERE}:doubled", factory=f"{HERE}:create")
    spec.meter, spec.wrap = f"{HERE}:calls", tp.tag
    runner = load(spec)
    assert runner.pipeline.options == {"o": 1} and runner.pipeline.device_id == 2
    assert runner.pipeline.tag == "wrapped on 2" and runner.predict_kwargs == {"scale": 5}
    done = runner.run(3, {"x": 1}, {"twice": True}, key="k")
    assert done.key == "k" and done.results[0]["value"] == 3 * 5 * 4 and done.results[0]["extra"] == {"x": 1}
    assert done.failure is None and done.cause is None and done.timing["calls"] == 1
    assert runner.run(1, {"scale": 7}).results[0]["value"] == 14  # the call's keywords over the spec's
    assert runner.run(1).timing["calls"] == 1  # a change, not the running total


def test_a_runner_without_hooks_gives_the_results_as_they_are():
    runner = Runner(tp.Echo(0, None))
    done = runner.run(2)
    assert done.results[0]["value"] == 2 and set(done.timing) == {"seconds", "cpu_seconds"}
    assert 0 <= done.timing["seconds"] < 5 and done.key is None
    assert 0 <= done.timing["cpu_seconds"] <= done.timing["seconds"] + 0.05  # this call's, not the process's


def test_a_counter_the_meter_starts_during_an_input_counts_from_zero():
    readings = iter([{}, {"new": 2.0}])
    assert Runner(tp.Echo(0, None), read=lambda: next(readings)).run(1).timing["new"] == 2.0


def test_what_raises_is_the_inputs_failure_and_a_lost_device_says_so():
    runner = Runner(tp.Echo(0, None), read=lambda: {"n": 1.0})
    raised = runner.run("raise")
    assert raised.results is None and raised.cause is Cause.RAISED and raised.failure.type == "ValueError"
    assert raised.timing["n"] == 0 and "Traceback" in raised.failure.traceback
    lost = runner.run("lost")
    assert lost.cause is Cause.DEVICE_LOST and lost.failure.device_lost
    broken = Runner(tp.Echo(0, None), transform=lambda r: 1 / 0).run(1)  # a transform that raises: the same
    assert broken.cause is Cause.RAISED and broken.failure.type == "ZeroDivisionError"


def serve(spec: WorkerSpec, *messages):
    """Run worker_main here over a pipe holding ``messages``; its answers."""
    parent, child = mp.Pipe()
    for message in messages:
        parent.send(message)
    old = signal.getsignal(signal.SIGINT)
    try:
        worker_main(child, spec)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # Ctrl-C is the parent's
    finally:
        signal.signal(signal.SIGINT, old)
    answers = []
    while parent.poll():
        answers.append(parent.recv())
    child.close()
    return answers


def spec_of(pipeline="echo", env=None) -> WorkerSpec:
    return WorkerSpec(pipeline, 0, None, {}, tp.doubled, env or {}, factory=tp.create, meter=None)


def test_the_worker_answers_each_task_in_order_then_stops(monkeypatch):
    monkeypatch.setenv("PADDLEX_NPU_POOL_TEST", "old")
    tasks = [Task(1, 4), Task(2, "raise"), Task(3, "unsendable"), Task(4, "env:PADDLEX_NPU_POOL_TEST")]
    tasks.append(Task(5, 2, {"scale": 5}, {"twice": True}))
    ready, *done = serve(spec_of(env={"PADDLEX_NPU_POOL_TEST": "new"}), *tasks, None, Task(6, 1))
    assert isinstance(ready, Ready) and ready.pid == os.getpid()
    assert [d.key for d in done] == [1, 2, 3, 4, 5] and all(isinstance(d, Done) for d in done)  # none after stop
    assert done[0].results[0]["value"] == 8 and done[1].cause is Cause.RAISED
    unsent = done[2]
    assert unsent.cause is Cause.UNSENDABLE and unsent.results is None and "seconds" in unsent.timing
    assert "pass a transform that returns plain data" in unsent.failure.message
    assert unsent.failure.type in ("AttributeError", "PicklingError") and "Traceback" in unsent.failure.traceback
    assert done[3].results == ["new"]
    assert done[4].results[0]["value"] == 2 * 5 * 4  # the task's keywords and transform keywords
    assert tp.LOADED[-1].closed  # stopped: the pipeline is closed


def test_the_worker_closes_its_pipeline_when_the_parent_is_gone():
    parent, child = mp.Pipe()
    parent.close()
    pipeline = tp.create("echo", 0, None)
    _serve_tasks(child, Runner(pipeline))
    child.close()
    assert pipeline.closed and pipeline.calls == 0


def test_the_worker_exits_when_its_parent_is_gone(monkeypatch):
    """The watch itself (a real parent's death is tests/unit/executor/test_pool.py's killed-parent test): os.getppid and
    os._exit stood in for, so that this process survives it."""
    exits: queue.Queue = queue.Queue()
    real = os.getppid()
    parent = [real]

    monkeypatch.setattr(worker.os, "getppid", lambda: parent[0])
    monkeypatch.setattr(worker.os, "_exit", exits.put)  # recorded; the watch goes on (its parent is back after)
    before = set(threading.enumerate())
    worker._die_with_parent(parent[0], every=0.01)
    (watch,) = [t for t in threading.enumerate() if t not in before]
    assert watch.name == "paddlex-npu-parent-watch" and watch.daemon
    with pytest.raises(queue.Empty):
        exits.get(timeout=0.1)  # the parent lives: no exit
    parent[0] = -1  # the parent is gone (the worker was re-parented)
    assert exits.get(timeout=5) == 0
    parent[0] = real
    with contextlib.suppress(queue.Empty):  # until no watch is between its check and its exit
        while True:
            exits.get(timeout=0.1)


def test_the_worker_stops_after_a_lost_device():
    ready, lost = serve(spec_of(), Task(1, "lost"), Task(2, 1))
    assert isinstance(ready, Ready) and lost.cause is Cause.DEVICE_LOST  # the next task is not run


def test_a_pipeline_that_cannot_load_is_a_fatal_answer():
    (fatal,) = serve(spec_of("refuse"), Task(1, 1))
    assert isinstance(fatal, Fatal) and fatal.pid == os.getpid()
    assert isinstance(fatal, Fatal) and fatal.text.strip().endswith("ConfigError: this pipeline cannot load (test)")
