"""Performance commands: ``benchmark`` (throughput by route: the NPU executor, serial, PaddleX's CPU engines) and
``serve-bench`` (load on real servers over loopback HTTP; ``benchmark --serve`` is its alias) and ``capacity``
(pages/s and the bottleneck for a host, from a benchmark JSON)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import List

from .. import envs, runtimes
from .common import Command, add_commands, fail, positive_int, positive_ints, positive_seconds, seconds_or_zero


def _benchmark_inputs(args: argparse.Namespace):
    """(pipeline config or model spec, input paths, {CPU engine: config}): the given ones, else the bundled OCR
    pipeline (``--det``, ``--rec``) over packages as ``convert`` builds them (``--no-reduce``: its recogniser
    unreduced) on rendered pages; PaddleX's engines on the same packages (the benchmark gives them a reduced
    package's source model) or, for paddle_static, the Paddle model folders."""
    import tempfile

    from ..paddlex.pipelines import model_spec
    from ..perf.serve_load import ocr_packages
    from ..samples import assets, env

    env.prepare(default_runtime=False)
    _check_package_args(args)
    engines = [e for e in args.engines.split(",") if e]
    paths = _input_files(Path(args.inputs)) if args.inputs else None
    folder = None  # made once the inputs are known good
    if args.model:
        config = model_spec(args.model)
        cpu = {e: config for e in engines}
    elif args.pipeline:
        config = str(_pipeline_arg(args.pipeline))
        cpu = {e: config for e in engines}
    else:  # a bundled pipeline, OCR or --document's, over OCR packages as convert builds them
        det, rec, root = args.det or assets.DET, args.rec or assets.REC, assets.build_model_folders()
        folder = Path(tempfile.mkdtemp(prefix="paddlex-npu-bench-"))
        packages = ocr_packages(root, folder / "packages", det, rec, not args.no_reduce, not args.no_device_normalise)
        if getattr(args, "document", None):
            from ..samples.documents import document_configs, document_inputs

            config, paddle = document_configs(args.document, root, packages, det, rec)
            cpu = {e: paddle for e in engines}
            paths = paths or document_inputs(args.document, folder, args.pages)
        else:
            config = assets.ocr_pipeline_config(packages, det=det, rec=rec)
            paddle = assets.ocr_pipeline_config(root / "paddle", det=det, rec=rec)
            cpu = {e: paddle if e == "paddle_static" else config for e in engines}
    if paths is None:
        folder = folder or Path(tempfile.mkdtemp(prefix="paddlex-npu-bench-"))
        paths = [str(p) for p in assets.render_pages_of(getattr(args, "pages_kind", "sparse"), folder, args.pages)]
    return config, paths, cpu


def _check_package_args(args: argparse.Namespace) -> None:
    """--det, --rec and --no-reduce choose the bundled pipeline's packages: not with a pipeline or model of one's
    own."""
    from ..errors import ConfigError

    given = getattr(args, "pipeline", None) or getattr(args, "model", None)
    if given and (args.no_reduce or args.no_device_normalise or args.rec or args.det):
        raise ConfigError(
            "--no-reduce, --no-device-normalise, --det and --rec choose the bundled pipeline's packages; with "
            "--pipeline or --model, convert your models with `paddlex-npu convert --no-reduce` (or "
            "--no-device-normalise) and name those packages in the YAML"
        )


def _pipeline_arg(pipeline: Path) -> Path:
    """--pipeline: a pipeline name, or a YAML file that exists."""
    from ..errors import ConfigError

    if pipeline.suffix in (".yaml", ".yml") and not pipeline.is_file():
        raise ConfigError(f"--pipeline {pipeline} does not exist: give a pipeline YAML or name (e.g. OCR)")
    return pipeline


def _input_files(folder: Path) -> List[str]:
    """--inputs: the files of a folder that holds at least one."""
    from ..errors import ConfigError

    if not folder.is_dir():
        raise ConfigError(f"--inputs {folder} is no folder: give a folder of images (or leave it out: rendered pages)")
    paths = sorted(str(p) for p in folder.iterdir() if p.is_file())
    if not paths:
        raise ConfigError(f"--inputs {folder} holds no files: put the images to measure there")
    return paths


