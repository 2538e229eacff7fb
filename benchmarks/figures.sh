#!/usr/bin/env bash
# The figures of issue 22, side by side in one run, with the machine and its load: the executor against its bound
# and against serial, the simulated device's own share of the CPU, PaddleX's CPU engines, and the capacity
# planner against the executor routes it predicts. Run it on a quiet machine (nothing else busy); it says so when
# the load is above half the cores.
#
#   benchmarks/figures.sh [OUT_DIR]            (default: figures-<date>; PYTHON=... to pick the interpreter)
#   FIGURES_SERVE=1 benchmarks/figures.sh      also the serving figures (benchmark --serve, C=16)
#   FIGURES_QUICK=1 benchmarks/figures.sh      4 pages x 1 pass, no CPU engines: a check of the direction
#   FIGURES_ARGS="--det PP-OCRv6_small_det --rec PP-OCRv6_small_rec" benchmarks/figures.sh   other bundled models
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
OUT="${1:-figures-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
CLI=("$PY" -m paddlex_npu.cli)

machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB, " $7 " GiB available"}')"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0])'), paddlex-npu from $REPO"
}

{
  echo "== machine at start"
  machine
  cores=$(nproc)
  load=$(cut -d' ' -f1 /proc/loadavg)
  if awk -v l="$load" -v c="$cores" 'BEGIN {exit !(l > c / 2)}'; then
    echo "WARNING: load $load on $cores cores: other work shares the machine; the figures are lower bounds"
  fi
} | tee "$OUT/machine.txt"

if [ -n "${FIGURES_QUICK:-}" ]; then
  BENCH=(--pages 4 --repeat 1 --workers 1,2,3 --engines "")
else
  BENCH=(--pages 8 --repeat 4 --rounds 5 --workers 1,2,3,4,6)
fi
# FIGURES_ARGS: more benchmark options, e.g. "--det PP-OCRv6_small_det --rec PP-OCRv6_small_rec" or "--no-reduce"
read -r -a EXTRA <<< "${FIGURES_ARGS:-}"
BENCH+=(${EXTRA[@]+"${EXTRA[@]}"})
echo "== paddlex-npu benchmark ${BENCH[*]}"
"${CLI[@]}" benchmark "${BENCH[@]}" --no-progress --json "$OUT/benchmark.json" --plot "$OUT/benchmark.png" \
  2> "$OUT/benchmark.stderr" | tee "$OUT/benchmark.txt"

echo "== paddlex-npu capacity $OUT/benchmark.json"
"${CLI[@]}" capacity "$OUT/benchmark.json" --json "$OUT/capacity.json" | tee "$OUT/capacity.txt"

if [ -n "${FIGURES_SERVE:-}" ]; then
  echo "== paddlex-npu benchmark --serve --concurrency 16 --seconds 12 --rounds 3"
  "${CLI[@]}" benchmark --serve --concurrency 16 --seconds 12 --rounds 3 --json "$OUT/serve.json" \
    2> "$OUT/serve.stderr" | tee "$OUT/serve.txt"
fi

{
  echo "== machine at end"
  machine
} | tee -a "$OUT/machine.txt"
echo "figures in $OUT/"
echo "if the load stayed below 1 (see above), add the run to the capacity planner's test data:"
echo "  cp $OUT/benchmark.json $REPO/tests/data/benchmark-2cores-$(date -u +%Y%m%d).json"
