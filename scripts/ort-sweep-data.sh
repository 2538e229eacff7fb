#!/usr/bin/env bash
# Refreshes tests/data/ort-output-shapes/: ONNX Runtime's real output shapes for the output-size sweep
# (tests/paddlex/test_output_sizes.py), keyed by each model file's SHA-256 and ONNX Runtime's version. Run it when
# the sweep warns that a key is missing (a new model file, a new ONNX Runtime), then commit the folder.
# About 25 CPU minutes on a cold cache, seconds when the asset cache already holds the sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh .venv 3.7
out=tests/data/ort-output-shapes
rm -rf "$out.new" && mkdir -p "$out.new"
ORT_SWEEP_DATA_OUT="$PWD/$out.new" .venv/bin/python -m pytest -q -p no:cacheprovider tests/paddlex/test_output_sizes.py
rm -rf "$out" && mv "$out.new" "$out"
git status --short "$out"