def _bar_chart(report) -> str:
    best = max((r.images_per_s for r in report.routes), default=0.0) or 1.0
    rows = [
        f"{r.route:<30} {'#' * max(1, round(40 * r.images_per_s / best))} {r.images_per_s:.1f}/s, "
        f"{r.per_core:.2f}/s per busy core"
        for r in report.routes
    ]
    return "\n".join(rows)


def _print_report(report) -> None:
    load = "/".join(f"{x:.1f}" for x in report.load_average)
    print(f"machine: {report.cores} cores, {report.cpu}; PaddleX {report.paddlex}; load average {load} (start/end)")
    if report.busy:
        print(f"note: other work shared the {report.cores} cores (load above {report.cores}): figures are lower bounds")
    head = ("img/s", "x serial", "p50", "p95", "p99", "CPU ms", "CPU %", "pre", "model", "device", "post", "rest")
    print(f"{'route':<30}" + "".join(f"{h:>9}" for h in head) + f"{'unseen':>7}{'errors':>7}")
    serial = report.serial.images_per_s if report.serial else float("nan")
    for r in report.routes:
        cells = (r.images_per_s, r.images_per_s / serial, r.p50_ms, r.p95_ms, r.p99_ms)
        cells += (r.cpu_ms, r.cpu_percent, r.pre_ms, r.model_ms, r.device_ms, r.post_ms, r.other_ms)
        print(f"{r.route:<30}" + "".join(f"{c:>9.2f}" for c in cells) + f"{r.computed:>7}{r.errors:>7}")
    print("(latency and stage times in ms per image; stages measured in the process that ran the input)")
    for route, why in report.skipped.items():
        print(f"{route}: skipped: {why}")
    print(f"inputs: {report.input_desc}; {report.cost_model_text()}")
    print(report.route_text())
    pcie = report.pcie_per_image()
    if pcie:
        print(
            f"across PCIe per image (simulated device, all models): {pcie['bytes_in'] / 1e3:,.1f} kB to the device, "
            f"{pcie['bytes_out'] / 1e3:,.1f} kB to the host"
        )
    for line in report.summary_lines():
        print(re.sub(r" \(target [^)]*\)", "", line))  # the project's own targets are not the user's
    print(_bar_chart(report))


def _serve_load_inputs(args: argparse.Namespace, folder: Path):
    """(pipeline YAML, page, line): the given YAML, else the bundled OCR pipeline's with its recognition package
    (``--rec``) converted with the CTC reduction or (``--no-reduce``) without; a rendered page and text line."""
    import tempfile

    import yaml

    from ..perf.serve_load import ocr_packages
    from ..samples import assets, env

    env.prepare(default_runtime=False)
    if args.pipeline:
        pipeline = _pipeline_arg(Path(args.pipeline))
    else:
        det, rec = args.det or assets.DET, args.rec or assets.REC
        out = Path(tempfile.mkdtemp(prefix="packages-", dir=folder))  # new: a --workdir's own files stay
        root = assets.build_model_folders()
        packages = ocr_packages(root, out, det, rec, not args.no_reduce, not args.no_device_normalise)
        pipeline = folder / "ocr.yaml"
        config = assets.ocr_pipeline_config(packages, det=det, rec=rec)
        config["Serving"] = {"visualize": False}
        pipeline.write_text(yaml.safe_dump(config), encoding="utf-8")
    page = assets.render_pages(folder, 1)[0]
    line = assets.render_text_image(["Invoice total amount due 1234.56"], folder / "line.png", size=28)
    return pipeline, page, line


