"""The registry of the route's speed-ups: PaddleX's host-side steps as the OM route runs them (same outputs, less
host work), each a module exporting its :class:`~.record.Row` s, listed once here.

The patcher applies them after the adapter's hooks, both when the route is installed (``install()``, one record
with the adapter's) and when a fork-patched PaddleX first routes (``patcher.enable_fork``, a record kept for the
process). A row whose target this PaddleX lacks (an unknown layout) is switched off with one warning per speed-up
naming it and the PaddleX version; the rest of the route installs. What they patch: ``docs/patch-ledger.md``;
adding one: ``docs/architecture.md`` (a route speed-up).
"""

from __future__ import annotations

from typing import List, Tuple

from ..log import logger
from . import ctc_decode, host_steps, table_match
from .record import PatchRecord, RowPatch
from .versions import paddlex_version

SPEEDUPS: Tuple[RowPatch, ...] = (
    RowPatch("ctc_decode (CTC outputs reduced on the device)", ctc_decode.ROWS),
    RowPatch("host_steps (detection, recognition, crops and reads)", host_steps.ROWS),
    RowPatch("table_match (OCR boxes matched to table cells)", table_match.ROWS),
)


def apply(record: PatchRecord) -> List[str]:
    """Apply every speed-up into ``record``, each row this PaddleX has; returns what is switched off (the targets
    this PaddleX lacks, one warning per speed-up that has any)."""
    off: List[str] = []
    for patch in SPEEDUPS:
        missing = patch.requires()
        if missing:
            logger.warning(
                "PaddleX %s: the route's %s is off at %s: a layout this paddlex-npu does not know; the route runs "
                "PaddleX's own step there (install a tested PaddleX to have it: docs/compatibility.md)",
                paddlex_version(),
                patch.name,
                ", ".join(missing),
            )
            off += missing
        patch.apply(record)
    return off
