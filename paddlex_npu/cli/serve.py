"""Serving commands: ``serve`` (PaddleX's serving app on the NPU route), ``triton-repo`` and ``triton-serve``."""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from typing import Any, Optional, Tuple

from .. import runtimes
from .common import Command, add_commands, fail, positive_int, positive_number, seconds_or_zero


def run_serve(args: argparse.Namespace) -> int:
    from ..deps import require
    from ..errors import PaddlexNpuError, WorkerStartError
    from ..log import configure_logging
    from ..paddlex.pipelines import check_route_config, load_config
    from ..serve.http import serve
    from ..serve.route import parse_devices

    try:
        configure_logging(args.log_level, args.log_format)  # first: load_config may import PaddleX, which logs
        check_port(args.host, args.port)  # before anything loads: a port in use fails in a second, not after loading
        for module in ("fastapi", "uvicorn"):  # PaddleX's serving app: its `serving` extra, not installed by default
            require(module, "paddlex-npu serve")
        options = _serve_options(args, tuple(parse_devices(args.device)))
        config = load_config(args.pipeline)
        check_route_config(config, str(args.pipeline))
        start = time.monotonic()
        workers = options.server.workers * len(options.server.devices)
        print(
            f"paddlex-npu serve: loading the pipeline in {workers} worker process(es) (/ready answers 503 until "
            "they are loaded; tens of seconds each on a busy CPU)",
            flush=True,
        )
        serve(
            config,
            options,
            on_ready=lambda url: print(
                f"paddlex-npu serve: {url} ({options.server.workers} worker(s) on each of "
                f"npu:{','.join(map(str, options.server.devices))}, loaded in {time.monotonic() - start:.0f} s)",
                flush=True,
            ),
        )
    except WorkerStartError as exc:
        return fail("serve", RuntimeError(cause_first_and_last(str(exc))))
    except (PaddlexNpuError, ValueError) as exc:
        return fail("serve", exc)
    return 0


def _serve_options(args: argparse.Namespace, devices: tuple):
    from ..serve.auth import AccessTokens
    from ..serve.settings import AppSettings, ServeOptions, ServerSettings

    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    certfile, keyfile = tls_files(args)
    app = AppSettings(
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        max_image_pixels=args.max_image_pixels,
        max_request_pixels=args.max_request_pixels,
        max_queue=args.max_queue,
        urls=url_policy(args, args.max_body_mb, "serve"),
        tokens=AccessTokens.load(args.token_file, args.metrics_token_file),
    )
    server = ServerSettings(
        host=args.host,
        port=args.port,
        workers=args.workers,
        devices=devices,
        runtime=args.runtime,
        request_timeout=args.request_timeout or None,
        restart_limit=args.restart_limit,
        restart_window=args.restart_window,
        shutdown_grace=args.shutdown_grace,
        tls_certfile=certfile,
        tls_keyfile=keyfile,
    )
    return ServeOptions(app, server)


