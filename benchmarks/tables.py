"""Tables per second with PaddleX's table_recognition pipeline (SLANet_plus + PP-OCRv6 small det/rec): on the NPU
route (CPU reference runtime, and the simulated device) and on PaddleX's own onnxruntime engine, from the same
weights; for the route, the share of the time spent in the decoder's host loop (one device call per decoded
token, each charged its modelled launch, 0.469 ms, and PCIe copies on the simulated device).

    python benchmarks/tables.py [--repeat 3]

Needs ``paddlex[ocr]`` (the pipeline's own requirement) and the sample folders (``paddlex-npu assets``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

from paddlex_npu.samples import env

os.environ.setdefault("PADDLEX_NPU_RUNTIME", "reference")
env.prepare()

import paddlex_npu  # noqa: E402,F401  (installs the route)
from paddlex_npu.paddlex.patcher import adapter  # noqa: E402
from paddlex_npu.samples import assets, table_model  # noqa: E402


@contextlib.contextmanager
def timed(session: Any, spent: List[float]) -> Iterator[None]:
    """Add the seconds of every ``session.infer`` to ``spent``."""
    original = session.infer

    def infer(*args: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kw)
        finally:
            spent.append(time.perf_counter() - start)

    session.infer = infer
    try:
        yield
    finally:
        session.infer = original


def _run(pipeline: Any, tables: List[Path], repeat: int, route: bool) -> Dict[str, float]:
    list(pipeline.predict(str(tables[0])))  # warm-up
    step: List[float] = []
    calls = contextlib.nullcontext()
    if route:
        runner = adapter().static_infer_of(pipeline.table_structure_model)
        calls = timed(runner.loop.step.session, step)
    with calls:
        start = time.perf_counter()
        for _ in range(repeat):
            for path in tables:
                list(pipeline.predict(str(path)))
        wall = time.perf_counter() - start
    n = repeat * len(tables)
    out = {"tables/s": n / wall, "s/table": wall / n}
    if route:
        out.update({"steps/table": len(step) / n, "host loop share": sum(step) / wall})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds over the four sample tables (default: 3)")
    args = parser.parse_args()
    from paddlex import create_pipeline

    from paddlex_npu.paddlex.pipelines import cpu_route
    from paddlex_npu.samples.tables import sample_tables

    root = table_model.build_table_folders(assets.build_model_folders())
    det, rec = assets.DET_V6_SMALL, assets.REC_V6_SMALL
    tables = list(sample_tables(Path(tempfile.mkdtemp(prefix="tables-"))).values())
    rows = {}
    for label, runtime in (("route, reference runtime", "reference"), ("route, simulated device", "simulated")):
        hpi = {"backend": "om", "device_type": "npu", "device_id": 0, "backend_config": {"runtime": runtime}}
        config = table_model.table_pipeline_config(root / "om" / table_model.TABLE, root / "om", det, rec)
        p = create_pipeline(config=config, device="npu:0", use_hpip=True, hpi_config=hpi)
        try:
            rows[label] = _run(p, tables, args.repeat, route=True)
        finally:
            p.close()
    config = table_model.table_pipeline_config(root / "paddle" / table_model.TABLE, root / "paddle", det, rec)
    p = cpu_route(config, "onnxruntime")
    try:
        rows["PaddleX onnxruntime (CPU)"] = _run(p, tables, args.repeat, route=False)
    finally:
        p.close()
    for label, row in rows.items():
        print(f"{label:28s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
