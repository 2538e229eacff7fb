"""One job's ledger: how many times each input was started without finishing, and the rows done.

Ray retries a task whose worker died, and restarts a dead actor and runs its batches again (Ray Data's defaults,
without limit). An input that kills its worker every time would so run for ever. The decode tasks and the NPU
actors record each input in the ledger (a small Ray actor, one per job) before working on it, and mark it done
after: an input started more than ``input_retries + 1`` times died with its worker each time, and becomes an error
row (:class:`~paddlex_npu.errors.WorkerCrashedError`'s name) instead of running again; the rest of the corpus goes
on. The same actor counts the rows written, for the progress line (rows done, rows per second), so the driver
never holds rows to count them.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

DEFAULT_INPUT_RETRIES = 2


class InputLedger:
    """The ledger's state (run as a Ray actor by :func:`start_ledger`)."""

    def __init__(self) -> None:
        self.started: Dict[str, int] = {}
        self.rows = 0
        self.errors = 0
        self.t0 = time.monotonic()

    def begin(self, key: str) -> int:
        """Record a start of ``key``; the number of starts so far, this one included."""
        self.started[key] = self.started.get(key, 0) + 1
        return self.started[key]

    def done(self, key: str) -> None:
        self.started.pop(key, None)

    def add_rows(self, rows: int, errors: int) -> None:
        self.rows += rows
        self.errors += errors

    def progress(self) -> Tuple[int, int, float]:
        """(rows done, rows with an error, seconds since the ledger started)."""
        return self.rows, self.errors, time.monotonic() - self.t0


def start_ledger() -> Any:
    """A ledger actor on this (the driver's) node, taking no CPU; restarted if it dies (its counts then start
    again, so an input may get a few more tries)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    actor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, scheduling_strategy=here)(InputLedger)
    return actor.remote()


class InputGuard:
    """The ledger as a task or actor uses it: :meth:`admit` before an input, :meth:`done` after it."""

    def __init__(self, ledger: Any, input_retries: int, stage: str) -> None:
        self.ledger = ledger
        self.input_retries = input_retries
        self.stage = stage

    def admit(self, key: str) -> Optional[str]:
        """None to go on with ``key``; else the error of an input its worker died on too often."""
        if self.ledger is None:
            return None
        import ray

        starts = ray.get(self.ledger.begin.remote(f"{self.stage}:{key}"))
        deaths = starts - 1
        if deaths <= self.input_retries:
            return None
        return (
            f"WorkerCrashedError: the {self.stage} worker died {deaths} times on this input, more than "
            f"input_retries={self.input_retries} (ray-ocr --input-retries); it is not tried again"
        )

    def done(self, key: str) -> None:
        if self.ledger is not None:
            self.ledger.done.remote(f"{self.stage}:{key}")

    def add_rows(self, rows: int, errors: int) -> None:
        if self.ledger is not None:
            self.ledger.add_rows.remote(rows, errors)