def check_port(host: str, port: int) -> None:
    """Bind ``host:port`` as uvicorn will (SO_REUSEADDR) and let it go: a port in use or an address this machine
    lacks is refused before any worker loads."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ValueError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}): another process holds the port, or the "
                f"address is not this machine's; stop it or give another --port (or --host)"
            ) from None


def cause_first_and_last(text: str) -> str:
    """A worker's start-up failure with its cause on the first line and again on the last: the worker's own
    exception (its whole first line, which names the fix), not the last line of a multi-line message."""
    head, sep, traceback = text.partition("\nthe worker's traceback:\n")
    lines = traceback.rstrip().splitlines()[:-1]  # the pool repeats its one-line summary last
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    start = next((i for i in range(frames[-1] + 1 if frames else 0, len(lines)) if not lines[i][:1].isspace()), None)
    if not sep or start is None:
        return text
    cause = re.sub(r"^[\w.]+\.(\w+: )", r"\1", lines[start])  # paddlex_npu.errors.ModelFileError -> ModelFileError
    return f"{head.split(': ', 1)[0]}: {cause}\nthe worker's traceback:\n" + "\n".join(lines) + f"\n{cause}"


def serve_args(p: argparse.ArgumentParser) -> None:
    from ..log import FORMATS, LEVELS
    from ..serve import images, settings

    p.add_argument("pipeline", help="PaddleX pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (/ocr etc., /health, /ready, /metrics)")
    p.add_argument("--workers", type=positive_int, default=1, help="worker processes per device (requests in flight)")
    p.add_argument("--device", default="npu:0", help="npu:0 or npu:0,1")
    p.add_argument(
        "--runtime",
        choices=runtimes.NAMES,
        help="backend_config runtime: ais_bench (the NPU), reference (CPU, ONNX Runtime), simulated (CPU outputs "
        "with modelled NPU timing, as benchmark --serve) (default: $PADDLEX_NPU_RUNTIME, else ais_bench)",
    )
    p.add_argument(
        "--max-body-mb",
        type=positive_number,
        default=settings.DEFAULT_MAX_BODY_BYTES // (1024 * 1024),
        help="largest request body in MB (413 above)",
    )
    p.add_argument(
        "--max-image-pixels",
        type=positive_int,
        default=images.DEFAULT_MAX_IMAGE_PIXELS,
        help="largest image or PDF page, width x height, read from its header before decoding (422 above)",
    )
    p.add_argument(
        "--max-request-pixels",
        type=positive_int,
        default=images.DEFAULT_MAX_REQUEST_PIXELS,
        help="all pages of one request together (422 above)",
    )
    p.add_argument(
        "--max-queue",
        type=positive_int,
        default=settings.DEFAULT_MAX_QUEUE,
        help="requests waiting for a worker; beyond, 503 + Retry-After at once",
    )
    p.add_argument(
        "--request-timeout",
        type=seconds_or_zero,
        default=settings.DEFAULT_REQUEST_TIMEOUT,
        help="seconds a worker may spend on one request: 504 and the worker replaced above; 0: none",
    )
    p.add_argument(
        "--restart-limit",
        type=int,
        help="dead workers replaced per --restart-window (default: 2 per worker)",
    )
    p.add_argument("--restart-window", type=positive_number, default=600.0, help="seconds of the restart budget")
    p.add_argument("--shutdown-grace", type=seconds_or_zero, default=0.0, help="seconds answering 503 after SIGTERM")
    url_args(p, "serve")
    access_args(p)
    p.add_argument(
        "--log-format", choices=FORMATS, default="text", help="stderr log lines: text, or one JSON object per line"
    )
    p.add_argument("--log-level", choices=LEVELS, default="INFO", help="paddlex-npu's log level (access lines: INFO)")


def url_args(p: argparse.ArgumentParser, command: str) -> None:
    """The URL-input options (:mod:`..serve.fetch`) of ``command``: serve, triton-repo, ray-serve."""
    from ..serve.fetch import DEFAULT_MAX_REDIRECTS, DEFAULT_TIMEOUT

    p.add_argument(
        "--allow-url-host",
        action="append",
        metavar="HOST",
        help="fetch a request's `file` URL from this host: a name, .suffix (names ending so), * (any name with public "
        "addresses), or an IP address or network (10.0.0.0/8: the only way to allow private, loopback or link-local "
        "addresses); repeat for several (default: none, URL inputs refused 422; docs/threat-model.md)",
    )
    p.add_argument(
        "--url-max-mb",
        type=positive_number,
        help="largest body a URL may bring, counted while reading (422 above) (default: "
        + ("--max-body-mb)" if command != "triton-repo" else "64)"),
    )
    p.add_argument(
        "--url-timeout",
        type=positive_number,
        default=DEFAULT_TIMEOUT,
        help="seconds one URL fetch may take in all, redirects and a slow sender included (422 above)",
    )
    p.add_argument(
        "--url-max-redirects",
        type=int,
        default=DEFAULT_MAX_REDIRECTS,
        help="redirects a URL fetch follows, each target checked as the URL",
    )


def url_policy(args: argparse.Namespace, max_body_mb: float, command: str) -> Any:
    """The :class:`~..serve.fetch.UrlPolicy` of :func:`url_args`' options (ValueError naming a bad entry)."""
    from ..serve.fetch import UrlPolicy

    return UrlPolicy(
        tuple(args.allow_url_host or ()),
        max_bytes=int((args.url_max_mb or max_body_mb) * 1024 * 1024),
        timeout=args.url_timeout,
        max_redirects=args.url_max_redirects,
        option="--allow-url-host" if command == "serve" else f"{command} --allow-url-host",
    )


