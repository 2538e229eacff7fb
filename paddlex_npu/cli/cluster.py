"""Cluster commands (Ray): ``ray-ocr`` and ``ray-serve``, their parsers and printing.

paddlex-npu ray-ocr INPUTS... OUTPUT [--address A] [--pipeline ocr.yaml] [--npus N]   a corpus on Ray Data
paddlex-npu ray-serve PIPELINE.yaml [--address A] [--port P] [--replicas N | --autoscaling JSON]   Ray Serve

Ray itself is imported only when one of them runs (the ``ray`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from .common import Command, add_commands, fail, positive_int

RUNTIMES = ("ais_bench", "reference", "simulated")
FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


def _ray_failure(exc: BaseException) -> str:
    """The first line for an error Ray raised from the cluster (an actor that could not build its pipeline, a
    Serve deployment that failed): the original exception's line out of Ray's report, then where the rest is."""
    lines = [line.strip() for line in str(exc).splitlines()]
    causes = [m for m in map(_ERROR_LINE.match, lines) if m]
    if not causes:
        first = lines[0] if lines else repr(exc)
        return f"{type(exc).__name__}: {first}"
    name, message = causes[-1].groups()
    return f"{name}: {message} (raised on the cluster; Ray's whole report: the worker logs, `ray logs`)"


def _npus(text: str) -> Any:
    """``N`` (a fixed pool) or ``MIN-MAX`` (an autoscaling pool) of NPU actors."""
    lo, sep, hi = text.partition("-")
    try:
        if not sep:
            return positive_int(text)
        pair = (positive_int(lo), positive_int(hi))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"--npus: give N or MIN-MAX (whole numbers >= 1), got {text!r}") from None
    if pair[0] > pair[1]:
        raise argparse.ArgumentTypeError(f"--npus {text}: MIN must not exceed MAX")
    return pair


def _json_object(text: str) -> Dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): give an object, e.g. '{{\"max_replicas\": 4}}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"give a JSON object, got {text!r}")
    return value


def _output_format(output: Path, given: Optional[str]) -> str:
    if given:
        return given
    fmt = FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot tell the format of {output}: name it .parquet or .jsonl, or give --format")
    return fmt


def actor_env(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The variables of this command's environment that configure paddlex-npu and PaddleX (``PADDLEX_NPU_*``,
    ``PADDLE_PDX_*``): set for its actors too, which otherwise inherit the environment of their node's raylet."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(("PADDLEX_NPU_", "PADDLE_PDX_"))}


def _init_ray(address: Optional[str], command: str) -> None:
    from ..deps import require

    ray = require("ray", f"{command} (Ray Data, Ray Serve)")
    ray.init(address=address, log_to_driver=True)


class _Writer:
    """The rows as they come, to one Parquet or JSON-lines file on this machine."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        path.parent.mkdir(parents=True, exist_ok=True)
        self._parquet: Any = None
        self._jsonl = open(path, "w", encoding="utf-8") if fmt == "jsonl" else None

    def write(self, table: Any) -> None:
        if self._jsonl is not None:
            for row in table.to_pylist():
                self._jsonl.write(json.dumps(row, ensure_ascii=False) + "\n")
            self._jsonl.flush()
            return
        import pyarrow.parquet as pq

        if self._parquet is None:
            self._parquet = pq.ParquetWriter(str(self.path), table.schema)
        self._parquet.write_table(table)

    def close(self, schema: Any) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            return
        import pyarrow.parquet as pq

        if self._parquet is None:  # no rows at all: still a valid, empty file
            self._parquet = pq.ParquetWriter(str(self.path), schema)
        self._parquet.close()