def _print_serve_load(report, targets) -> None:
    print(
        f"machine: {report.cores} cores, {report.cpu}; load average {report.load_average[0]:.1f} before the run, "
        f"{report.load_average[1]:.1f} after"
    )
    print(
        f"{'server':<40}{'model':<18}{'C':>4}{'req/s':>9}{'lines/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'answered':>9}"
        f"{'failed':>7}{'unseen':>7}{'s':>6}{'srv CPU':>8}{'cli CPU':>8}{'B to host':>11}"
    )
    for p in report.points:
        print(
            f"{p.server:<40}{p.model:<18}{p.concurrency:>4}{p.requests_per_s:>9.2f}{p.lines_per_s:>9.1f}"
            f"{p.p50_ms:>9.1f}{p.p95_ms:>9.1f}{p.requests:>9}{p.failed:>7}{p.unseen:>7}{p.seconds:>6.0f}"
            f"{p.server_cpu_ms:>8.1f}{p.client_cpu_ms:>8.1f}{p.bytes_to_host:>11,.0f}"
        )
        if len(p.rounds_requests_per_s) > 1:
            print(f"    rounds (median kept): {' / '.join(f'{v:.1f}' for v in p.rounds_requests_per_s)} req/s")
        if p.batch_mean:
            print(
                f"    Triton's statistics: {p.batch_mean:.1f} requests per execution; per request "
                f"{p.queue_ms:.2f} ms queued, {p.compute_ms:.2f} ms in its execution"
            )
        if p.first_failure:
            print(f"    first failure: {p.first_failure}")
    print(
        "srv CPU / cli CPU: CPU ms per answered request of the server's processes / of the load generator; "
        f"{report.cores} cores / their sum is what this machine could answer if the cores were the run's alone"
    )
    for model, t in report.traffic.items():
        print(
            f"simulated device, one {model} request: {t['lines']:.0f} text line(s), {t['bytes_to_device']:,.0f} B "
            f"to the device, {t['bytes_to_host']:,.0f} B to the host, {t['copy_ms']:.2f} ms of copies in "
            f"{t['device_ms']:.2f} ms of device time ({t['calls']:.0f} calls)"
        )
    shown = {
        "batching_speedup_rec": "Triton dynamic batching / none, recognition, top concurrency",
        "serve_over_paddlex_ocr": "serve (most workers) / PaddleX basic serving, OCR, top concurrency",
        "serve_k1_over_paddlex_ocr": "serve K=1 / PaddleX basic serving, OCR, top concurrency",
        "failed": "failed requests over the run",
    }
    for key, what in shown.items():
        value = targets.get(key)
        print(f"{what}: {'not run' if value is None else f'{value:.2f}'}")


def _serve_load_workdir(args: argparse.Namespace):
    """(work folder, (pipeline YAML, page, line)); a folder made here is removed again when the inputs fail."""
    import shutil
    import tempfile

    _check_package_args(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="paddlex-npu-serve-load-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return workdir, _serve_load_inputs(args, workdir)
    except BaseException:
        if not args.workdir:  # the folder made above, holding nothing of the user's
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _packages_text(pipeline: Path) -> str:
    """Which recognition packages a pipeline YAML runs reduced (as convert builds them) or not, in words."""
    from ..perf.source_models import describe, reductions

    return describe(reductions(pipeline))


def run_serve_bench(args: argparse.Namespace) -> int:
    import json

    from ..errors import PaddlexNpuError
    from ..perf.serve_load import LoadPlan, parse_servers, run_serve_load, targets

    try:
        plan = LoadPlan(
            concurrency=args.concurrency,
            seconds=args.seconds,
            warmup_seconds=args.warmup,
            soak_seconds=args.soak,
            triton_instances=args.instances,
            runtime=args.runtime,
            rounds=args.rounds,
            **parse_servers(args.servers),
        )
    except ValueError as exc:
        return fail(args.command_name, exc)
    try:
        workdir, (pipeline, page, line) = _serve_load_workdir(args)
    except PaddlexNpuError as exc:
        return fail(args.command_name, exc)
    print(
        f"serve load: {plan.seconds:g} s per point (+{plan.warmup_seconds:g} s warm-up), concurrency "
        f"{list(plan.concurrency)}, runtime {plan.runtime}, work folder {workdir}; {_packages_text(pipeline)}",
        flush=True,
    )
    try:
        report = run_serve_load(
            pipeline,
            page,
            line,
            plan,
            workdir,
            on_point=lambda p: print(
                f"  {p.server}, {p.model}, C={p.concurrency}: {p.requests_per_s:.2f} req/s, {p.failed} failed",
                flush=True,
            ),
        )
    except (RuntimeError, PaddlexNpuError) as exc:  # a server that did not start; a repository not written
        return fail(args.command_name, exc)
    _print_serve_load(report, targets(report))
    if args.json:
        Path(args.json).write_text(json.dumps({**report.as_dict(), "targets": targets(report)}, indent=2))
        print(f"figures written to {args.json}")
    return 0


def _run_benchmark_with_progress(args: argparse.Namespace, config, paths: List[str], cpu):
    """run_benchmark with a progress bar on stderr."""
    import tempfile

    from tqdm import tqdm

    from ..perf.benchmark import run_benchmark

    # a simulated device of its own, unless one is named (other runs on this machine would share npu:0)
    env = {} if envs.SIM_LOCKS.get() else {envs.SIM_LOCKS.name: tempfile.mkdtemp()}
    total = _timed_images(args, len(paths), len(cpu))
    with tqdm(total=total, unit="img", desc="benchmark", file=sys.stderr, disable=args.no_progress) as bar:

        def progress(route: str, n: int) -> None:
            bar.set_description(route, refresh=False)
            bar.update(n)

        return run_benchmark(
            config,
            paths,
            workers=args.workers,
            repeat=args.repeat,
            rounds=args.rounds,
            runtime=args.runtime,
            env=env,
            cpu_pipelines=cpu,
            progress=progress,
        )


def run_benchmark_command(args: argparse.Namespace) -> int:
    import json

    if args.serve:
        return run_serve_bench(args)

    from ..errors import PaddlexNpuError
    from ..perf.benchmark import INTERRUPTED
    from ..perf.chart import save

    _apply_quick(args)
    try:
        config, paths, cpu = _benchmark_inputs(args)
        print(
            f"benchmark: {len(paths)} inputs x {args.repeat} passes per route, runtime {args.runtime}, "
            f"workers {args.workers}, CPU engines {list(cpu) or 'none'}; {expected_time(args, len(paths), cpu)} "
            "(Ctrl-C keeps the routes that finished)",
            flush=True,
        )
        report = _run_benchmark_with_progress(args, config, paths, cpu)
    except PaddlexNpuError as exc:  # a model folder or input that is wrong, a route that cannot run here
        return fail("benchmark", exc)
    interrupted = INTERRUPTED in report.skipped
    if not report.routes:
        if interrupted:
            print("paddlex-npu benchmark: interrupted before any route finished: nothing to keep", file=sys.stderr)
            return 130
        reasons = "; ".join(f"{route}: {why}" for route, why in report.skipped.items())
        return fail("benchmark", RuntimeError(f"no route could run here ({reasons})"))
    _print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2))
        print(f"figures written to {args.json}")
    if args.plot:
        print(f"chart written to {save(report, Path(args.plot))}")
    return 130 if interrupted else 0


