#!/usr/bin/env bash
# CI step: mutation testing of the functions a change touched (scripts/mutation.py --ci), in .venv-unit with
# mutmut added; fails under 90% caught or past the time budget. Runnable from a fresh clone after scripts/setup.sh.
#   bash scripts/ci-mutate.sh [--base REF] [--budget SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv-unit/bin/python
if [ ! -x "$PY" ]; then
  "${PYTHON:-python3}" -m venv .venv-unit
fi
"$PY" -m pip install -q -r requirements/mutation.txt
"$PY" scripts/mutation.py --ci --venv .venv-unit "$@"