def access_args(p: argparse.ArgumentParser) -> None:
    """Bearer tokens and TLS (:mod:`..serve.auth`) of serve and ray-serve."""
    p.add_argument(
        "--token-file",
        help="bearer tokens (one a line) every path but /health and /ready needs (401 without); also "
        "$PADDLEX_NPU_API_TOKENS (default: none, no token needed)",
    )
    p.add_argument(
        "--metrics-token-file",
        help="bearer tokens that open /metrics only (a scraper's); also $PADDLEX_NPU_METRICS_TOKENS",
    )
    p.add_argument("--tls-certfile", help="serve HTTPS with this PEM certificate (chain), with --tls-keyfile")
    p.add_argument("--tls-keyfile", help="the PEM private key of --tls-certfile")


def tls_files(args: argparse.Namespace) -> Tuple[Optional[str], Optional[str]]:
    """(certificate, key) of --tls-certfile/--tls-keyfile: both or neither, each readable (ValueError)."""
    cert, key = args.tls_certfile, args.tls_keyfile
    if bool(cert) != bool(key):
        raise ValueError("give --tls-certfile and --tls-keyfile together (the certificate and its private key)")
    for option, path in (("--tls-certfile", cert), ("--tls-keyfile", key)):
        if path and not os.access(path, os.R_OK):
            raise ValueError(f"{option} {path}: no readable file there")
    return cert, key


