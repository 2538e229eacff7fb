"""Memory over many calls: RSS printed at intervals, and its growth after warm-up (target < 5%).

- ``rec``: ``--calls`` text-recognition calls (PaddleX's PP-OCRv4 rec predictor on the NPU route, one rendered
  text line per call, cycling over ``--distinct`` lines), RSS of this process;
- ``pages``: ``--pages`` rendered pages of mixed sizes (``--distinct`` of them: 4 to 24 lines, 600 to 1400 px
  wide) through the executor (OCR pipeline, ``--workers`` workers on one device), RSS of the parent plus every
  worker, and on the simulated device the workers' device memory as ais_bench allocates it
  (``paddlex_npu.run.simulated.DeviceMemory``, published per process as ``npu-smi`` lists it);
- ``serve``: the same pages posted to a real ``paddlex-npu serve`` (``--workers`` workers, two clients), RSS of
  the server and its workers, and the workers' device memory.

The runtime is the simulated device (replayed outputs: a device-time model, no model compute) unless
``--runtime reference``. Growth is measured from the first sample after the warm-up (10% of the calls) to the last.

    python benchmarks/memory.py rec --calls 10000
    python benchmarks/memory.py pages --pages 1000 --workers 2
    python benchmarks/memory.py serve --pages 1000 --workers 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable, List

from paddlex_npu.samples import assets, env


def rss_mib(pids: Iterable[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024.0


def _report(samples: List[tuple], warm: int) -> float:
    """Print the samples (calls, seconds, RSS MiB[, device MiB, device peak MiB]); return the RSS growth in % from
    the first sample at or after ``warm`` calls to the last, and print the device memory's."""
    for n, seconds, mib, *device in samples:
        dev = f"  device {device[0]:>8.1f} MiB (peak {device[1]:.1f})" if device else ""
        print(f"{n:>8} calls {seconds:>8.1f} s  RSS {mib:>8.1f} MiB{dev}")
    first = next(s for s in samples if s[0] >= warm)
    growth = 100.0 * (samples[-1][2] - first[2]) / first[2]
    print(f"RSS growth after warm-up ({warm} calls): {growth:+.2f}% (target < 5%): {'OK' if growth < 5 else 'ABOVE'}")
    if len(first) > 3:
        print(f"device memory after warm-up: {first[3]:.1f} -> {samples[-1][3]:.1f} MiB (peak {samples[-1][4]:.1f})")
    return growth


def device_mib(pids: Iterable[int]) -> tuple:
    """The simulated device's memory of these processes (MiB in use between calls, MiB at peak), summed."""
    from paddlex_npu.run import simulated

    figures = simulated.device_memory_of(list(pids)).values()
    return sum(f["bytes"] for f in figures) / 2**20, sum(f["peak_bytes"] for f in figures) / 2**20


def mixed_pages(folder: Path, count: int) -> List[str]:
    """``count`` pages of mixed sizes: 4 to 24 lines, 600 to 1400 px wide (a different text on each)."""
    words = "invoice total amount due order shipped warehouse payment within thirty days".split()
    pages = []
    for k in range(count):
        lines = [
            f"{words[(k + i) % len(words)].title()} {words[(3 * k + i) % len(words)]} {1000 + 37 * k + i}"
            for i in range(4 + (k * 5) % 21)
        ]
        path = folder / f"mixed{k:03d}.png"
        pages.append(str(assets.render_text_image(lines, path, size=28, width=600 + (k * 137) % 801)))
    return pages


