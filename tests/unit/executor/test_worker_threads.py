"""The thread pools of K worker processes share the host's cores: cores // K threads each, the user's own setting
left alone."""

from __future__ import annotations

import os

from paddlex_npu.executor.worker import THREAD_VARIABLES, thread_env


def test_workers_split_the_cores_between_their_thread_pools():
    assert thread_env(1, cores=8, environ={}) == dict.fromkeys(THREAD_VARIABLES, "8")
    assert thread_env(3, cores=8, environ={}) == dict.fromkeys(THREAD_VARIABLES, "2")
    assert thread_env(4, cores=2, environ={}) == dict.fromkeys(THREAD_VARIABLES, "1")  # never 0


def test_a_variable_the_user_set_is_theirs():
    env = thread_env(2, cores=2, environ={"OMP_NUM_THREADS": "4"})
    assert "OMP_NUM_THREADS" not in env and env["OPENCV_FOR_THREADS_NUM"] == "1"


def test_by_default_the_cores_are_this_hosts_and_the_environment_this_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = thread_env(1)
    assert "OMP_NUM_THREADS" not in env and env["MKL_NUM_THREADS"] == str(os.cpu_count())