def run_triton_repo(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..serve.route import parse_devices
    from ..triton.repo import TritonOptions, build_triton_repo

    try:
        options = TritonOptions(
            devices=tuple(parse_devices(args.device)),
            instances=args.instances,
            max_queue_delay_us=args.max_queue_delay_us,
            dynamic_batching=not args.no_dynamic_batching,
            max_queue_size=args.max_queue_size,
            queue_timeout_us=int(args.queue_timeout_ms * 1000),
            ocr_max_batch=args.ocr_max_batch,
            rec_max_batch=args.rec_max_batch,
            keep_versions=args.keep_versions,
            runtime=args.runtime,
            warmup=not args.no_warmup,
            max_image_pixels=args.max_image_pixels,
            max_request_pixels=args.max_request_pixels,
            urls=url_policy(args, 64, "triton-repo"),
            pdf_timeout=args.pdf_timeout,
        )
        repo = build_triton_repo(args.pipeline, args.out_dir, options)
    except (PaddlexNpuError, ValueError) as exc:
        return fail("triton-repo", exc)
    for m in repo.models:
        pref = f", preferred batch sizes {m.preferred_batch_sizes}" if m.preferred_batch_sizes else ""
        print(f"- {m.name} version {m.version}: {m.folder} (max batch {m.max_batch_size}{pref})")
    print(f"Triton model repository: {repo.root}\n  start it: paddlex-npu triton-serve {repo.root}")
    return 0


def triton_repo_args(p: argparse.ArgumentParser) -> None:
    from ..serve.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS

    p.add_argument("pipeline", help="PaddleX OCR pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("out_dir", help="the model repository (a new version is added if it exists)")
    p.add_argument("--device", default="npu:0", help="npu:0 or npu:0,1: one instance group per device")
    p.add_argument("--instances", type=int, default=1, help="model instances (processes) per device")
    p.add_argument("--max-queue-delay-us", type=int, default=2000, help="dynamic batching queue delay")
    p.add_argument("--no-dynamic-batching", action="store_true", help="no dynamic_batching block (no queue bound)")
    p.add_argument(
        "--max-queue-size", type=int, default=64, help="requests a model's queue holds; beyond, refused at once"
    )
    p.add_argument(
        "--queue-timeout-ms", type=float, default=10_000, help="ms a request may wait in the queue; then refused"
    )
    p.add_argument("--ocr-max-batch", type=int, default=4, help="max_batch_size of the OCR model")
    p.add_argument(
        "--rec-max-batch",
        type=int,
        help="max_batch_size of text_recognition (default: the OM's largest batch gear; dymshape: 16, within its "
        "batch range)",
    )
    p.add_argument("--keep-versions", type=int, default=1, help="version_policy latest num_versions")
    p.add_argument("--runtime", choices=("ais_bench", "reference"), help="backend_config runtime of every instance")
    p.add_argument("--no-warmup", action="store_true", help="no model_warmup")
    p.add_argument(
        "--max-image-pixels",
        type=int,
        default=DEFAULT_MAX_IMAGE_PIXELS,
        help="as serve's, read before decoding",
    )
    p.add_argument(
        "--max-request-pixels",
        type=int,
        default=DEFAULT_MAX_REQUEST_PIXELS,
        help="as serve's, per request",
    )
    p.add_argument(
        "--pdf-timeout",
        type=seconds_or_zero,
        default=120.0,  # serve.settings.DEFAULT_REQUEST_TIMEOUT
        help="seconds a PDF's rendering (a child process of the model instance) may take: 504 above; 0: none",
    )
    url_args(p, "triton-repo")


def run_triton_serve(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..triton.repo import tritonserver_command

    try:
        argv, env = tritonserver_command(
            args.repo,
            args.workdir,
            args.http_port,
            args.grpc_port,
            args.metrics_port,
            poll_seconds=args.poll,
            host=args.host,
        )
    except PaddlexNpuError as exc:
        return fail("triton-serve", exc)
    print(" ".join(argv), flush=True)
    from ..executor.pool import RestartBudget
    from ..triton.watch import run_supervised

    local = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
    budget = RestartBudget(args.restart_limit, args.restart_window)
    return run_supervised(argv, env, (local, args.http_port), _say, not args.poll, budget)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def triton_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", help="a repository written by `paddlex-npu triton-repo PIPELINE.yaml REPO` (checked first)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the HTTP and gRPC endpoints and the metrics port (0.0.0.0 in a container)",
    )
    p.add_argument("--http-port", type=int, default=8000, help="Triton's HTTP/REST port (/v2/...)")
    p.add_argument("--grpc-port", type=int, default=8001, help="Triton's gRPC port")
    p.add_argument(
        "--metrics-port", type=int, default=8002, help="Triton's Prometheus metrics port (/metrics: nv_inference_*)"
    )
    p.add_argument("--poll", type=int, help="poll the repository every N seconds (new versions roll in)")
    p.add_argument(
        "--workdir",
        help="folder for the Python backend files, never inside or beside REPO (default: $PADDLEX_NPU_CACHE, else "
        "~/.cache/paddlex_npu, then tritonserver/py<X.Y>-<hash of the nvidia-pytriton install>)",
    )
    p.add_argument(
        "--restart-limit",
        type=int,
        default=4,  # triton.watch.DEFAULT_RELOADS (not imported to build the parser)
        help="model reloads after a dead stub per --restart-window; then the model is unloaded (its readiness fails)",
    )
    p.add_argument("--restart-window", type=positive_number, default=600.0, help="seconds of the restart budget")


COMMANDS = (
    Command(
        "serve",
        "serve a pipeline over HTTP with PaddleX's app, K worker processes per NPU",
        run_serve,
        serve_args,
        example="paddlex-npu serve ocr.yaml --port 8080 --workers 2 --device npu:0,1",
    ),
    Command(
        "triton-repo",
        "write a Triton model repository for the OCR pipeline on the NPU route",
        run_triton_repo,
        triton_repo_args,
        example="paddlex-npu triton-repo ocr.yaml triton-repo",
    ),
    Command(
        "triton-serve",
        "run nvidia-pytriton's tritonserver on a repository",
        run_triton_serve,
        triton_serve_args,
        example="paddlex-npu triton-serve triton-repo --host 0.0.0.0   # all interfaces: in a container",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