# --quick: a representative run in about a minute here (2 pages, 1 pass, 1 and 2 workers, ONNX Runtime's engine)
QUICK = {"pages": 2, "repeat": 1, "workers": [1, 2], "engines": "onnxruntime", "rounds": 1}
# Seconds per image by route kind on the 2-core VM of docs/benchmark.md, and per pipeline or worker start: the
# expected time printed before a run (the progress bar's ETA follows the run itself).
SECONDS_PER_IMAGE = {"simulated": 0.06, "reference": 0.5, "ais_bench": 0.06, "onnxruntime": 0.5, "paddle_static": 2.6}
SECONDS_PER_START = 6.0


def _apply_quick(args: argparse.Namespace) -> None:
    """--quick: the QUICK values for every option left at its default."""
    if not args.quick:
        return
    defaults = {"pages": 8, "repeat": 3, "workers": [1, 2, 3], "engines": "onnxruntime,paddle_static", "rounds": 1}
    for name, value in QUICK.items():
        if getattr(args, name) == defaults[name]:
            setattr(args, name, value)


def _timed_images(args: argparse.Namespace, inputs: int, engines: int) -> int:
    """Images the run times: the serial route and the CPU engines ``repeat`` passes, each executor its passes."""
    from ..perf.benchmark import executor_passes

    executors = sum(executor_passes(args.repeat, inputs, k) for k in args.workers)
    return (args.rounds * (args.repeat + executors) + engines * args.repeat) * inputs


def expected_time(args: argparse.Namespace, inputs: int, cpu) -> str:
    """The run's expected time from :data:`SECONDS_PER_IMAGE`, in words."""
    npu = _timed_images(args, inputs, 0) * SECONDS_PER_IMAGE.get(args.runtime, 0.5)
    engines = sum(args.repeat * inputs * SECONDS_PER_IMAGE.get(e, 1.0) for e in cpu)
    starts = (1 + sum(args.workers) + len(cpu)) * SECONDS_PER_START
    total = npu + engines + starts
    quick = "" if args.quick else "; --quick for a short representative run"
    return f"expect about {max(1, round(total / 60))} min on a 2-core machine{quick}"


