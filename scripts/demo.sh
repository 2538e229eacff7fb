#!/usr/bin/env bash
# The main job: OCR on a sample image on the NPU route (CPU reference runtime when no NPU is present),
# printing the text and saving the visualised result under output/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh .venv
.venv/bin/python examples/ocr_npu.py --output output "$@"
