#!/usr/bin/env bash
# The docs are tests (issue 32): builds the wheel, makes a venv from it with the extras the docs use (the same
# pins as scripts/setup.sh, pip's cache reused), then runs every runnable block of README.md and docs/ as written,
# in a fresh folder outside the checkout with a fresh HOME (tests/docs/). Blocks marked to skip are listed at the
# end with their reasons. Runnable from a fresh clone after scripts/setup.sh (its .venv runs pytest).
#   bash scripts/ci-docs.sh [PYTEST ARGS...]      e.g. -k quickstart
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paddlex-npu-ci-docs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

# the wheel, with this environment's setuptools (nothing fetched)
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" .
WHEEL=$(ls "$WORK"/dist/paddlex_npu-*.whl)

# its venv: the extras the pages use, pinned as scripts/setup.sh pins them (extras stripped: pip's constraints
# take none; the test tools left out)
sed -e 's/\[[^]]*\]//' -e 's/#.*//' requirements/paddlex-3.7.txt requirements/serving.txt \
  | grep -v -E '^\s*$|^(pytest|ruff|schemathesis)' > "$WORK/pins.txt"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "$WHEEL[reference,ocr,serving]" paddleocr -c "$WORK/pins.txt"
"$WORK/venv/bin/python" -m pip check
echo "ci-docs: wheel venv ready in $(( $(date +%s) - start )) s"

# pip's cache for the assets' wheel downloads (the reader's HOME is fresh, pip's cache need not be)
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$("$PY" -m pip cache dir)}
DOCS_TEST_VENV="$WORK/venv" timeout 1500 "$PY" -m pytest -q -p no:cacheprovider --durations=10 tests/docs "$@"
echo "ci-docs: done in $(( $(date +%s) - start )) s"
