"""Supported PaddleX versions, as data: one PEP 440 range per adapter."""

from __future__ import annotations

# PaddleX 3.5 moved static inference from BasePredictor.create_static_infer to runners/engines.
RUNNER_LAYOUT = ">=3.5,<3.8"
SUPPORTED = {"paddlex_35": RUNNER_LAYOUT}
SUPPORTED_TEXT = f"paddlex{RUNNER_LAYOUT} (runner/engine layout)"
