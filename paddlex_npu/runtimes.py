"""The session runtimes, one row each: every list of runtimes in the package (the config's type, the CLI's
choices, ``selftest``'s subset, which runtimes read a package's ONNX) is derived from :data:`RUNTIMES`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Literal, Tuple


@dataclass(frozen=True)
class Runtime:
    name: str
    runs_onnx: bool  # runs the ONNX the OM was built from, on the CPU (else the OM, on an NPU)
    selftest: bool  # `selftest --runtime` can check packages on it
    summary: str


RUNTIMES: Dict[str, Runtime] = {
    r.name: r
    for r in (
        Runtime("ais_bench", False, True, "Ascend's ais_bench InferSession: inference.om on the NPU"),
        Runtime("reference", True, True, "the CPU reference runtime: inference.onnx through ONNX Runtime"),
        Runtime("simulated", True, False, "the reference runtime's outputs replayed with modelled device time"),
    )
}
DEFAULT = "ais_bench"
NAMES: Tuple[str, ...] = tuple(RUNTIMES)
ONNX_NAMES: Tuple[str, ...] = tuple(n for n, r in RUNTIMES.items() if r.runs_onnx)
SELFTEST_NAMES: Tuple[str, ...] = tuple(n for n, r in RUNTIMES.items() if r.selftest)
RuntimeName = Literal[NAMES]  # type: ignore[valid-type]  # the config's type, from the table
