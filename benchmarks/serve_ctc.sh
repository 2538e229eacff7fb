#!/usr/bin/env bash
# Serving figures with the CTC reduction on and off (issue 35): `paddlex-npu serve-bench` against `serve` and the
# Triton route, the bundled OCR pipeline's recogniser converted with the reduction (convert's default) and with
# --no-reduce, on the simulated device, alternating the two ROUNDS times; one JSON per run plus their union.
#
#   benchmarks/serve_ctc.sh [OUT_DIR]    ROUNDS=2 SECONDS_PER_POINT=12 CONCURRENCY=1,4 REC=PP-OCRv5_mobile_rec
#                                        ORDER="reduced full" FIRST_ROUND=1 (more rounds into the same OUT_DIR)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
OUT="${1:-serve-ctc-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" | tee -a "$OUT/machine.txt"
first="${FIRST_ROUND:-1}"
for round in $(seq "$first" $((first + ${ROUNDS:-2} - 1))); do
  for variant in ${ORDER:-reduced full}; do
    flags=()
    [ "$variant" = full ] && flags=(--no-reduce)
    echo "== round $round, $variant: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" \
      | tee -a "$OUT/machine.txt"
    "$PY" -m paddlex_npu.cli serve-bench --servers triton-batching,serve-2 --rec "${REC:-PP-OCRv5_mobile_rec}" \
      "${flags[@]}" --concurrency "${CONCURRENCY:-1,4}" --seconds "${SECONDS_PER_POINT:-12}" --warmup 3 \
      --json "$OUT/$variant-$round.json" 2> "$OUT/$variant-$round.stderr" | tee "$OUT/$variant-$round.txt"
  done
done
echo "== end: load average $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" | tee -a "$OUT/machine.txt"
"$PY" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = [dict(json.loads(p.read_text()), variant=p.stem.split("-")[0], round=int(p.stem.split("-")[1]))
        for p in sorted(out.glob("*-[0-9]*.json"), key=lambda p: (int(p.stem.split("-")[1]), p.stem))]
machine = (out / "machine.txt").read_text().splitlines()  # cores, CPU, load average before each run and at the end
(out / "serve-ctc.json").write_text(json.dumps({"machine": machine, "runs": runs}, indent=2))
print(f"{len(runs)} runs in {out / 'serve-ctc.json'}")
PY
