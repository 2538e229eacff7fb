"""One check's answer, shared by ``doctor`` and its container checks."""

from __future__ import annotations

from dataclasses import dataclass

OK, FAIL, WARN = "✓", "x", "!"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    required: bool = True
