"""The supported versions as one table: PaddleX (the adapters' ranges of :mod:`paddlex_npu.paddlex.versions`), the
PaddleOCR that pins it, paddlepaddle, Python, CANN and ais_bench/aclruntime, with what was tested. ``doctor``
reads it (:func:`paddleocr_check`, the tested versions in its PaddleX line); ``docs/compatibility.md`` holds
:func:`markdown_table` (a test checks the page holds it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..paddlex.versions import SUPPORTED, TESTED

CANN = "8.x (8.0+: `aclmdlGetInputDimsRange`); not run here"
AIS_BENCH = "Ascend's ais_bench + aclruntime wheels for your CANN (the image: 0.0.2); not run here"


@dataclass(frozen=True)
class Row:
    """One PaddleX generation: its range, what ran here, and the versions around it."""

    adapter: str
    paddlex: str  # the PEP 440 range the route accepts
    paddlex_tested: str
    paddleocr: str  # PaddleOCR 3.N pins paddlex>=3.N,<3.N+1
    paddleocr_tested: str
    paddlepaddle: str
    python: str
    cann: str
    ais_bench: str
    tested: str  # what ran, where


ROWS: Tuple[Row, ...] = (
    Row(
        "paddlex_35",
        SUPPORTED["paddlex_35"],
        TESTED["paddlex_35"],
        ">=3.5,<3.8",
        "3.7.0",
        "3.3.1 CPU tested (not needed on the route)",
        "3.11",
        CANN,
        AIS_BENCH,
        "CPU only: the whole suite, serving, Triton, Ray, benchmarks, the docs from the wheel; no NPU",
    ),
    Row(
        "paddlex_34",
        SUPPORTED["paddlex_34"],
        TESTED["paddlex_34"],
        ">=3.0,<3.5",
        "3.4.1",
        "3.3.1 CPU tested (required: PaddleX imports it)",
        "3.11",
        CANN,
        AIS_BENCH,
        "CPU only: the PaddleX, CLI and device layers; no serving (PaddleX's 3.7 serving layout); no NPU",
    ),
)


def row_for(paddlex_version: str) -> Optional[Row]:
    """The row whose PaddleX range holds ``paddlex_version`` (None: outside every range, or no version)."""
    try:
        version = Version(paddlex_version)
    except InvalidVersion:
        return None
    return next((r for r in ROWS if version in SpecifierSet(r.paddlex)), None)


def paddleocr_check(paddlex_version: str, paddleocr_version: str) -> Tuple[bool, str]:
    """(whether this PaddleOCR is the one for this PaddleX, the reason): PaddleOCR 3.N pins PaddleX 3.N."""
    px, po = Version(paddlex_version), Version(paddleocr_version)
    row = row_for(paddlex_version)
    if (po.major, po.minor) != (px.major, px.minor):
        want = f"{px.major}.{px.minor}"
        return (
            False,
            f"PaddleOCR {po} goes with PaddleX {po.major}.{po.minor}, not {px}: pip install 'paddleocr=={want}.*'",
        )
    tested = f" (tested: {row.paddleocr_tested})" if row else ""
    return True, f"{po} with PaddleX {px}{tested}"


def markdown_table() -> str:
    """The docs' table (``docs/compatibility.md``)."""
    rows = [
        "| PaddleX (tested) | PaddleOCR (tested) | paddlepaddle | Python | CANN | ais_bench | tested here |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        rows.append(
            f"| `{r.paddlex}` ({r.paddlex_tested}) | `{r.paddleocr}` ({r.paddleocr_tested}) | {r.paddlepaddle} | "
            f"{r.python} | {r.cann} | {r.ais_bench} | {r.tested} |"
        )
    return "\n".join(rows) + "\n"
