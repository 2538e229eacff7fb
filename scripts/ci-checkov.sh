#!/usr/bin/env bash
# checkov (an outside scanner of Kubernetes manifests and Dockerfiles) over every manifest `paddlex-npu k8s` writes
# in the tests' option combinations and over deploy/Dockerfile: tests/deploy/test_checkov.py, 0 failed checks.
# checkov goes into its own venv (.venv-checkov: its dependencies must not move the project's pins); about 75 s to
# install on a fresh machine, about 70 s to run on 2 cores. Offline after the install (--skip-download).
#   bash scripts/ci-checkov.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
CHECKOV_VENV=${CHECKOV_VENV:-.venv-checkov}
if [ ! -x "$CHECKOV_VENV/bin/checkov" ]; then
  python3 -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/python" -m pip install -q -r requirements/checkov.txt
fi
PATH="$PWD/$CHECKOV_VENV/bin:$PATH" PYTHONPATH=$PWD timeout 900 "$VENV/bin/python" -m pytest -q tests/deploy/test_checkov.py
