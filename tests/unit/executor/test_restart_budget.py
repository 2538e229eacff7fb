"""The restart budget of the worker pools (serve's and the executor's): so many restarts per sliding time
window, not per lifetime."""

from __future__ import annotations

import pytest

from paddlex_npu.executor.pool import RestartBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_restarts_are_limited_per_window_and_come_back_after_it():
    clock = Clock()
    budget = RestartBudget(2, window=60, clock=clock)
    assert budget.take() and budget.take() and not budget.take()
    assert budget.used == 2
    clock.now = 59.9
    assert not budget.take()
    clock.now = 60.0  # the first two left the window
    assert budget.take() and budget.take() and not budget.take()


def test_a_long_lived_pool_survives_rare_crashes_for_ever():
    clock = Clock()
    budget = RestartBudget(2, window=600, clock=clock)
    for crash in range(100):  # one crash every 10 minutes for 16 hours
        clock.now = crash * 600.0
        assert budget.take()


@pytest.mark.parametrize("limit, window", [(-1, 60), (2, 0)])
def test_bad_budgets_are_refused(limit, window):
    with pytest.raises(ValueError, match="restart budget needs"):
        RestartBudget(limit, window)


def test_a_window_may_be_shorter_than_a_second():
    clock = Clock()
    budget = RestartBudget(1, window=0.5, clock=clock)
    assert budget.take() and not budget.take()
    clock.now = 0.5
    assert budget.take()
