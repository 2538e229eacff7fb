"""The pipelined executor on the real OCR pipeline (bundled PP-OCRv4 OM packages) on the simulated device: the
same texts as the in-process pipeline, input order kept, a bounded number of inputs read ahead, an error item
reported, a killed worker and a crashing input handled, Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paddlex_npu.paddlex.parallel import ParallelExecutor
from paddlex_npu.samples import assets
from tests.helpers import REPO


@pytest.fixture(scope="module")
def pages(text_pages):
    return text_pages


@pytest.fixture(scope="module")
def sim_env(tmp_path_factory):
    return {
        "PADDLEX_NPU_SIM_STORE": str(REPO / ".cache" / "simulated"),
        "PADDLEX_NPU_SIM_LOCKS": str(tmp_path_factory.mktemp("locks")),
    }


@pytest.fixture(scope="module")
def executor(asset_root, sim_env):
    ex = ParallelExecutor(
        assets.ocr_pipeline_config(asset_root / "om"), workers_per_device=2, runtime="simulated", env=sim_env
    )
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def serial_texts(npu_pipeline, pages):
    """The in-process pipeline (reference runtime) on each page."""
    return {str(p): list(next(iter(npu_pipeline.predict(str(p))))["rec_texts"]) for p in pages}


def test_same_texts_as_the_in_process_pipeline_in_input_order(executor, pages, serial_texts):
    inputs = [str(p) for p in pages * 3]
    pulled = []

    def lazy():
        for x in inputs:
            pulled.append(x)
            yield x

    got = []
    for r in executor.map(lazy()):
        assert len(pulled) <= r.index + 1 + executor.max_pending  # read ahead is bounded
        got.append(r)
    assert [r.index for r in got] == list(range(len(inputs)))
    assert all(r.ok for r in got), [r.error for r in got if not r.ok]
    for r in got:
        assert r.input == inputs[r.index]
        (res,) = r.results
        assert res["rec_texts"] == serial_texts[r.input]
    assert len({r.worker for r in got}) == 2  # both workers took inputs
    assert all(r.timing["sim_calls"] >= 2 and r.timing["sim_device_ms"] > 0 for r in got)


def test_a_failing_input_is_reported_and_the_rest_go_on(executor, pages, tmp_path, serial_texts):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    inputs = [str(pages[0]), str(tmp_path / "missing.png"), str(pages[1]), str(broken), str(pages[2])]
    got = list(executor.map(inputs))
    assert [r.ok for r in got] == [True, False, True, False, True]
    assert got[1].error.type and got[1].error.message and "Traceback" in got[1].error.traceback
    for r in (got[0], got[2], got[4]):
        assert r.results[0]["rec_texts"] == serial_texts[r.input]


def test_a_killed_worker_is_replaced_and_its_inputs_retried(executor, pages, serial_texts):
    inputs = [str(p) for p in pages * 3]
    got, victim = [], None
    for r in executor.map(inputs):
        if victim is None:
            victim = executor.worker_pids[0]
            os.kill(victim, signal.SIGKILL)
        got.append(r)
    assert [r.index for r in got] == list(range(len(inputs)))
    assert all(r.ok for r in got), [r.error for r in got if not r.ok]
    assert any(r.attempts == 2 for r in got)  # what the killed worker held ran again elsewhere
    assert all(r.results[0]["rec_texts"] == serial_texts[r.input] for r in got)
    assert victim not in executor.worker_pids and len(executor.workers) == 2


def test_an_input_that_kills_its_worker_is_retried_once_then_reported(asset_root, sim_env, pages, tmp_path):
    from tests.helpers import crash_on_poison

    poison = tmp_path / "poison.png"
    poison.write_bytes(Path(pages[0]).read_bytes())
    inputs = [str(pages[0]), str(poison), str(pages[1])]
    config = assets.ocr_pipeline_config(asset_root / "om")
    with ParallelExecutor(config, runtime="simulated", env=sim_env, transform=crash_on_poison) as ex:
        got = list(ex.map(inputs))
    assert [r.ok for r in got] == [True, False, True]
    assert got[1].error.type == "WorkerCrashed" and "code 3" in got[1].error.message
    assert got[1].attempts == 2


CTRL_C = textwrap.dedent(
    """
    import json, os, signal, sys, threading
    # as in a terminal: a process started in the background by a non-interactive shell inherits SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler (CI may start the suite that way)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from paddlex_npu import ParallelExecutor, parallel
    from paddlex_npu.samples import assets
    config = assets.ocr_pipeline_config(assets.build_model_folders() / "om")
    page, env = sys.argv[1], json.loads(sys.argv[2])
    report = {}
    # 1. Ctrl-C while the caller handles a result, in a `with` block
    try:
        with ParallelExecutor(config, workers_per_device=2, runtime="simulated", env=env) as ex:
            pids = ex.worker_pids
            for i, r in enumerate(ex.map([page] * 300)):
                if i >= 1:  # pressed again until it lands: a KeyboardInterrupt raised in a __del__ is ignored
                    os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        report["with"] = {"seen": i + 1, "alive": [p for p in pids if os.path.exists(f"/proc/{p}")]}
    # 2. Ctrl-C from outside (a timer) while parallel() runs: in the executor's wait or in the caller
    import multiprocessing
    n = 0
    stop = threading.Event()
    def press():  # Ctrl-C every 0.3 s until it lands (one raised inside a __del__ would be ignored)
        while not stop.wait(0.3):
            os.kill(os.getpid(), signal.SIGINT)
    try:
        for r in parallel(config, [page] * 300, workers_per_device=2, runtime="simulated", env=env):
            n += 1
            if n == 1:
                threading.Thread(target=press, daemon=True).start()
    except KeyboardInterrupt:
        stop.set()
        report["parallel"] = {"seen": n, "alive": [p.pid for p in multiprocessing.active_children()]}
    print(json.dumps(report))
    """
)


def test_ctrl_c_stops_every_worker(pages, sim_env, asset_root):
    import json

    out = subprocess.run(
        [sys.executable, "-c", CTRL_C, str(pages[0]), json.dumps(sim_env)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["with"]["alive"] == [] and 2 <= report["with"]["seen"] <= 10, report
    assert report["parallel"]["seen"] < 200 and report["parallel"]["alive"] == []


def test_a_script_without_the_main_guard_is_told_what_to_add(tmp_path):
    """Workers are spawned and import the main module again: a script that calls parallel() at its top level
    would start executors in every worker. The workers refuse at once and the parent names the fix."""
    script = tmp_path / "no_guard.py"
    script.write_text("import paddlex_npu\nlist(paddlex_npu.parallel('OCR', ['a.png'], start_timeout=120))\n")
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 1, out.stderr[-3000:]  # the parent's own error, raised out of the script:
    assert "ExecutorError: a worker on npu:0 could not create the pipeline:" in out.stderr
    assert "exited with code 1 while loading" in out.stderr and 'under if __name__ == "__main__":' in out.stderr
    assert "was started while a worker process was importing your main module" in out.stderr  # the worker's
