"""Batch OCR on Ray Data against the executor, on this machine, with the same number of workers.

Starts a two-node local Ray cluster (``ray.cluster_utils.Cluster`` on 127.0.0.1, one simulated NPU per node),
renders ``--pages`` pages, records the simulated device's outputs once (a warm-up pass), then measures:

- the executor (:class:`paddlex_npu.ParallelExecutor`, npu:0,1, one worker each);
- :func:`paddlex_npu.ray.ocr` with 2 NPU actors, decoding in CPU tasks before the actors (``decode="tasks"``)
  and in the actors (``decode="actor"``);
- ``paddlex-npu ray-ocr`` as a user starts it: the time of the whole command (its summary line).

For each: pages/s end to end (Ray: including the actors' start, which loads the pipeline), pages/s in steady
state (after the first quarter of the pages), the pipeline's own seconds per page inside the workers, and the
rest of each page's wall time per worker (for Ray: its own overhead per page: scheduling, object store, Arrow
conversion). The machine's load average is printed before and after: other work on the machine shows in all
figures alike. Target: Ray steady state >= 0.8x the executor's.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 python benchmarks/ray_ocr.py [--pages 32] [--lines 12]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only (read when ray is imported)

import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Dict, List, Tuple  # noqa: E402

from paddlex_npu.samples import assets, env  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NODE = {"num_cpus": 2, "object_store_memory": 256 * 1024 * 1024}


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def _steady(arrivals: List[float]) -> float:
    """Pages/s after the first quarter of the pages (arrival times in seconds, sorted)."""
    skip = len(arrivals) // 4
    span = arrivals[-1] - arrivals[skip]
    return (len(arrivals) - 1 - skip) / span if span > 0 else float("nan")


def _figures(name: str, start: float, arrivals: List[float], seconds: List[float], workers: int) -> Dict:
    arrivals = sorted(a - start for a in arrivals)
    steady = _steady(arrivals)
    inside = statistics.mean(seconds)
    return {
        "name": name,
        "end_to_end": len(arrivals) / arrivals[-1],
        "steady": steady,
        "first": arrivals[0],
        "inside": inside,
        "overhead": workers / steady - inside,
    }


def run_executor(config, pages: List[str], sim_env: Dict[str, str], threads: str = "") -> Dict:
    from paddlex_npu import ParallelExecutor

    start = time.monotonic()
    worker_env = {**sim_env, "OMP_NUM_THREADS": threads} if threads else sim_env
    with ParallelExecutor(config, devices=(0, 1), runtime="simulated", env=worker_env) as ex:
        ready = time.monotonic()
        arrivals, seconds = [], []
        for r in ex.map(pages):
            assert r.ok, r.error
            arrivals.append(time.monotonic())
            seconds.append(r.timing["seconds"])
    name = "executor (2 workers, npu:0,1" + (f", OMP_NUM_THREADS={threads})" if threads else ")")
    out = _figures(name, ready, arrivals, seconds, 2)
    out["startup"] = ready - start
    return out


def run_ray(config, pages: List[str], sim_env: Dict[str, str], decode: str) -> Dict:
    from paddlex_npu.ray import ocr

    start = time.monotonic()
    arrivals, seconds = [], []
    for row in ocr(pages, config, npus=2, batch_size=1, decode=decode, env=sim_env, keep_result=False).iter_rows():
        assert row["error"] is None, row["error"]
        arrivals.append(time.monotonic())
        seconds.append(row["seconds"])
    return _figures(f"ray data (2 NPU actors, decode={decode})", start, arrivals, seconds, 2)


def run_cli(address: str, folder: Path, pipeline: Path, sim_env: Dict[str, str]) -> Tuple[float, str]:
    out = folder.parent / "out.parquet"
    cmd = [sys.executable, "-m", "paddlex_npu.cli", "ray-ocr", str(folder), str(out), "--address", address]
    cmd += ["--pipeline", str(pipeline), "--npus", "2", "--batch-size", "1", "--no-result-json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, **sim_env}, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"ray-ocr failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("paddlex-npu ray-ocr:"))
    return took, line


def decode_ms(pages: List[str]) -> float:
    """OpenCV's decode time per page (what the CPU tasks take off the NPU actors)."""
    import cv2
    import numpy as np

    data = [Path(p).read_bytes() for p in pages]
    start = time.perf_counter()
    for d in data:
        cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_COLOR)
    return (time.perf_counter() - start) / len(data) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=32)
    parser.add_argument("--lines", type=int, default=12)
    args = parser.parse_args()

    env.prepare(assets_dir=REPO / ".cache" / "assets", default_runtime=False)
    import ray
    import yaml
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="ray_ocr_bench-"))
    config = assets.ocr_pipeline_config(assets.build_model_folders() / "om")
    pipeline = work / "ocr.yaml"
    pipeline.write_text(yaml.safe_dump(config), encoding="utf-8")
    pages = [str(p) for p in assets.render_pages(work / "pages", args.pages, lines=args.lines)]
    sim_env = {
        "PADDLEX_NPU_RUNTIME": "simulated",
        "PADDLEX_NPU_SIM_STORE": str(REPO / ".cache" / "simulated"),
        "PADDLEX_NPU_SIM_LOCKS": str(work / "locks"),
    }
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; {_load()}", flush=True)
    print(f"{len(pages)} pages of {args.lines} lines; simulated NPUs; decode {decode_ms(pages):.1f} ms/page (cv2)")

    run_executor(config, pages, sim_env)  # records the simulated device's outputs: every run after replays
    results = [run_executor(config, pages, sim_env)]
    print(f"executor ready after {results[0]['startup']:.1f} s; {_load()}", flush=True)
    results.append(run_executor(config, pages, sim_env, threads="1"))  # as Ray sets it for a 1-CPU actor
    print(f"executor (OMP_NUM_THREADS=1) done; {_load()}", flush=True)

    head = {**NODE, "resources": {"NPU": 1}, "env_vars": {"ASCEND_RT_VISIBLE_DEVICES": "0"}}
    cluster = Cluster(initialize_head=True, head_node_args={**head, "include_dashboard": False})
    try:
        cluster.add_node(**NODE, resources={"NPU": 1}, env_vars={"ASCEND_RT_VISIBLE_DEVICES": "1"})
        ray.init(address=cluster.address, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        run_ray(config, pages[:4], sim_env, "tasks")  # warm-up: Ray's worker processes start and import once
        for decode in ("tasks", "actor"):
            results.append(run_ray(config, pages, sim_env, decode))
            print(f"{results[-1]['name']} done; {_load()}", flush=True)
        cli_took, cli_line = run_cli(cluster.address, Path(pages[0]).parent, pipeline, sim_env)
    finally:
        ray.shutdown()
        cluster.shutdown()

    base = results[0]["steady"]
    head = f"{'pages/s e2e':>11} {'steady':>8} {'vs exec':>8} {'first s':>8} {'in-pipe s':>9} {'other s':>8}"
    print(f"\n{'route':56} {head}")
    for r in results:
        print(
            f"{r['name']:56} {r['end_to_end']:11.2f} {r['steady']:8.2f} {r['steady'] / base:7.2f}x "
            f"{r['first']:8.1f} {r['inside']:9.3f} {r['overhead']:8.3f}"
        )
    print("(first s: executor from ready, Ray from the ocr() call, actors' start included; in-pipe s: the")
    print(" pipeline's seconds per page inside a worker; other s: the rest of a page's wall time per worker)")
    print(f"ray-ocr command: {cli_took:.1f} s in all; {cli_line}")
    print(_load())


if __name__ == "__main__":
    main()
