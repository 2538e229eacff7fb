#!/usr/bin/env bash
# Sets up and runs the checks: ruff, then the test suite on real models (tests needing an NPU skip).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv
.venv/bin/ruff check paddlex_npu tests examples benchmarks
.venv/bin/python -m pytest -q -ra "$@"
