#!/usr/bin/env bash
# CI step: mutation testing of the functions a change touched (scripts/mutation.py --ci), in .venv-unit with
# mutmut added, and, when a touched module is tested in another environment (ENVIRONMENTS in the script, e.g. .venv
# for serve/images.py), in that one with mutmut added too; fails under 90% caught or past the time budget.
# Runnable from a fresh clone after scripts/setup.sh.
#   bash scripts/ci-mutate.sh [--base REF] [--budget SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv-unit/bin/python
if [ ! -x "$PY" ]; then
  "${PYTHON:-python3}" -m venv .venv-unit
fi
"$PY" -m pip install -q -r requirements/mutation.txt
"$PY" scripts/mutation.py --ci --venv .venv-unit --other-venvs "$@" | while read -r venv; do
  [ -x "$venv/bin/python" ] || { echo "no environment at $venv: make it with scripts/setup.sh" >&2; exit 2; }
  "$venv/bin/python" -m pip install -q -r requirements/mutmut.txt  # mutmut alone: the rest is that venv's own
done
"$PY" scripts/mutation.py --ci --venv .venv-unit "$@"
