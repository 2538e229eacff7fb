#!/usr/bin/env bash
# Sets up and runs the checks on both PaddleX generations, each in its own environment:
# ruff, then the test suite on real models with PaddleX 3.7 (.venv) and PaddleX 3.4 (.venv-legacy).
# Tests that need a real NPU skip. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv 3.7
bash scripts/setup.sh .venv-legacy 3.4
.venv/bin/ruff check paddlex_npu tests examples benchmarks
echo "== PaddleX 3.7 (runner/engine layout)"
.venv/bin/python -m pytest -q -ra "$@"
echo "== PaddleX 3.4 (create_static_infer layout)"
.venv-legacy/bin/python -m pytest -q -ra "$@"