def benchmark_args(p: argparse.ArgumentParser) -> None:
    from ..samples import assets
    from ..samples.documents import DOCUMENTS

    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--pipeline", type=Path, help="pipeline name or YAML (default: the bundled PP-OCRv4 OCR pipeline)"
    )
    what.add_argument("--model", type=Path, help="one model folder (an OM package; inference.yml names the model)")
    what.add_argument(
        "--document",
        choices=tuple(DOCUMENTS),
        help="a bundled document pipeline instead of OCR, on its sample documents (--det/--rec its OCR models): "
        + "; ".join(f"{k}: {v}" for k, v in DOCUMENTS.items()),
    )
    p.add_argument("--inputs", type=Path, help="folder of inputs (default: rendered multi-line pages)")
    p.add_argument("--pages", type=positive_int, default=8, help="rendered pages when --inputs is not given")
    p.add_argument(
        "--pages-kind",
        choices=tuple(assets.PAGE_KINDS),
        default="sparse",
        help="the rendered pages: " + "; ".join(f"{k}: {v}" for k, v in assets.PAGE_KINDS.items()),
    )
    p.add_argument("--repeat", type=positive_int, default=3, help="timed passes over the inputs per route")
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="time the NPU routes (--serve: every server's points, all servers running) this many times, "
        "interleaved, and keep each one's median round",
    )
    p.add_argument("--workers", type=positive_ints, default="1,2,3", help="worker counts for the executor")
    _runtime_arg(p)
    p.add_argument(
        "--engines",
        default="onnxruntime,paddle_static",
        help="PaddleX's own CPU engines to compare, comma-separated; '' for none",
    )
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--plot", help="write a chart PNG here (throughput and time per stage by route)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short representative run: --pages 2 --repeat 1 --workers 1,2 --engines onnxruntime, for the options "
        "left unset",
    )
    _package_args(p)
    serving = p.add_argument_group("--serve: the serve-bench command (load on real servers over loopback HTTP)")
    serving.add_argument("--serve", action="store_true", help="measure the servers instead: `paddlex-npu serve-bench`")
    _serving_options(serving)
    p.set_defaults(command_name="benchmark --serve")


def serve_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pipeline", type=Path, help="OCR pipeline YAML (default: the bundled PP-OCRv4 OCR pipeline, no visualize)"
    )
    _runtime_arg(p)
    _package_args(p)
    p.add_argument("--json", help="write the figures and the targets to this JSON file")
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="run every server at once and time each point this many times, interleaved; keep the median",
    )
    _serving_options(p)
    p.set_defaults(command_name="serve-bench")


def _package_args(p) -> None:
    """--det, --rec, --no-reduce, --no-device-normalise: the bundled pipeline's packages (benchmark, serve-bench)."""
    from ..samples.assets import DET, DET_V6_SMALL, DET_V6_TINY, REC, REC_V5, REC_V6_SMALL, REC_V6_TINY

    p.add_argument(
        "--det", choices=(DET, DET_V6_SMALL, DET_V6_TINY), help=f"the bundled pipeline's detector (default: {DET})"
    )
    p.add_argument(
        "--rec",
        choices=(REC, REC_V5, REC_V6_SMALL, REC_V6_TINY),
        help=f"the bundled pipeline's recogniser (default: {REC})",
    )
    p.add_argument(
        "--no-reduce",
        action="store_true",
        help="convert the bundled recogniser as `convert --no-reduce` does: its full CTC output goes to the host "
        "(default: reduced on the device, as convert does; benchmark figures before 2026-12-05 and serve-bench "
        "figures before 2026-12-04 ran it unreduced)",
    )
    p.add_argument(
        "--no-device-normalise",
        action="store_true",
        help="convert the bundled detector and recogniser as `convert --no-device-normalise` does: float32 input "
        "normalised on the host (default: 8-bit pixels normalised on the device, as convert does; figures before "
        "2026-12-06 ran the detector as bundled, normalised on the host, before 2026-12-07 the recogniser)",
    )


def _runtime_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runtime", default="simulated", choices=runtimes.NAMES)