def _cmd_ray_ocr(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError

    try:
        fmt = _output_format(args.output, args.format)
        start = time.monotonic()
        _init_ray(args.address, "ray-ocr")
        from ..ray.batch import _schema, ocr

        ds = ocr(
            [str(p) for p in args.inputs],
            str(args.pipeline),
            npus=args.npus,
            batch_size=args.batch_size,
            decode=args.decode,
            runtime=args.runtime,
            env=actor_env(),
            keep_result=not args.no_result_json,
        )
        writer = _Writer(args.output, fmt)
        rows = errors = 0
        first: Optional[float] = None
        try:
            for table in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                if first is None and table.num_rows:
                    first = time.monotonic() - start
                    print(f"paddlex-npu ray-ocr: first result after {first:.1f} s", file=sys.stderr, flush=True)
                writer.write(table)
                rows += table.num_rows
                errors += table.num_rows - table.column("error").null_count
        finally:
            writer.close(_schema())
        took = time.monotonic() - start
        print(
            f"paddlex-npu ray-ocr: {rows} row(s) ({errors} with an error) to {args.output} ({fmt}) in {took:.1f} s, "
            f"{rows / took:.2f} rows/s; first result after {first or 0:.1f} s",
            flush=True,
        )
    except (PaddlexNpuError, ValueError, OSError) as exc:
        return fail("ray-ocr", exc)
    except Exception as exc:  # Ray's errors from the cluster; anything else is a bug: raised
        if not _is_ray_error(exc):
            raise
        return fail("ray-ocr", _ray_failure(exc))
    return 0


def _is_ray_error(exc: BaseException) -> bool:
    from ray.exceptions import RayError

    return isinstance(exc, RayError)


def _ray_ocr_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", type=Path, help="image or PDF files, folders of them, glob patterns")
    p.add_argument("output", type=Path, help="the result file on this machine: .parquet or .jsonl, one row a page")
    p.add_argument("--address", help="the Ray cluster (ray start's address, or auto) (default: a local Ray)")
    p.add_argument("--pipeline", default="OCR", help="PaddleX pipeline name or YAML (model_dir: OM packages)")
    p.add_argument("--npus", type=_npus, default=1, help="NPU actors, one NPU each: N, or MIN-MAX to autoscale")
    p.add_argument("--batch-size", type=positive_int, default=4, help="inputs per Ray Data batch")
    p.add_argument(
        "--decode",
        choices=("tasks", "actor"),
        default="tasks",
        help="decode images and PDF pages in CPU tasks before the NPU actors, or in the actors",
    )
    p.add_argument("--format", choices=("parquet", "jsonl"), help="(default: from OUTPUT's suffix)")
    p.add_argument("--runtime", choices=RUNTIMES, help="PADDLEX_NPU_RUNTIME of the actors (default: ais_bench)")
    p.add_argument("--no-result-json", action="store_true", help="leave out the `result` column (the whole JSON)")


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass


def _cmd_ray_serve(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError

    try:
        _init_ray(args.address, "ray-serve")
        from ray import serve

        from ..ray.serving import deployment, run_deployment

        app = deployment(
            args.pipeline,
            name=args.name,
            runtime=args.runtime,
            env=actor_env(),
            num_replicas=args.replicas,
            autoscaling_config=args.autoscaling,
            max_ongoing_requests=args.max_ongoing_requests,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            max_image_pixels=args.max_image_pixels,
        )
        url = run_deployment(app, host=args.host, port=args.port, name=args.name)
        replicas = f"autoscaling {json.dumps(args.autoscaling)}" if args.autoscaling else f"{args.replicas or 1}"
        print(f"paddlex-npu ray-serve: {url} ({replicas} replica(s), one NPU each); Ctrl-C stops", flush=True)
        _wait_for_signal()
        serve.delete(args.name)
        print("paddlex-npu ray-serve: stopped", flush=True)
    except (PaddlexNpuError, ValueError, OSError) as exc:
        return fail("ray-serve", exc)
    except RuntimeError as exc:  # Serve's "Deploying application ... failed": the replica's error follows
        return fail("ray-serve", _ray_failure(exc))
    return 0


def _ray_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", help="PaddleX pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("--address", help="the Ray cluster (ray start's address, or auto) (default: a local Ray)")
    p.add_argument("--host", default="127.0.0.1", help="where Serve's HTTP proxy listens (head node)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--name", default="paddlex-npu", help="the Serve application's name")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--replicas", type=positive_int, help="a fixed number of replicas")
    group.add_argument(
        "--autoscaling",
        type=_json_object,
        help='Serve\'s autoscaling_config as JSON, e.g. \'{"min_replicas": 1, "max_replicas": 8}\'',
    )
    p.add_argument("--max-ongoing-requests", type=positive_int, default=4, help="requests queued per replica")
    p.add_argument("--runtime", choices=RUNTIMES, help="backend_config runtime of the replicas")
    p.add_argument("--max-body-mb", type=float, default=64, help="largest request body (413 above)")
    from ..serve.images import DEFAULT_MAX_IMAGE_PIXELS

    p.add_argument(
        "--max-image-pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS, help="largest decoded image (422 above)"
    )


COMMANDS = (
    Command(
        "ray-ocr",
        "OCR a corpus on a Ray cluster's NPUs (Ray Data), to Parquet or JSON lines",
        _cmd_ray_ocr,
        _ray_ocr_args,
        example="paddlex-npu ray-ocr pages/ texts.parquet --address auto",
    ),
    Command(
        "ray-serve",
        "serve a pipeline on a Ray cluster's NPUs (Ray Serve, PaddleX's schema)",
        _cmd_ray_serve,
        _ray_serve_args,
        example="paddlex-npu ray-serve ocr.yaml --address auto",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
