"""Issue 35's figures: the OCR pipeline on the simulated device with the recognition output reduced on the device
(``convert``'s default) and not (``--no-reduce``), in interleaved rounds of one run, and PaddleX's own CPU
pipeline (onnxruntime) on the same pages for its host work (pre + post + rest, the model call left out).

    PYTHONPATH=. .venv/bin/python benchmarks/ctc_reduction.py [--rounds 3] [--pages 8] [--json out.json]

Per variant (median round by pages/s): bytes per text line crossing the device boundary (device to host), the
simulated copy time per page, the route's host CPU per page, pages/s serial and with the executor.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from paddlex_npu.build.convert import convert
from paddlex_npu.perf.benchmark import SERIAL, median_round, run_benchmark
from paddlex_npu.samples import assets, env

VARIANTS = {"reduced": {}, "full": {"reduce": False}}


def packages(root: Path, out: Path, det: str, rec: str) -> Dict[str, Path]:
    """Per variant, a folder of OM packages: the bundled ones, ``rec`` converted with or without the reduction."""
    folders = {}
    for name, options in VARIANTS.items():
        folder = out / name
        shutil.copytree(root / "om", folder)
        shutil.rmtree(folder / rec)
        convert(root / "om" / rec, folder / rec, "Ascend310P3", "dymshape", run=False, **options)
        folders[name] = folder
    return folders


def lines_per_page(config: Dict[str, Any], pages: List[str]) -> float:
    from paddlex import create_pipeline

    p = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config={"backend": "om"})
    try:
        return sum(len(next(iter(p.predict(x)))["rec_texts"]) for x in pages) / len(pages)
    finally:
        p.close()


class _Timed:
    """A PaddleX runner whose calls' thread CPU time is summed (the model call, left out of the host work)."""

    def __init__(self, runner: Any) -> None:
        self.runner, self.seconds = runner, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        c0 = time.thread_time()
        try:
            return self.runner(*args, **kwargs)
        finally:
            self.seconds += time.thread_time() - c0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)


def paddlex_host_ms(config: Dict[str, Any], pages: List[str], repeat: int) -> float:
    """PaddleX's own CPU pipeline (onnxruntime): the main thread's CPU per page outside the model calls (pre +
    post + rest as CPU time, so a busy machine does not inflate it as it does wall times)."""
    from paddlex import create_pipeline

    p = create_pipeline(config=config, device="cpu", engine="onnxruntime")
    try:
        models = (p.text_det_model, p.text_rec_model)
        timed = [_Timed(m.runner) for m in models]
        for m, t in zip(models, timed):
            m.runner = t
        for x in pages:
            list(p.predict(x))
        model0, c0 = sum(t.seconds for t in timed), time.thread_time()
        for _ in range(repeat):
            for x in pages:
                list(p.predict(x))
        host = time.thread_time() - c0 - (sum(t.seconds for t in timed) - model0)
        return host * 1000.0 / (repeat * len(pages))
    finally:
        p.close()


def figures(report: Any, rec: str, lines: float) -> Dict[str, float]:
    serial = report.serial
    executor = next(r for r in report.routes if r.route != SERIAL and r.engine == "om")
    m = report.models[rec]
    return {
        "bytes_per_line": m["bytes_out"] / lines,
        "transfer_ms_per_page": sum(x.get("transfer_ms", 0.0) for x in report.models.values()),
        "device_ms_per_page": serial.device_ms,
        "host_cpu_ms_per_page": serial.host_ms,
        "serial_pages_per_s": serial.images_per_s,
        "executor_pages_per_s": executor.images_per_s,
        "executor_workers": executor.workers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rec", default=assets.REC_V5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env.prepare(default_runtime=False)
    os.environ["PADDLEX_NPU_RUNTIME"] = "simulated"
    root, work = assets.build_model_folders(), Path(tempfile.mkdtemp(prefix="ctc-bench-"))
    pages = [str(p) for p in assets.render_pages(work / "pages", args.pages)]
    folders = packages(root, work, assets.DET, args.rec)
    configs = {k: assets.ocr_pipeline_config(f, rec=args.rec, det=assets.DET) for k, f in folders.items()}
    lines = lines_per_page(configs["reduced"], pages)
    rounds: Dict[str, List[Dict[str, float]]] = {k: [] for k in configs}
    out: Dict[str, Any] = {"lines_per_page": lines, "rounds": rounds, "load_1min": [os.getloadavg()[0]]}
    own = assets.ocr_pipeline_config(root / "om", rec=args.rec)
    for _ in range(args.rounds):
        out.setdefault("paddlex_cpu_host_ms", []).append(paddlex_host_ms(own, pages, args.repeat))
        for name, config in configs.items():
            rep = run_benchmark(config, pages, workers=(args.workers,), repeat=args.repeat)
            rounds[name].append(figures(rep, args.rec, lines))
            out.update({k: median_round(v, lambda f: f["serial_pages_per_s"]) for k, v in rounds.items() if v})
            out.update(load_1min=out["load_1min"] + [os.getloadavg()[0]], pages=rep.input_desc, cores=os.cpu_count())
            text = json.dumps(out, indent=2)
            print(text, flush=True)
            if args.json:  # after every run: a long run on a busy machine keeps what it measured
                args.json.write_text(text)


if __name__ == "__main__":
    main()