def _serving_options(group) -> None:
    """The options of a server load run: servers, concurrency, timing, Triton instances, work folder."""
    group.add_argument(
        "--servers",
        default="triton-batching,triton-no-batching,serve-1,serve-2,paddlex",
        help="servers to start in turn (serve-K: paddlex-npu serve with K workers)",
    )
    group.add_argument("--concurrency", type=positive_ints, default="1,4,16", help="clients in flight per point")
    group.add_argument("--seconds", type=positive_seconds, default=15, help="timed seconds per point")
    group.add_argument("--warmup", type=seconds_or_zero, default=3, help="warm-up seconds before each point")
    group.add_argument(
        "--soak", type=seconds_or_zero, default=0, help="seconds for the targets' top-concurrency points (e.g. 60)"
    )
    group.add_argument("--instances", type=positive_int, default=1, help="Triton model instances per device")
    group.add_argument(
        "--workdir", type=Path, help="folder for the repositories, server logs, replay store (default: a new temp one)"
    )


def capacity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", type=Path, help="a benchmark JSON (paddlex-npu benchmark --runtime simulated --json F)")
    p.add_argument("--cores", type=float, help="host cores to plan for (with --npus)")
    p.add_argument("--npus", type=int, help="NPUs to plan for (with --cores)")
    p.add_argument("--device", default="310P3", help="the NPU chip: 310P3 (Atlas 300I Pro) or 910B4")
    p.add_argument("--cpu-speed", type=float, default=1.0, help="a host core's speed / the benchmark's")
    p.add_argument("--workers-per-npu", type=int, help="executor workers per NPU (default: the best)")
    p.add_argument("--serving-ms", type=float, default=0.0, help="CPU ms per request of an HTTP front")
    p.add_argument("--front-processes", type=int, default=1, help="HTTP front processes")
    p.add_argument(
        "--contention", type=float, default=None, help="extra CPU per page with every core busy (default: 0.14)"
    )
    p.add_argument("--json", type=Path, help="write the predictions here")


def _print_checks(checks, cores: int) -> None:
    """The planner against the benchmark's own measurements, and whether it passed (CHECK_TOLERANCE)."""
    if not checks:
        return
    print(f"self-check on the benchmark's machine ({cores} cores, 1 simulated NPU), planner vs measured:")
    for c in checks:
        print(f"  {c.route:<26} measured {c.measured:7.1f}  predicted {c.predicted:7.1f}  ({100 * c.error:+.0f}%)")
    worst = max(checks, key=lambda c: abs(c.error))
    if abs(worst.error) > CHECK_TOLERANCE:
        print(
            f"self-check FAILED: the planner is {100 * worst.error:+.0f}% off the benchmark's own {worst.route} "
            f"(more than {100 * CHECK_TOLERANCE:.0f}%): do not trust the predictions below. Cause: other work "
            "shared the machine during the benchmark, or a runtime other than simulated; fix: run paddlex-npu "
            "benchmark --runtime simulated on an idle machine, then capacity again"
        )
    else:
        print(f"self-check passed: within {100 * CHECK_TOLERANCE:.0f}% on every executor route")


CHECK_TOLERANCE = 0.15  # capacity's self-check: the planner within 15% of the benchmark's own measurements


def run_capacity(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from ..perf.benchmark import BenchmarkReport
    from ..perf.capacity import CONTENTION, check, format_prediction, hosts_table, page_cost, predict

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
    contention = CONTENTION if args.contention is None else args.contention
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
                    contention=contention,
                )
            ]
        else:
            predictions = hosts_table(cost, contention=contention)
        checks = check(report, cost, contention)
    except ConfigError as exc:
        print(f"paddlex-npu capacity: {exc}", file=sys.stderr)
        return 1
    _print_checks(checks, report.cores)
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


COMMANDS = (
    Command(
        "benchmark",
        "throughput by route: NPU executor (K workers), NPU serial, PaddleX's CPU engines",
        run_benchmark_command,
        benchmark_args,
        example="paddlex-npu benchmark --quick --json bench.json   # a few minutes; the full run states its time",
    ),
    Command(
        "serve-bench",
        "load on real servers over loopback HTTP: Triton, paddlex-npu serve, PaddleX's basic serving",
        run_serve_bench,
        serve_bench_args,
        example="paddlex-npu serve-bench --servers serve-1 --concurrency 1,4 --seconds 5",
    ),
    Command(
        "capacity",
        "predict pages/s and the bottleneck for N cores x M NPUs from a benchmark JSON",
        run_capacity,
        capacity_args,
        example="paddlex-npu capacity bench.json --cores 32 --npus 4",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