def run_rec(calls: int, distinct: int, every: int, root: Path) -> float:
    from paddlex import create_model

    folder = Path(tempfile.mkdtemp(prefix="paddlex-npu-mem-"))
    lines = [
        str(assets.render_text_image([f"Line {k} total {1000 + 37 * k}.50"], folder / f"l{k}.png"))
        for k in range(distinct)
    ]
    model = create_model(
        model_name=assets.REC,
        model_dir=str(root / assets.REC),
        device="npu:0",
        use_hpip=True,
        hpi_config={"backend": "om", "device_type": "npu"},
    )
    samples, start = [], time.perf_counter()
    for n in range(1, calls + 1):
        list(model.predict(lines[n % distinct]))
        if n % every == 0 or n == calls:
            samples.append((n, time.perf_counter() - start, rss_mib([os.getpid()])))
    return _report(samples, calls // 10)


def run_pages(pages: int, workers: int, distinct: int, every: int, root: Path) -> float:
    from paddlex_npu import ParallelExecutor

    folder = Path(tempfile.mkdtemp(prefix="paddlex-npu-mem-"))
    paths = mixed_pages(folder, distinct)
    samples, start = [], time.perf_counter()
    with ParallelExecutor(assets.ocr_pipeline_config(root), workers_per_device=workers) as ex:
        inputs = (paths[k % distinct] for k in range(pages))
        for r in ex.map(inputs):
            n = r.index + 1
            assert r.ok, r.error
            if n % every == 0 or n == pages:
                pids = [os.getpid(), *ex.worker_pids]
                samples.append((n, time.perf_counter() - start, rss_mib(pids), *device_mib(ex.worker_pids)))
    return _report(samples, pages // 10)


def run_serve(pages: int, workers: int, distinct: int, every: int, root: Path) -> float:
    import base64
    import json
    from concurrent.futures import ThreadPoolExecutor

    import yaml
    from serve_faults import Server, _children

    folder = Path(tempfile.mkdtemp(prefix="paddlex-npu-mem-"))
    config = assets.ocr_pipeline_config(root)
    config["Serving"] = {"visualize": False}
    (folder / "ocr.yaml").write_text(yaml.safe_dump(config))
    bodies = [
        json.dumps({"file": base64.b64encode(Path(p).read_bytes()).decode(), "fileType": 1}).encode()
        for p in mixed_pages(folder, distinct)
    ]
    server = Server(folder / "ocr.yaml", folder, workers, os.environ["PADDLEX_NPU_RUNTIME"])
    samples, start = [], time.perf_counter()
    try:
        with ThreadPoolExecutor(2) as clients:
            for n, (status, _) in enumerate(clients.map(server.post, (bodies[k % distinct] for k in range(pages))), 1):
                assert status == 200, (status, server.log.read_text()[-2000:])
                if n % every == 0 or n == pages:
                    kids = _children(server.proc.pid)
                    rss = rss_mib([server.proc.pid, *kids])
                    samples.append((n, time.perf_counter() - start, rss, *device_mib(kids)))
    finally:
        server.stop()
    return _report(samples, pages // 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("rec", "pages", "serve"))
    parser.add_argument("--calls", type=int, default=10000, help="rec: recognition calls")
    parser.add_argument("--pages", type=int, default=1000, help="pages: pages through the executor")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--distinct", type=int, default=20, help="distinct inputs cycled over")
    parser.add_argument("--every", type=int, default=0, help="print RSS every N calls (default: 20 samples)")
    parser.add_argument("--runtime", default="simulated", choices=("simulated", "reference"))
    args = parser.parse_args()
    env.prepare(default_runtime=False)
    os.environ["PADDLEX_NPU_RUNTIME"] = args.runtime
    os.environ.setdefault("PADDLEX_NPU_SIM_LOCKS", tempfile.mkdtemp())
    root = assets.build_model_folders() / "om"
    import paddlex_npu  # noqa: F401  (the route, when PaddleX loads)

    n = args.calls if args.what == "rec" else args.pages
    every = args.every or max(1, n // 20)
    print(f"{args.what}: {n} calls, runtime {args.runtime}, {os.cpu_count()} cores")
    if args.what == "rec":
        run_rec(args.calls, args.distinct, every, root)
    else:
        run = run_pages if args.what == "pages" else run_serve
        run(args.pages, args.workers, args.distinct, every, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
