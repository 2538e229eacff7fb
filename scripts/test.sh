#!/usr/bin/env bash
# Sets up and runs the checks, each layer in the environment it needs:
#   ruff (lint + format), the docs build (mkdocs --strict), the unit layer without PaddleX (.venv-unit), then the
#   PaddleX, CLI and device layers on real models with PaddleX 3.7 (.venv) and PaddleX 3.4 (.venv-legacy).
# Tests that need a real NPU skip with the reason. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv 3.7
bash scripts/setup.sh .venv-legacy 3.4
[ -x .venv-unit/bin/python ] || "${PYTHON:-python3}" -m venv .venv-unit
.venv-unit/bin/python -m pip install -q -r requirements/unit.txt
.venv-unit/bin/python -m pip install -q --no-deps -e .
.venv/bin/ruff check paddlex_npu tests examples benchmarks
.venv/bin/ruff format --check paddlex_npu tests examples benchmarks
echo "== docs site (mkdocs build --strict, offline)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
echo "== unit layer (no PaddleX installed)"
.venv-unit/bin/python -m pytest -q -ra tests/unit "$@"
echo "== PaddleX 3.7 (runner/engine layout)"
.venv/bin/python -m pytest -q -ra "$@"
echo "== PaddleX 3.4 (create_static_infer layout)"
.venv-legacy/bin/python -m pytest -q -ra tests/paddlex tests/cli tests/device "$@"
