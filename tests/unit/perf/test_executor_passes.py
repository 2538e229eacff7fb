"""An executor round of the benchmark gives every worker at least INPUTS_PER_WORKER inputs, so that it times a
steady stream rather than its start and its last wave; ``--repeat`` is kept where it already does."""

from __future__ import annotations

import pytest

from paddlex_npu.perf.benchmark import INPUTS_PER_WORKER, executor_passes


@pytest.mark.parametrize(
    "repeat, inputs, workers, passes",
    [(2, 8, 6, 6), (2, 8, 1, 2), (6, 8, 6, 6), (1, 2, 1, 4), (1, 2, 2, 8), (3, 4, 6, 12), (1, 1000, 6, 1)],
)
def test_each_worker_gets_its_inputs_and_repeat_is_a_floor(repeat, inputs, workers, passes):
    assert executor_passes(repeat, inputs, workers) == passes
    assert passes * inputs >= INPUTS_PER_WORKER * workers  # every worker's share of the round
    assert executor_passes(repeat, inputs, workers) - 1 < repeat or (passes - 1) * inputs < INPUTS_PER_WORKER * workers
