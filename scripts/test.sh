#!/usr/bin/env bash
# Sets up and runs the checks, each layer in the environment it needs:
#   ruff (lint + format), the docs build (mkdocs --strict), the unit layer without PaddleX (.venv-unit), then the
#   PaddleX, CLI and device layers on real models with PaddleX 3.7 (.venv) and PaddleX 3.4 (.venv-legacy).
# Tests that need a real NPU skip with the reason. Extra arguments go to pytest.
#   scripts/test.sh --fast   the fast lane (under 2 minutes once the venvs exist): ruff, the unit layer, and one
#                            route smoke test (a PaddleX model on the OM route, CPU reference runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --fast ]; then
  shift
  [ -x .venv/bin/python ] || bash scripts/setup.sh .venv 3.7
  if [ ! -x .venv-unit/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv-unit
    .venv-unit/bin/python -m pip install -q -r requirements/unit.txt
    .venv-unit/bin/python -m pip install -q --no-deps -e .
  fi
  .venv/bin/ruff check paddlex_npu tests examples benchmarks
  .venv/bin/ruff format --check paddlex_npu tests examples benchmarks
  echo "== unit layer (no PaddleX installed)"
  .venv-unit/bin/python -m pytest -q -ra tests/unit "$@"
  echo "== route smoke test (PaddleX 3.7, reference runtime)"
  .venv/bin/python -m pytest -q -ra "tests/paddlex/test_clients.py::test_single_model_takes_the_route[hpi_config-create_model]" "$@"
  exit 0
fi
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
