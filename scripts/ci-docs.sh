#!/usr/bin/env bash
# The docs are tests (issues 32, 43), run as a new user runs them: the sdist and the wheel are built and checked as a
# release is (scripts/ci-release.sh), served by a real package index server (pypiserver, .venv-release) on
# 127.0.0.1, which pip's own configuration (PIP_CONFIG_FILE) puts in front of the index this machine uses; a venv
# that starts empty (pip only); then every runnable block of README.md and docs/ as written, in a fresh folder
# outside the checkout with a fresh HOME (tests/docs/): the pages' own install lines (README: `pip install
# "paddlex-npu[reference,ocr]"`, PaddleOCR's, serving's) are all that venv gets. Blocks marked to skip are listed
# at the end with their reasons. pip's cache is this machine's (warm after scripts/setup.sh). Runnable from a fresh
# clone after scripts/setup.sh (its .venv runs pytest).
#   bash scripts/ci-docs.sh [PYTEST ARGS...]      e.g. -k quickstart
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
RELEASE_VENV=${RELEASE_VENV:-$REPO/.venv-release}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/paddlex-npu-ci-docs.XXXXXX")
SERVER=
trap '[ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
start=$(date +%s)

bash scripts/ci-release.sh "$WORK/dist"

# the index: pypiserver on loopback, a free port, no fallback to another index (pip's configuration does that)
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$RELEASE_VENV/bin/pypi-server" run -i 127.0.0.1 -p "$PORT" --disable-fallback "$WORK/dist" >"$WORK/index.log" 2>&1 &
SERVER=$!
INDEX=http://127.0.0.1:$PORT/simple/
for _ in $(seq 100); do
  curl -fs "${INDEX}paddlex-npu/" 2>/dev/null | grep -q "paddlex_npu-.*\.whl" && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/index.log" >&2; exit 1; }
  sleep 0.2
done
curl -fs "${INDEX}paddlex-npu/" | grep -q "paddlex_npu-.*\.whl" || { echo "ci-docs: the index serves no wheel" >&2; exit 1; }

# pip's configuration: the loopback index first, then the index and extra indexes this machine's pip uses (its
# environment and configuration files, read here with the real HOME: the reader's HOME is fresh)
conf() { "$PY" -m pip config get "global.$1" 2>/dev/null || true; }
PUBLIC=${PIP_INDEX_URL:-$(conf index-url)}
EXTRA="${PUBLIC:-https://pypi.org/simple} ${PIP_EXTRA_INDEX_URL:-} $(conf extra-index-url)"
LINKS=$(echo "${PIP_FIND_LINKS:-} $(conf find-links)" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
{
  echo "[global]"
  echo "index-url = $INDEX"
  echo "extra-index-url = $(echo $EXTRA)"
  [ -z "$(echo $LINKS)" ] || echo "find-links = $(echo $LINKS)"
} >"$WORK/pip.conf"
unset PIP_INDEX_URL PIP_EXTRA_INDEX_URL
export DOCS_TEST_ENV_PIP_CONFIG_FILE=$WORK/pip.conf
echo "ci-docs: index $INDEX serving $(ls "$WORK/dist" | tr '\n' ' '); pip.conf:" && sed 's/^/  /' "$WORK/pip.conf"

# the reader's venv: empty (pip only); the pages install the rest
python3 -m venv "$WORK/venv"
echo "ci-docs: index and empty venv ready in $(( $(date +%s) - start )) s"

export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$("$PY" -m pip cache dir)}
DOCS_TEST_VENV="$WORK/venv" timeout 1500 "$PY" -m pytest -q -p no:cacheprovider --durations=10 tests/docs "$@"

# what the README's line installed is the wheel the index served (not a release of the same name elsewhere)
WHEEL=$(ls "$WORK"/dist/paddlex_npu-*.whl)
(cd "$WORK" && "$WORK/venv/bin/python" -I - "$WHEEL") <<'PYEOF'
import importlib.metadata as m, sys, zipfile
installed = m.distribution("paddlex-npu")
with zipfile.ZipFile(sys.argv[1]) as whl:
    record = next(n for n in whl.namelist() if n.endswith(".dist-info/RECORD"))
    built = {line.split(",")[0]: line.split(",")[1] for line in whl.read(record).decode().splitlines() if line}
got = {str(f): f.hash.value for f in installed.files if f.hash and str(f).startswith("paddlex_npu/")}
want = {k: v.split("=", 1)[1] for k, v in built.items() if k.startswith("paddlex_npu/") and v}
assert got and want, f"no file hashes to compare: installed {len(got)}, built {len(want)}"
differ = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
assert not differ, f"the venv's paddlex-npu {installed.version} is not the served wheel: {differ[:5]}"
print(f"ci-docs: the venv's paddlex-npu {installed.version} is the served wheel ({len(got)} files)")
PYEOF
"$WORK/venv/bin/python" -m pip check
echo "ci-docs: done in $(( $(date +%s) - start )) s"
