"""Report commands: ``info``, ``doctor``, ``inspect``, ``support`` (coverage), ``selftest`` (the hardware
acceptance run) and ``precision-preview`` (what fp16 does, on the CPU)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Tuple

from .. import envs
from ..version import __version__
from .common import Command, add_commands, fail


def run_support(args: argparse.Namespace) -> int:
    from ..reports.coverage import coverage, format_table

    print(format_table(coverage()))
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..reports.inspect_om import inspect_path

    try:
        print(inspect_path(args.path))
    except PaddlexNpuError as exc:
        return fail("inspect", exc)
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from ..reports.doctor import OK, missing_required, run_checks

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


def run_selftest(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..reports.selftest import PASS
    from ..reports.selftest import run_selftest as selftest

    try:
        models = [m for m in (args.models or "").split(",") if m] or None
        report = selftest(args.om_root, args.device_id, args.runtime, models=models)
    except PaddlexNpuError as exc:
        return fail("selftest", exc)
    in_packages = {id(c) for p in report.packages for c in p.checks}
    for c in [c for c in report.checks if id(c) not in in_packages]:
        print(f"[{c.status.upper()}] {c.name}: {c.detail}")
    for package in report.packages:
        print(f"{package.name} ({package.kind}):")
        for c in package.checks:
            print(f"  [{c.status.upper()}] {c.name}: {c.detail}")
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
        print(f"report: {args.json}")
    if report.ok:
        where = "on the CPU reference runtime" if args.runtime == "reference" else "on this NPU"
        print(f"\nselftest passed: the route {where} agrees with the reference.")
        return 0
    unverified = [c.name for c in report.checks if c.status != PASS]
    print(f"\nselftest NOT passed: {len(unverified)} check(s) failed or could not run here ({', '.join(unverified)})")
    return 1


def selftest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--om-root",
        type=Path,
        help="folder holding one OM package per subfolder: every one is checked as its kind says (OCR det, rec, "
        "split table, layout, orientation); the acceptance set is PP-OCRv4_mobile_det and PP-OCRv4_mobile_rec",
    )
    p.add_argument(
        "--models",
        help="comma-separated subfolders of --om-root to check (default: every package there)",
    )
    p.add_argument("--json", help="write the JSON report here (attach it to a bug report)")
    p.add_argument(
        "--device-id",
        type=int,
        default=0,
        help="logical NPU id, counted after ASCEND_RT_VISIBLE_DEVICES",
    )
    p.add_argument(
        "--runtime",
        default="ais_bench",
        choices=("ais_bench", "reference"),
        help="ais_bench: the NPU; reference: the same checks on the CPU against packages built by convert",
    )


def run_precision_preview(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..reports.precision_preview import preview

    try:
        report = preview(args.pipeline, args.images)
    except PaddlexNpuError as exc:
        return fail("precision-preview", exc)
    print("packages as built: " + ", ".join(f"{k} {v}" for k, v in report.precisions.items()))
    for page in report.pages:
        print(
            f"{page.image}: {page.lines} line(s), {len(page.changed)} text(s) changed, "
            f"{len(page.only_fp32) + len(page.only_fp16)} box(es) on one side only, boxes moved <= "
            f"{page.max_box_shift:.1f} px, scores changed <= {page.max_score_change:.4f}"
        )
        for old, new in page.changed:
            print(f"    fp32 {old!r} -> fp16 {new!r}")
        for text in page.only_fp32:
            print(f"    fp32 only: {text!r}")
        for text in page.only_fp16:
            print(f"    fp16 only: {text!r}")
    total = report.summary()
    print(
        f"\n{total['images']} image(s), {total['lines']} line(s): {total['changed_texts']} text(s) changed, "
        f"{total['boxes_one_side']} box(es) on one side only, boxes moved <= {total['max_box_shift']:.1f} px, "
        f"scores changed <= {total['max_score_change']:.4f}"
    )
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
        print(f"report: {args.json}")
    return 0


def precision_preview_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", help="a PaddleX pipeline YAML over OM packages (paddlex-npu convert builds them)")
    p.add_argument("images", type=Path, nargs="+", help="image files, or folders of images")
    p.add_argument("--json", help="write the per-image differences here as JSON")


def run_info(args: argparse.Namespace) -> int:
    import importlib.util

    from ..paddlex.patcher import paddlex_version
    from ..paddlex.versions import SUPPORTED_TEXT

    print(f"- paddlex-npu: {__version__}")
    print(f"- supported: {SUPPORTED_TEXT}")
    print(f"- paddlex: {paddlex_version() or 'not installed'}")
    for mod in ("ais_bench", "aclruntime", "onnxruntime", "paddle"):
        print(f"- {mod}: {'importable' if importlib.util.find_spec(mod) else 'missing'}")
    line, valid = runtime_line()
    print(line)
    return 0 if valid else 1


def runtime_line() -> Tuple[str, bool]:
    """(the info line of the runtime $PADDLEX_NPU_RUNTIME chooses, whether that value is one the route takes)."""
    from ..run.session import DEFAULT_RUNTIME, RUNTIMES

    name = envs.RUNTIME.name

    value = envs.runtime()
    if value and value not in RUNTIMES:
        return (
            f"- runtime: {value} [x] INVALID: {name}={value} is none of {', '.join(RUNTIMES)}, and the "
            f"NPU route refuses it: set one of them ({name}=reference for the CPU) or unset it "
            f"for the default, {DEFAULT_RUNTIME}",
            False,
        )
    return f"- runtime: {value or DEFAULT_RUNTIME} (set {name}=reference for the CPU)", True


COMMANDS = (
    Command(
        "inspect",
        "what an OM package or ONNX holds",
        run_inspect,
        lambda p: p.add_argument("path", type=Path, help="an OM package folder, an .om or an .onnx"),
        example="paddlex-npu inspect ~/.cache/paddlex_npu/assets/om/PP-OCRv4_mobile_det",
    ),
    Command(
        "doctor",
        "check the machine for the NPU route and say how to fix it",
        run_doctor,
        example="paddlex-npu doctor",
    ),
    Command(
        "support",
        "which PaddleX predictors the NPU route covers (from PaddleX's registry)",
        run_support,
        needs_route=True,
        example="paddlex-npu support",
    ),
    Command("info", "show versions and runtimes", run_info, example="paddlex-npu info"),
    Command(
        "selftest",
        "hardware acceptance: the route on the NPU vs the reference runtime",
        run_selftest,
        selftest_args,
        example="paddlex-npu selftest --om-root DIR --json report.json",
    ),
    Command(
        "precision-preview",
        "on the CPU: an OCR pipeline's results at fp32 and at its packages' precision (ATC's fp16), compared",
        run_precision_preview,
        precision_preview_args,
        needs_route=True,
        example="paddlex-npu precision-preview ocr.yaml my_pages/ --json fp16.json",
    ),
)


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
