"""``paddlex-npu capacity``: the capacity planner's command (library: :mod:`paddlex_npu.tools.capacity`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", type=Path, help="a benchmark JSON (paddlex-npu benchmark --runtime simulated --json F)")
    p.add_argument("--cores", type=float, help="host cores to plan for (with --npus)")
    p.add_argument("--npus", type=int, help="NPUs to plan for (with --cores)")
    p.add_argument("--device", default="310P3", help="the NPU chip: 310P3 (Atlas 300I Pro) or 910B4 (default 310P3)")
    p.add_argument("--cpu-speed", type=float, default=1.0, help="a host core's speed / the benchmark's (default 1)")
    p.add_argument("--workers-per-npu", type=int, help="executor workers per NPU (default: the best)")
    p.add_argument("--serving-ms", type=float, default=0.0, help="CPU ms per request of an HTTP front (default 0)")
    p.add_argument("--front-processes", type=int, default=1, help="HTTP front processes (default 1)")
    p.add_argument("--json", type=Path, help="write the predictions here")


def run(args: argparse.Namespace) -> int:
    from .errors import ConfigError
    from .tools.benchmark import BenchmarkReport
    from .tools.capacity import check, format_prediction, hosts_table, page_cost, predict

    try:
        data = json.loads(args.report.read_text())
        report = BenchmarkReport.from_dict(data)
    except FileNotFoundError:
        print(f"paddlex-npu capacity: {args.report} does not exist: give a benchmark --json file", file=sys.stderr)
        return 1
    except (ValueError, KeyError, TypeError) as exc:
        print(
            f"paddlex-npu capacity: {args.report} is no benchmark report ({type(exc).__name__}: {exc}): "
            "write one with paddlex-npu benchmark --json FILE",
            file=sys.stderr,
        )
        return 1
    if (args.cores is None) != (args.npus is None):
        print("paddlex-npu capacity: give --cores and --npus together (e.g. --cores 32 --npus 4)", file=sys.stderr)
        return 2
    try:
        cost = page_cost(report, args.serving_ms)
        if args.cores is not None:
            predictions = [
                predict(
                    cost,
                    cores=args.cores,
                    npus=args.npus,
                    device=args.device,
                    cpu_speed=args.cpu_speed,
                    workers_per_npu=args.workers_per_npu,
                    front_processes=args.front_processes,
                )
            ]
        else:
            predictions = hosts_table(cost)
        checks = check(report, cost)
    except ConfigError as exc:
        print(f"paddlex-npu capacity: {exc}", file=sys.stderr)
        return 1
    if checks:
        print(f"this machine ({report.cores} cores, 1 simulated NPU): planner against the benchmark's executor routes")
        for c in checks:
            print(f"  {c.route:<26} measured {c.measured:7.1f}  predicted {c.predicted:7.1f}  ({100 * c.error:+.0f}%)")
    for p in predictions:
        print("\n".join(format_prediction(p)))
    if args.json:
        from dataclasses import asdict

        out = {
            "cost": asdict(cost),
            "checks": [{**asdict(c), "error": c.error} for c in checks],
            "predictions": [asdict(p) for p in predictions],
        }
        args.json.write_text(json.dumps(out, indent=2))
        print(f"predictions written to {args.json}")
    return 0
