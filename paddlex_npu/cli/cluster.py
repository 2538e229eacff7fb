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
from typing import Any, Dict, Optional, Tuple

from .. import runtimes
from ..ray.connect import DEFAULT_CONNECT_TIMEOUT
from .common import Command, add_commands, fail, positive_int

RUNTIMES = runtimes.NAMES
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


def _output(output: str, given: Optional[str]) -> Tuple[bool, str]:
    """(one local file?, format) of OUTPUT: a name ending .parquet or .jsonl is one file on this machine; a name
    without a suffix (or any name with --format) is a folder Ray's writers fill."""
    suffix = Path(output).suffix.lower()
    if suffix in FORMATS:
        return True, given or FORMATS[suffix]
    if suffix and not given:
        raise ValueError(
            f"cannot tell the format of {output}: name it .parquet or .jsonl (one local file), give a folder "
            "without a suffix (Ray writes its files there), or give --format"
        )
    return False, given or "parquet"


def _init_ray(address: Optional[str], command: str, timeout: float) -> None:
    """Connect to the cluster within ``timeout`` seconds: the head dialled first (:mod:`..ray.connect`), then
    ``ray.init`` under a watchdog that ends the command with the reason if Ray still waits."""
    from ..deps import require

    ray = require("ray", f"{command} (Ray Data, Ray Serve)")
    from ..ray.connect import probe_head

    head = probe_head(address, timeout)

    def expired() -> None:
        print(
            f"paddlex-npu {command}: Ray did not connect to the cluster at {head or address} within {timeout:g} s "
            "(its warnings above say why): check that each node's advertised address is reachable from here "
            "(ray start --node-ip-address), or give --address HOST:PORT; a longer --connect-timeout for a slow head",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    watchdog = threading.Timer(timeout, expired)
    watchdog.daemon = True
    watchdog.start()
    try:
        ray.init(address=address, log_to_driver=True)
    finally:
        watchdog.cancel()


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


class _Progress:
    """Rows done and rows per second on stderr every ``every`` seconds while a job runs (from its ledger)."""

    def __init__(self, job: Any, every: float) -> None:
        self.job, self.every = job, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paddlex-npu-progress", daemon=True)

    def __enter__(self) -> _Progress:
        if self.every > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                rows, errors, seconds = self.job.progress()
            except Exception:  # the ledger is a best-effort count: never a reason to stop the job
                continue
            rate = rows / seconds if seconds > 0 else 0.0
            print(
                f"paddlex-npu ray-ocr: {rows} row(s) done ({errors} with an error), {rate:.2f} rows/s",
                file=sys.stderr,
                flush=True,
            )


def _single_file(job: Any, output: Path, fmt: str) -> Tuple[int, int]:
    """The rows through the driver into one local file (small jobs): (rows, rows with an error)."""
    from ..ray.batch import _schema

    writer = _Writer(output, fmt)
    rows = errors = 0
    try:
        for table in job.dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            writer.write(table)
            rows += table.num_rows
            errors += table.num_rows - table.column("error").null_count
    finally:
        writer.close(_schema())
    return rows, errors


def _ocr_options(args: argparse.Namespace) -> Any:
    from ..ray.batch import OcrOptions

    return OcrOptions(
        npus=args.npus,
        batch_size=args.batch_size,
        decode=args.decode,
        decode_cpus=args.decode_cpus,
        actor_cpus=args.actor_cpus,
        decode_threads=args.decode_threads,
        actor_threads=args.actor_threads,
        runtime=args.runtime,
        keep_result=not args.no_result_json,
        max_image_pixels=args.max_image_pixels,
        max_request_pixels=args.max_request_pixels,
        input_retries=args.input_retries,
        accelerator_type=None if args.accelerator_type == "any" else args.accelerator_type,
    )


def _cmd_ray_ocr(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError

    try:
        single, fmt = _output(args.output, args.format)
        start = time.monotonic()
        _init_ray(args.address, "ray-ocr", args.connect_timeout)
        from ..ray.batch import ocr_job, write_rows

        job = ocr_job(args.inputs, args.pipeline, _ocr_options(args))
        with _Progress(job, args.progress_every):
            if single:
                rows, errors = _single_file(job, Path(args.output), fmt)
            else:
                write_rows(job, args.output, fmt)
                rows, errors, _ = job.progress()
        took = time.monotonic() - start
        where = f"{args.output} ({fmt}{'' if single else ' files, written by Ray'})"
        print(
            f"paddlex-npu ray-ocr: {rows} row(s) ({errors} with an error) to {where} in {took:.1f} s, "
            f"{rows / took:.2f} rows/s",
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


def _common_ray_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="the Ray cluster (ray start's address, or auto) (default: a local Ray)")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT,
        help="seconds to reach the Ray head before giving up with the reason",
    )


def _ray_ocr_args(p: argparse.ArgumentParser) -> None:
    from ..ray.ledger import DEFAULT_INPUT_RETRIES
    from ..serve.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS

    p.add_argument("inputs", nargs="+", help="image or PDF files, or folders of them (paths or URIs, e.g. s3://b/c)")
    p.add_argument(
        "output",
        help="a folder (path or URI) Ray's writers fill with Parquet or JSON-lines files; or, for small jobs, one "
        "local file named .parquet or .jsonl that this machine writes",
    )
    _common_ray_args(p)
    p.add_argument("--pipeline", default="OCR", help="PaddleX pipeline name or YAML (model_dir: OM packages)")
    p.add_argument("--npus", type=_npus, default=1, help="NPU actors, one NPU each: N, or MIN-MAX to autoscale")
    p.add_argument("--batch-size", type=positive_int, default=4, help="inputs per Ray Data batch")
    p.add_argument(
        "--decode",
        choices=("tasks", "actor"),
        default="tasks",
        help="decode images and PDF pages in CPU tasks before the NPU actors, or in the actors",
    )
    p.add_argument("--actor-cpus", type=float, default=1.0, help="CPUs each NPU actor reserves")
    p.add_argument("--decode-cpus", type=float, default=1.0, help="CPUs each read or decode task takes")
    p.add_argument("--actor-threads", type=positive_int, help="OMP_NUM_THREADS and the like in the NPU actors")
    p.add_argument("--decode-threads", type=positive_int, help="the same in the read and decode tasks")
    p.add_argument(
        "--max-image-pixels",
        type=positive_int,
        default=DEFAULT_MAX_IMAGE_PIXELS,
        help="largest image or PDF page, read from the file's header before decoding (an error row above)",
    )
    p.add_argument(
        "--max-request-pixels",
        type=positive_int,
        default=DEFAULT_MAX_REQUEST_PIXELS,
        help="largest sum of one input's pages or frames (an error row above)",
    )
    p.add_argument(
        "--input-retries",
        type=int,
        default=DEFAULT_INPUT_RETRIES,
        help="times an input that killed its worker is tried again before it is an error row",
    )
    p.add_argument(
        "--accelerator-type",
        default="auto",
        help="the chip the NPU actors run on: auto (the OM packages' soc_version), a name (e.g. Ascend310P3), or any",
    )
    p.add_argument("--format", choices=("parquet", "jsonl"), help="(default: from OUTPUT's suffix, else parquet)")
    p.add_argument("--runtime", choices=RUNTIMES, help="PADDLEX_NPU_RUNTIME of the actors (default: ais_bench)")
    p.add_argument("--no-result-json", action="store_true", help="leave out the `result` column (the whole JSON)")
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines (0: none)")


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(3600):
        pass


def _cmd_ray_serve(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..serve.auth import AccessTokens
    from .serve import tls_files, url_policy

    try:
        urls = url_policy(args, args.max_body_mb, "ray-serve")
        tokens = AccessTokens.load(args.token_file, args.metrics_token_file)
        tls = tls_files(args)
        _init_ray(args.address, "ray-serve", args.connect_timeout)
        from ray import serve

        from ..ray.plan import forwarded_env
        from ..ray.serving import deployment, run_deployment

        app = deployment(
            args.pipeline,
            name=args.name,
            runtime=args.runtime,
            env=forwarded_env(),
            num_replicas=args.replicas,
            autoscaling_config=args.autoscaling,
            max_ongoing_requests=args.max_ongoing_requests,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            max_image_pixels=args.max_image_pixels,
            urls=urls,
            tokens=tokens,
        )
        url = run_deployment(
            app,
            host=args.host,
            port=args.port,
            name=args.name,
            proxy_location=args.proxy_location,
            tls=tls if tls[0] else None,
        )
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
    from .serve import access_args, url_args

    p.add_argument("pipeline", help="PaddleX pipeline YAML (model_dir of each SubModule: an OM package)")
    _common_ray_args(p)
    p.add_argument("--host", default="127.0.0.1", help="where Serve's HTTP proxies listen")
    p.add_argument(
        "--proxy-location",
        choices=("EveryNode", "HeadOnly", "Disabled"),
        default="EveryNode",
        help="Serve's HTTP proxies: on every node (no request's bytes through one head), the head only, or none",
    )
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
    url_args(p, "ray-serve")
    access_args(p)


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
