"""The pod's readiness probe, ``/ready?min-workers=N`` (what ``paddlex-npu k8s`` writes): a real ``serve`` with two
workers stays ready for it while one worker is killed and reloads, where plain ``/ready`` (every worker) is 503; a
bad threshold is the probe's mistake, answered 400 naming it."""

from __future__ import annotations

import os
import signal

import pytest

from tests.serve.conftest import pipeline_yaml, stop  # noqa: F401  (the fixture over the real model folders)
from tests.serve.test_serve_faults import BOUND_S, _get, _start, _until, _workers


@pytest.fixture(scope="module")
def server(pipeline_yaml, tmp_path_factory):  # noqa: F811
    s = _start(pipeline_yaml, tmp_path_factory.mktemp("ready") / "serve.log", "--workers", "2")
    try:
        yield s
    finally:
        stop(s["proc"])


def test_one_worker_down_keeps_the_pod_ready_for_min_workers_1(server):
    assert _get(server, "/ready")[0] == 200 and _get(server, "/ready?min-workers=2")[0] == 200
    victim = _workers(server)[0]
    os.kill(victim, signal.SIGKILL)
    both = {}

    def one_down() -> bool:  # both probes read in the same state: one worker ready, its peer reloading
        both["all"], both["one"] = _get(server, "/ready"), _get(server, "/ready?min-workers=1")
        return both["all"][0] == 503

    assert _until(one_down, 10, 0.05), "the killed worker was never seen missing"
    assert both["one"][0] == 200, both
    assert "1 of 2 workers ready" in both["all"][1]["errorMsg"], both
    assert _until(lambda: _get(server, "/ready")[0] == 200, BOUND_S, 0.5), server["log"].read_text()[-2000:]


@pytest.mark.parametrize("value", ["0", "two", "-1", ""])
def test_a_bad_threshold_is_answered_400_naming_it(server, value):
    status, body = _get(server, f"/ready?min-workers={value}")
    if value == "":  # an empty value is no threshold: every worker, as plain /ready
        assert status == 200, body
        return
    assert status == 400 and f"min-workers={value!r}: give a whole number of workers" in body["errorMsg"], body
