"""From a PaddleX model folder to an OM package: ONNX, ATC options for the task and chip, manifest, package.

``paddlex-npu convert MODEL_DIR -o OUT_DIR --soc-version Ascend310P3 [--mode dymshape|gears|static]``

1. ONNX: ``inference.onnx`` of the folder, else exported from ``inference.pdmodel``/``.pdiparams`` with
   paddle2onnx 1.3.1 here, or from a PIR ``inference.json``/``.pdiparams`` with paddle2onnx 2.x in an export
   environment (:mod:`.export`, :mod:`.export_env`), then checked against Paddle on a sample input.
   A text recognition model decoded by ``CTCLabelDecode`` gets its CTC output reduced on the device (ArgMax and
   ReduceMax over the classes, :mod:`.reduction`; ``reduce=False`` / ``--no-reduce``: the full output).
   A text detection model normalised by ``NormalizeImage`` takes 8-bit pixels and normalises them on the device
   (:mod:`.normalisation`; ``device_normalise=False`` / ``--no-device-normalise``: float32 as PaddleX gives it).
2. ATC options from the task (:mod:`.tasks`) and ``inference.yml``; user overrides win.
3. The exact ``atc`` command (:mod:`paddlex_npu.om.atc`); run when ``atc`` is on PATH, else written to ``atc.sh``.
4. The package: ``inference.yml``, ``inference.om.json`` (the manifest), ``inference.onnx``, and
   ``inference.om`` when ATC ran. It is assembled in a temporary folder and moved into place only when
   complete, so a failure leaves no half-written package.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from ..errors import ConfigError, ConvertError, ModelFileError
from ..log import logger
from ..om import manifest as mf
from ..om.aicpu_ops import aicpu_nodes, describe_placement
from ..om.atc import (
    KEEP_DTYPE_FILE,
    atc_args,
    atc_has_precision_mode_v2,
    check_precision,
    check_soc_version,
    gear_mode_for,
    parse_gears,
    parse_input_shape,
    precision_probe_sh,
)
from ..om.atc_ops import CANN_GENERATIONS, DEFAULT_CANN, check_ops, describe
from ..om.graph import data_dependent_outputs
from ..run.shape_solver import derive_file
from . import export_env as xenv
from .export import (
    OnnxModel,
    check_against_paddle,
    check_pir_against_paddle,
    export_onnx,
    export_pir,
    is_pir,
    no_export_env,
)
from .normalisation import maybe_normalise
from .reduction import maybe_reduce
from .shapes import (
    REC_MAX_WIDTH,
    Task,
    default_gears,
    default_ranges,
    sample_shape,
    task_of,
    task_shapes,
)

MODES = ("dymshape", "gears", "static")
SAMPLE_KINDS = ("pages", "lines")
PRECISIONS = ("fp16", "fp32")
DEFAULT_MAX_GEARS = 8
LOOP_BODIES = ("step", "first")  # the parts of a split model that run one decoder step (build/loop_convert.py)

__all__ = ["ConvertResult", "Conversion", "check_options", "convert", "plan_conversion"]


@dataclass
class Conversion:
    """Everything worked out for a package, before ATC."""

    model_name: str
    task: Task
    onnx_path: Path
    manifest: mf.OMManifest
    notes: List[str] = field(default_factory=list)
    parts: List[Any] = field(default_factory=list)  # a model split around its Loop: step/ and tail/ (loop_convert)


@dataclass
class ConvertResult:
    """What :func:`convert` built."""

    package: Path
    atc_ran: bool
    atc_command: str
    notes: List[str] = field(default_factory=list)


def check_options(
    soc: str,
    mode: str = "dymshape",
    *,
    gears: Optional[str] = None,
    samples: Optional[Path] = None,
    max_gears: Optional[int] = None,
    max_batch: int = 6,
    max_side: Optional[int] = None,
    precision: str = "fp16",
    export_env: Optional[str] = None,
    pipeline_config: Optional[Path] = None,
    det_package: Optional[Path] = None,
    samples_are: str = "pages",
    max_width: Optional[int] = None,
    cann: str = DEFAULT_CANN,
    **_: Any,
) -> None:
    """Refuse, before any work, options that make a package that cannot run, or that would be silently ignored."""
    check_soc_version(soc)
    if cann not in CANN_GENERATIONS:
        raise ConfigError(
            f"--cann-version {cann!r}: choose one of {', '.join(CANN_GENERATIONS)} (the CANN major version)"
        )
    xenv.check_export_env(export_env)
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    check_precision(soc, precision)
    if max_batch < 1:
        raise ConfigError(f"--max-batch {max_batch}: the largest batch the OM takes must be 1 or more")
    if max_side is not None and max_side < 32:
        raise ConfigError(f"--max-side {max_side}: text detection sides are multiples of 32, so give 32 or more")
    if gears and mode != "gears":
        raise ConfigError(f"--gears {gears!r} is used by --mode gears only (here --mode {mode}): add --mode gears")
    _check_gear_options(gears, samples, max_gears)
    _check_plan_options(gears, pipeline_config, det_package, samples_are, max_width)


def _check_plan_options(
    gears: Optional[str],
    pipeline_config: Optional[Path],
    det_package: Optional[Path],
    samples_are: str,
    max_width: Optional[int],
) -> None:
    given = {
        "--pipeline-config": pipeline_config,
        "--det-package": det_package,
        "--max-width": max_width,
        "--samples-are": None if samples_are == "pages" else samples_are,
    }
    for flag, value in given.items():
        if value is not None and gears != "auto":
            raise ConfigError(f"{flag} {value} is used by --gears auto only and would be ignored: drop it")
    if samples_are not in SAMPLE_KINDS:
        raise ConfigError(f"--samples-are {samples_are!r}: choose one of {', '.join(SAMPLE_KINDS)}")
    if max_width is not None and not 32 <= max_width <= REC_MAX_WIDTH:
        raise ConfigError(f"--max-width {max_width}: text recognition widths run from 32 to {REC_MAX_WIDTH}")
    if pipeline_config is not None and not Path(pipeline_config).is_file():
        raise ConfigError(f"--pipeline-config {pipeline_config} is not a file: give the OCR pipeline's YAML")
    if det_package is not None and not (Path(det_package) / "inference.onnx").is_file():
        raise ConfigError(
            f"--det-package {det_package} has no inference.onnx: give a text detection OM package (as "
            "`paddlex-npu convert` writes) or model folder with its ONNX"
        )


def _check_gear_options(gears: Optional[str], samples: Optional[Path], max_gears: Optional[int]) -> None:
    if max_gears is not None and gears != "auto":
        raise ConfigError(
            f"--max-gears {max_gears} bounds --gears auto only and would be ignored here: drop it, or use "
            "--gears auto --samples DIR"
        )
    if max_gears is not None and not mf.MIN_GEARS <= max_gears <= mf.MAX_GEARS:
        raise ConfigError(f"--max-gears {max_gears}: ATC accepts {mf.MIN_GEARS} to {mf.MAX_GEARS} gears")
    if gears and gears != "auto":
        parse_gears(gears)
    if samples is not None and gears != "auto":
        raise ConfigError(f"--samples {samples} is used by --gears auto only and would be ignored: drop it")
    if gears == "auto" and samples is None:
        raise ConfigError("--gears auto needs --samples DIR with sample inputs to plan from")
    if gears == "auto" and not Path(samples).is_dir():
        raise ConfigError(f"--samples {samples} is not a folder: give a folder of sample inputs")


def _read_model_folder(model_dir: Path) -> Tuple[Path, Dict[str, Any], str]:
    """(inference.yml, its content, Global.model_name) of a PaddleX model folder."""
    if model_dir.is_file():
        raise ModelFileError(
            f"{model_dir} is a file, not a model folder: give the PaddleX model folder that holds inference.yml "
            "and the model (inference.onnx, .pdmodel or .json), e.g. paddlex-npu convert MODEL_DIR -o PACKAGE"
        )
    if not model_dir.is_dir():
        raise ModelFileError(f"model folder {model_dir} does not exist")
    yml = model_dir / "inference.yml"
    if not yml.is_file():
        raise ModelFileError(f"{model_dir} has no inference.yml: it is not a PaddleX model folder")
    cfg = yaml.safe_load(yml.read_text(encoding="utf-8")) or {}
    model_name = (cfg.get("Global") or {}).get("model_name")
    if not model_name:
        raise ModelFileError(f"{yml} has no Global.model_name")
    return yml, cfg, model_name


def _onnx_in(model_dir: Path, work: Path, task: Task, notes: List[str], export_env: Optional[str] = None) -> OnnxModel:
    """``work/inference.onnx``: copied from the folder, or exported and checked against Paddle."""
    onnx_path = work / "inference.onnx"
    pir, has_onnx = is_pir(model_dir), (model_dir / "inference.onnx").is_file()
    if export_env and (not pir or has_onnx):
        why = "it has its inference.onnx" if has_onnx else "it is no PIR model"
        notes.append(f"--export-env {export_env} was not used: {model_dir} needs no PIR export ({why})")
    if has_onnx:
        shutil.copyfile(model_dir / "inference.onnx", onnx_path)
        return OnnxModel.open(onnx_path)
    if pir:
        return _pir_onnx_in(model_dir, onnx_path, task, notes, export_env)
    logger.info("exporting %s to ONNX with paddle2onnx 1.3.1", model_dir)
    export_onnx(model_dir, onnx_path)
    onnx = OnnxModel.open(onnx_path)
    worst = check_against_paddle(model_dir, onnx, _sample_feeds(task, onnx))
    notes.append(f"ONNX matches Paddle on a sample input (max abs diff {worst:.2e})")
    return onnx


def _check_data_dependent(outputs: List[str], mode: str, soc: str) -> None:
    """A model with data-dependent output shapes (NMS boxes) runs only as a dymshape OM (see om/manifest.py)."""
    if not outputs:
        return
    if mf.no_dymshape(soc):
        raise ConvertError(
            f"the model's outputs {outputs} have data-dependent shapes (e.g. boxes after NMS); ACL reports such "
            f"shapes only for dynamic-shape (dymshape) OMs, which {soc} cannot run (CANN: Ascend 310/310B run gears "
            f"only, and CANN's gears do not support such networks): this model cannot run on {soc}. Build it for an "
            "Ascend 310P or 910 with --mode dymshape"
        )
    if mode != "dymshape":
        raise ConvertError(
            f"--mode {mode}: the model's outputs {outputs} have data-dependent shapes (e.g. boxes after NMS); in "
            "gear and static modes ACL knows only compiled output shapes (aclmdlGetCurOutputDims) and ais_bench "
            "would return the whole output buffer as a flat array. Use --mode dymshape (the default)"
        )


def _sample_feeds(task: Task, onnx: OnnxModel) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {n: rng.random(sample_shape(task, s), dtype=np.float32).astype(dt) for n, s, dt in onnx.inputs}


def _pir_onnx_in(
    model_dir: Path, onnx_path: Path, task: Task, notes: List[str], export_env: Optional[str]
) -> OnnxModel:
    """A PIR model exported with paddle2onnx 2.x in the export environment, checked against Paddle."""
    env = xenv.resolve(export_env, notes)
    if env is None:
        raise no_export_env(model_dir)
    logger.info("exporting %s (PIR) to ONNX with %s in %s", model_dir, env.versions or "paddle2onnx", env.label)
    export_pir(model_dir, onnx_path, env)
    onnx = OnnxModel.open(onnx_path)
    worst, where = check_pir_against_paddle(model_dir, onnx, _sample_feeds(task, onnx), env)
    notes.append(f"exported the PIR model with {env.versions} in {env.label}")
    notes.append(f"ONNX matches Paddle ({where}) on a sample input (max abs diff {worst:.2e})")
    return onnx


def _manifest(
    mode: str,
    task: Task,
    specs: List[mf.InputSpec],
    gear_list: Optional[List[List[int]]],
    data_dependent: Optional[List[str]] = None,
) -> mf.OMManifest:
    """The manifest of the OM to build: static, dymshape ranges, or gears (``gear_list`` None: the defaults)."""
    shapes = [s.shape for s in specs]
    if data_dependent:  # dymshape, even when no input dim varies (checked by _check_data_dependent)
        ranges = default_ranges(task, shapes)
        return mf.OMManifest(
            mode="dymshape",
            inputs=[sp.model_copy(update={"range": r}) for sp, r in zip(specs, ranges)],
            data_dependent=data_dependent,
        )
    if mode == "static" or not any(d < 0 for s in shapes for d in s):
        if any(d < 0 for s in shapes for d in s):
            gear_mode, options = default_gears(task, shapes)
            largest = mf.OMManifest(mode=gear_mode, inputs=specs, gears=options).gear_shapes()[-1]
            specs = [sp.model_copy(update={"shape": g}) for sp, g in zip(specs, largest)]
        return mf.OMManifest(mode="static", inputs=specs)
    if mode == "dymshape":
        ranges = default_ranges(task, shapes)
        return mf.OMManifest(
            mode="dymshape", inputs=[sp.model_copy(update={"range": r}) for sp, r in zip(specs, ranges)]
        )
    gear_mode = gear_mode_for(shapes, [s.format for s in specs])
    if gear_list is None:
        default_mode, gear_list = default_gears(task, shapes)
        gear_mode = default_mode if task.kind != "batch" and gear_mode != "dymdims" else gear_mode
    return mf.parse(
        {"mode": gear_mode, "inputs": [s.model_dump() for s in specs], "gears": gear_list}, "the gears for this model"
    )


def _kept(onnx_path: Path, names: Optional[Sequence[str]], precision: str) -> Optional[List[str]]:
    """The operators to keep in float32 (ATC ``--keep_dtype``), checked against the model's node names; ATC
    ignores the option with ``--precision_mode_v2=origin`` (``--precision fp32``), so that is refused."""
    if not names:
        return None
    if precision != "fp16":
        raise ConfigError(
            f"--keep-dtype keeps operators in float32 under --precision fp16; with --precision {precision} "
            "the whole model is already kept as built (ATC ignores --keep_dtype with origin): drop one"
        )
    import onnx

    nodes = {n.name for n in onnx.load(str(onnx_path), load_external_data=False).graph.node}
    unknown = [n for n in names if n not in nodes]
    if unknown:
        raise ConfigError(
            f"--keep-dtype {','.join(unknown)}: no such operator in {onnx_path.name} (give ONNX node names, as "
            "`paddlex-npu inspect` or Netron shows them)"
        )
    return list(dict.fromkeys(names))


def plan_conversion(
    model_dir: Path,
    work: Path,
    soc: str,
    mode: str = "dymshape",
    *,
    input_shape: Optional[str] = None,
    gears: Optional[str] = None,
    samples: Optional[Path] = None,
    max_gears: Optional[int] = None,
    max_batch: int = 6,
    max_side: Optional[int] = None,
    precision: str = "fp16",
    export_env: Optional[str] = None,
    reduce: bool = True,
    device_normalise: bool = True,
    cann: str = DEFAULT_CANN,
    keep_dtype: Optional[Sequence[str]] = None,
    **plan: Any,
) -> Conversion:
    """Work out everything for the package in ``work`` (ONNX and inference.yml written there); no ATC yet.
    ``max_gears``: at most this many planned gears (default 8). ``export_env``: where a PIR model is exported
    (``None``: here if it has paddle2onnx 2.x; ``"auto"``; a venv path). ``plan``: :func:`_planned_gears`'s options.
    ``reduce``: a CTC output reduced on the device (:mod:`.reduction`); ``device_normalise``: a detection model
    takes uint8 pixels (:mod:`.normalisation`); ``keep_dtype``: ONNX nodes ATC keeps in float32 under fp16."""
    shapes_given = dict(gears=gears, samples=samples, max_gears=max_gears, max_batch=max_batch, max_side=max_side)
    check_options(soc, mode, precision=precision, export_env=export_env, cann=cann, **shapes_given, **plan)
    yml, cfg, model_name = _read_model_folder(model_dir)
    task = task_of(model_name, cfg, max_batch=max_batch, max_side=max_side)
    notes: List[str] = []
    onnx = _onnx_in(model_dir, work, task, notes, export_env)
    shutil.copyfile(yml, work / "inference.yml")
    if _check_atc_ops(onnx.path, cann, notes):
        return _plan_split(model_name, task, onnx, work, soc, mode, input_shape, gears, precision, cann, notes)
    _check_data_dependent(data_dependent := data_dependent_outputs(onnx.path), mode, soc)
    shapes, specs = _input_specs(onnx, task, input_shape)
    plan.update(max_gears=max_gears or DEFAULT_MAX_GEARS, max_side=max_side)
    gear_list = _gear_list(model_name, work, task, shapes, gears, samples, notes, plan)
    # after planning, which runs the model as PaddleX does; the planner reads input shapes only
    onnx, reduction = _reduced(onnx, task, cfg, reduce, notes)
    output_dims = derive_file(onnx.path, data_dependent)  # before the normalising head, which changes no shape
    onnx, specs, normalisation = _normalised(onnx, specs, task, cfg, device_normalise, notes)
    onnx = _pinned(onnx, specs, notes) if _one_shape(mode, gear_list, data_dependent, specs) else onnx
    man = _manifest(mode, task, specs, gear_list, data_dependent).model_copy(
        update={
            "soc_version": soc,
            "precision": precision,
            "onnx_sha256": mf.sha256(onnx.path),
            "outputs": onnx.outputs,
            "output_dims": output_dims,
            "reduction": reduction,
            "normalisation": normalisation,
            "keep_dtype": _kept(onnx.path, keep_dtype, precision),
        }
    )
    man.check_soc()
    _warn_aicpu(onnx.path, soc, "the model", notes)
    given = [f"--{k.replace('_', '-')} {v}" for k, v in (("gears", gears), ("input_shape", input_shape)) if v]
    _check_loadable(model_name, task, onnx.path, man, " and ".join(given) or "convert's shapes for this task")
    return Conversion(model_name, task, onnx.path, man, notes)


def _gear_list(
    model_name: str,
    work: Path,
    task: Any,
    shapes: Any,
    gears: Optional[str],
    samples: Optional[Path],
    notes: List[str],
    plan: Dict[str, Any],
) -> Optional[List[Any]]:
    """The gears: planned from ``samples`` (``gears="auto"``), parsed from ATC's syntax, or None."""
    if gears == "auto" and samples is not None:
        return _planned_gears(model_name, work, task, shapes, samples, notes, **plan)
    return parse_gears(gears) if gears else None


def _check_atc_ops(onnx_path: Path, cann: str, notes: List[str]) -> bool:
    """Refuse a graph with an operator ATC of CANN ``cann`` cannot build (:mod:`paddlex_npu.om.atc_ops`), naming
    the nodes; note the AI CPU ones. True when the only obstacle is one top-level Loop: the model is split."""
    import onnx

    from ..om.loop_split import top_loops

    proto = onnx.load(str(onnx_path), load_external_data=False)
    refused, aicpu = check_ops(proto, cann)
    loops = {proto.graph.node[i].name for i in top_loops(proto.graph)}
    if aicpu:
        text = describe(aicpu)
        logger.warning("ATC places these operators on the AI CPU: %s", text)
        notes.append(f"on the AI CPU (slower than the AI Core, a round trip per call in dymshape): {text}")
    if refused and len(loops) == 1 and all(i.node in loops for i in refused):
        return True
    if refused:
        raise ConvertError(
            f"ATC of CANN {cann} cannot build this graph: {describe(refused)}. What to do: a Loop is split by "
            "convert only when it is the graph's one top-level Loop; re-export with another opset (paddle2onnx "
            "--opset_version) or without the operator, or try --cann-version with a CANN generation that has it"
        )
    return False


def _warn_aicpu(onnx_path: Path, soc: str, part: str, notes: List[str], loop_body: bool = False) -> None:
    """Warn of the nodes of ``part`` that ATC places on the AI CPU of ``soc``, by name (:mod:`paddlex_npu.om.aicpu_ops`;
    ``loop_body``: the part is a decoder's step)."""
    import onnx

    placement = aicpu_nodes(onnx.load(str(onnx_path), load_external_data=False), soc)
    text = describe_placement(placement, part, soc, loop_body) if placement else ""
    if text:
        logger.warning("%s", text)
        notes.append(text)


def _plan_split(
    model_name: str,
    task: Task,
    onnx: OnnxModel,
    work: Path,
    soc: str,
    mode: str,
    input_shape: Optional[str],
    gears: Optional[str],
    precision: str,
    cann: str,
    notes: List[str],
) -> Conversion:
    """The encoder, step and tail packages of a model with a data-dependent Loop (:mod:`.loop_convert`)."""
    from .loop_convert import split_parts

    if gears or mode == "gears":
        raise ConvertError("--mode gears: a model split around its Loop runs as static parts and a dymshape tail")
    shapes, _ = _input_specs(onnx, task, input_shape)
    fixed = {n: [1 if j == 0 and d < 0 else d for j, d in enumerate(s)] for (n, _, _), s in zip(onnx.inputs, shapes)}
    open_dims = {n: s for n, s in fixed.items() if any(d < 0 for d in s)}
    if open_dims:
        raise ConvertError(
            f"the model's Loop is run on the host between static device models, but the inputs {open_dims} have "
            "dims its preprocessing does not fix: pass --input-shape with fixed dims (e.g. 'x:1,3,488,488')"
        )
    whole = work / "whole.onnx"
    onnx.path.rename(whole)
    parts, spec, more = split_parts(whole, work, fixed, soc, precision)
    whole.unlink()
    notes.extend(more)
    for part in parts:
        _check_atc_ops(part.onnx_path, cann, notes)
        label = f"{part.folder}/" if part.folder else "encoder"
        _warn_aicpu(part.onnx_path, soc, label, notes, part.folder in LOOP_BODIES)
        if part.folder:  # a package of its own: the model's inference.yml, as every package has
            shutil.copyfile(work / "inference.yml", work / part.folder / "inference.yml")
        _check_data_dependent(part.manifest.data_dependent, part.manifest.mode, soc)
    encoder = parts[0].manifest.model_copy(update={"loop": spec})
    encoder.check_soc()
    return Conversion(model_name, task, parts[0].onnx_path, encoder, notes, parts[1:])


def _reduced(
    onnx: OnnxModel, task: Task, cfg: Dict[str, Any], reduce: bool, notes: List[str]
) -> Tuple[OnnxModel, Optional[mf.OutputReduction]]:
    """The ONNX with a CTC recognition output reduced on the device (:mod:`.reduction`), and the reduction."""
    reduction = maybe_reduce(onnx.path, task.kind, cfg, reduce)
    if reduction is None:
        return onnx, None
    notes.append(
        f"the CTC output {reduction.source} [N, T, {reduction.classes}] is reduced on the device to [N, T] indices "
        f"and scores (8 bytes a step instead of {4 * reduction.classes}; --no-reduce: not)"
    )
    return OnnxModel.open(onnx.path), reduction


def _normalised(
    onnx: OnnxModel, specs: List[mf.InputSpec], task: Task, cfg: Dict[str, Any], enabled: bool, notes: List[str]
) -> Tuple[OnnxModel, List[mf.InputSpec], Optional[mf.InputNormalisation]]:
    """The ONNX taking 8-bit pixels normalised on the device (:mod:`.normalisation`), its input specs, and the
    normalisation."""
    normalisation = maybe_normalise(onnx.path, task.kind, cfg, enabled)
    if normalisation is None:
        return onnx, specs, None
    row = normalisation.mask_row  # recognition: one more row, the lines' mask (:mod:`.normalisation`)
    notes.append(
        f"the input {normalisation.input} takes 8-bit pixels, normalised on the device as PaddleX's "
        + ("NormalizeImage" if row is None else f"OCRReisizeNormImg, its padding marked by row {row} of channel 0")
        + " (a quarter of the bytes to the device, no normalisation on the host; --no-device-normalise: not)"
    )
    specs = [_pixels_spec(i, row) if i.name == normalisation.input else i for i in specs]
    return OnnxModel.open(onnx.path), specs, normalisation


def _pixels_spec(spec: mf.InputSpec, mask_row: Optional[int]) -> mf.InputSpec:
    """An input spec taking uint8 pixels, with the mask row below the lines' H rows when ``mask_row`` is set."""
    if mask_row is None:
        return spec.model_copy(update={"dtype": "uint8"})
    shape = [d + 1 if j == 2 and d > 0 else d for j, d in enumerate(spec.shape)]
    ranges = [(lo + 1, hi + 1 if hi > 0 else hi) if j == 2 else (lo, hi) for j, (lo, hi) in enumerate(spec.range or [])]
    return spec.model_copy(update={"dtype": "uint8", "shape": shape, "range": ranges or None})


def _one_shape(mode: str, gear_list: Any, data_dependent: List[str], specs: List[mf.InputSpec]) -> bool:
    """Whether the OM is static: asked for, or no input dim varies and no output is data-dependent (RT-DETR's
    800x800)."""
    fixed = all(d > 0 for i in specs for d in i.shape)
    return not gear_list and (mode == "static" or not data_dependent and fixed)


def _pinned(onnx: OnnxModel, specs: List[mf.InputSpec], notes: List[str]) -> OnnxModel:
    """A static package's outputs that GE's shape inference cannot type from the graph (paddle2onnx's shape
    arithmetic: PP-OCRv4 rec's time steps; correction 33) end in a ``Reshape`` to the shape one run at the static
    shape gives, so the OM's descriptors are all known (:func:`paddlex_npu.om.graph.ge_output_dims`)."""
    import onnx as onnx_lib

    from ..om.graph import ge_output_dims
    from .loop_convert import pin_outputs

    shapes = [list(i.shape) for i in specs]
    if any(d < 0 for s in shapes for d in s):
        return onnx  # not one static shape (the gears or ranges decide)
    proto = onnx_lib.load(str(onnx.path))
    inferred = ge_output_dims(proto, shapes) or [[-1]] * len(onnx.outputs)
    open_outputs = [n for n, d in zip(onnx.outputs, inferred) if d is None or any(x < 0 for x in d)]
    if not open_outputs:
        return onnx
    feeds = {i.name: np.zeros(i.shape, np.dtype(i.dtype)) for i in specs}
    try:
        ran = dict(zip(onnx.outputs, onnx.session.run(None, feeds)))
    except Exception:  # noqa: BLE001 - the model cannot take the shape: _check_loadable refuses it, naming it
        return onnx
    pin_outputs(proto, {n: (list(ran[n].shape), ran[n].dtype) for n in open_outputs})
    onnx_lib.save(proto, str(onnx.path))
    notes.append(f"outputs {open_outputs} end in a Reshape to their static shapes (GE cannot infer them otherwise)")
    return OnnxModel.open(onnx.path)


def _check_loadable(model_name: str, task: Task, onnx_path: Path, man: mf.OMManifest, source: str) -> None:
    """What the runner checks when it loads the package (the task's shape rules; every gear through ONNX shape
    inference, the model not run), checked before ATC runs and anything is written. ``source``: where the
    shapes came from, for the message."""
    from ..run.gears import check_task_rules, policy_for
    from ..run.reference_om import ReferenceOM

    try:
        check_task_rules(man, policy_for(task.predictor), model_name)
        ReferenceOM(onnx_path, man).output_descs()
    except ConfigError as exc:
        raise ConfigError(f"{source} describe an OM the route would refuse at load: {exc}") from None


def _input_specs(onnx: OnnxModel, task: Task, input_shape: Optional[str]) -> Tuple[List[List[int]], List[mf.InputSpec]]:
    """The ATC input shapes (the task's, ``--input-shape`` overrides winning) and the manifest's input specs."""
    names = [n for n, _, _ in onnx.inputs]
    shapes = task_shapes(task, onnx.inputs)
    if input_shape:
        given = parse_input_shape(input_shape, names)
        for name, onnx_shape, _ in onnx.inputs:
            if name in given and len(given[name]) != len(onnx_shape):
                raise ConfigError(
                    f"--input-shape {input_shape!r}: {name} has {len(given[name])} dims there and "
                    f"{len(onnx_shape)} in the model ({','.join(map(str, onnx_shape))}): give all {len(onnx_shape)}"
                )
        shapes = [given.get(n, s) for n, s in zip(names, shapes)]
    specs = [
        mf.InputSpec(name=n, dtype=dt, format="NCHW" if len(s) == 4 else "ND", shape=s)
        for (n, _, dt), s in zip(onnx.inputs, shapes)
    ]
    return shapes, specs


def _planned_ocr_gears(
    model_name: str, work: Path, task: Task, files: List[str], notes: List[str], **plan: Any
) -> List[List[int]]:
    """Gears of an OCR model, planned for the pipeline's settings (``pipeline_config``, else PaddleX's default)."""
    from ..paddlex.planning import ocr_pipeline_config
    from .planner import OcrSettings, plan_ocr_gears

    config, source = ocr_pipeline_config(plan.get("pipeline_config"))
    settings = OcrSettings.from_config(config, source)
    det_package = plan.get("det_package")
    det = (_read_model_folder(Path(det_package))[2], Path(det_package)) if det_package else None
    gears, more = plan_ocr_gears(
        task.kind,
        model_name,
        work,
        files,
        plan["max_gears"],
        settings,
        config=config,
        max_side=plan.get("max_side"),
        max_width=plan.get("max_width"),
        det=det,
        sample_kind=plan.get("samples_are") or "pages",
    )
    notes.extend(more)
    return gears


def _planned_gears(
    model_name: str, work: Path, task: Task, shapes: List[List[int]], samples: Path, notes: List[str], **plan: Any
) -> List[List[int]]:
    """Plan gears from the real input shapes PaddleX's preprocessing makes of the sample inputs (OCR models: as
    the OCR pipeline runs them, :func:`_planned_ocr_gears`)."""
    from .planner import padding_ratio, plan_gears, sample_input_shapes

    files = sorted(p for p in Path(samples).iterdir() if p.is_file())
    if not files:
        raise ConfigError(f"--samples {samples} has no files")
    if task.kind in ("text_det", "text_rec"):
        return _planned_ocr_gears(model_name, work, task, [str(f) for f in files], notes, **plan)
    max_gears = plan["max_gears"]
    seen = sample_input_shapes(model_name, work, [str(f) for f in files], batch_size=task.max_batch)
    dyn = [(i, j) for i, s in enumerate(shapes) for j, d in enumerate(s) if d < 0]
    points = [[shape[i][j] for i, j in dyn] for shape in seen]
    gears = plan_gears(points, max_gears)
    top = [[max(p[k] for p in points) for k in range(len(dyn))]]
    notes.append(
        f"planned {len(gears)} gears from {len(points)} sample inputs: padded/real = "
        f"{padding_ratio(points, gears):.3f} (one shape holding all: {padding_ratio(points, top):.3f})"
    )
    if gear_mode_for(shapes, ["NCHW"] * len(shapes)) == "dymbatch":
        return [[g[0]] for g in gears]
    return gears


def run_atc(args: List[str], log: Path) -> None:
    """Run ATC, streaming its output with a progress line; raise with the log's tail on failure. ATC runs in a
    throwaway folder of its own (it writes ``kernel_meta/``, ``fusion_result.json`` and logs into its working
    directory), never the caller's, which may be read-only or shared; ``args`` name absolute paths."""
    from tqdm import tqdm

    with open(log, "w") as f, tqdm(desc="atc", unit=" lines", leave=False) as bar, tempfile.TemporaryDirectory(
        prefix="paddlex-npu-atc-"
    ) as cwd:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            bar.update(1)
            bar.set_postfix_str(line.strip()[:60])
        rc = proc.wait()
    if rc != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise ConvertError(f"atc failed (exit {rc}); its last lines:\n{tail}")


ATC_SH_HEAD = """#!/usr/bin/env bash
set -e
cd "$(dirname "$0")"
shopt -s nullglob
old=(inference*.om)
if [ ${#old[@]} -gt 0 ]; then
  mkdir -p .previous-om && mv -- "${old[@]}" .previous-om/
  trap 'if [ -d .previous-om ]; then mv -- .previous-om/* . && rmdir .previous-om; fi' EXIT
fi
"""

ATC_SH_TAIL = """
# ATC may name the OM inference_<os>_<arch>.om: the package's OM is inference.om
oms=(inference*.om)
if [ ${#oms[@]} -eq 0 ]; then
  echo "atc exited 0 but wrote no inference*.om in $PWD: see its output above" >&2
  exit 1
elif [ ${#oms[@]} -gt 1 ]; then
  echo "atc wrote several OMs in $PWD (${oms[*]}): keep the one for this machine as inference.om" >&2
  exit 1
elif [ "${oms[0]}" != inference.om ]; then
  mv -- "${oms[0]}" inference.om
fi
rm -rf .previous-om
"""


def _atc_script(args: List[str], precision: str) -> str:
    """``atc.sh``: run ATC in the package folder, then name its OM inference.om. An older OM is set aside
    first (so that it cannot hide the new one) and put back if the build fails. The precision option is chosen
    by probing the ATC found when the script runs (``--precision_mode_v2`` or the older ``--precision_mode``)."""
    return ATC_SH_HEAD + precision_probe_sh(precision) + shlex.join(args) + ' "${PRECISION[@]}"\n' + ATC_SH_TAIL


def _name_the_om(work: Path, log: Path) -> None:
    """ATC may write ``inference_<os>_<arch>.om``: rename the OM it wrote to ``inference.om``."""
    oms = sorted(work.glob("inference*.om"))
    if not oms:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise ConvertError(
            f"atc exited 0 but wrote no inference*.om (check its log and the disk space); its last lines:\n{tail}"
        )
    if len(oms) > 1:
        raise ConvertError(f"atc wrote several OMs ({', '.join(p.name for p in oms)}): cannot tell which to package")
    if oms[0].name != "inference.om":
        oms[0].rename(work / "inference.om")


def _write_package(conv: Conversion, work: Path, out_dir: Path, soc: str, run: bool) -> str:
    """ATC (or atc.sh) and the manifest in ``work``; returns the ATC command as it reads in ``out_dir``."""

    precision = conv.manifest.precision or "fp16"
    v2 = atc_has_precision_mode_v2() if run else True

    def args_in(folder: Path, with_precision: bool = True) -> List[str]:  # the package's final or working folder
        prec = precision if with_precision else None
        return atc_args(folder / "inference.onnx", folder / "inference", soc, conv.manifest, prec, v2)

    command = shlex.join(args_in(out_dir))
    if conv.manifest.keep_dtype:  # ATC --keep_dtype: a file of operator names, one a line
        (work / KEEP_DTYPE_FILE).write_text("\n".join(conv.manifest.keep_dtype) + "\n", encoding="utf-8")
    _build_om(work, args_in, precision, run, [f"{p.folder}/atc.sh" for p in conv.parts])
    conv.manifest.model_copy(update={"atc_command": command}).save(work / mf.MANIFEST_NAME)
    for part in conv.parts:  # a split model's step/ and tail/: packages of their own

        def part_args(folder: Path, with_precision: bool = True, man: mf.OMManifest = part.manifest) -> List[str]:
            prec = precision if with_precision else None
            return atc_args(folder / "inference.onnx", folder / "inference", soc, man, prec, v2)

        _build_om(work / part.folder, part_args, precision, run, [])
        cmd = shlex.join(part_args(out_dir / part.folder))
        part.manifest.model_copy(update={"atc_command": cmd}).save(work / part.folder / mf.MANIFEST_NAME)
        command += f" && {cmd}"
    return command


def _build_om(folder: Path, args_in: Any, precision: str, run: bool, then: List[str]) -> None:
    """ATC in ``folder`` (``run``), else its ``atc.sh``, which runs the scripts ``then`` after its own build."""
    if run:
        run_atc(args_in(folder.resolve()), folder / "atc.log")
        _name_the_om(folder, folder / "atc.log")
        return
    script = _atc_script(args_in(Path("."), with_precision=False), precision)
    script += "".join(f'"$PWD/{t}"\n' for t in then)
    (folder / "atc.sh").write_text(script)
    (folder / "atc.sh").chmod(0o755)


def _check_output(model_dir: Path, out_dir: Path, overwrite: bool) -> None:
    """Refuse an output that would overwrite or mix with the model folder, or replace what is not a package."""
    src, dst = model_dir.resolve(), out_dir.resolve()
    if dst == src or dst in src.parents or src in dst.parents:
        raise ConvertError(
            f"-o {out_dir} ({dst}) is, holds or is inside the model folder {model_dir} ({src}): the package would "
            f"replace or mix with the model's files. Choose an -o outside it, e.g. {src.parent / (src.name + '_om')}"
        )
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ConvertError(f"-o {out_dir} exists and is not a folder: choose another -o")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if not overwrite:
        raise ConvertError(f"{out_dir} exists and is not empty: choose another -o or pass --overwrite")
    if not (out_dir / mf.MANIFEST_NAME).is_file():
        raise ConvertError(
            f"{out_dir} is not empty and has no {mf.MANIFEST_NAME}, so it is not a paddlex-npu package: "
            "--overwrite replaces packages only and keeps these files. Choose another -o, or empty it yourself"
        )


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _make_work(out_dir: Path) -> Path:
    """A temporary folder beside ``out_dir`` to assemble the package in."""
    parent = out_dir.parent if str(out_dir.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=parent))
    except OSError as exc:
        raise ConvertError(f"cannot write the package under {parent} ({exc}): choose a writable -o") from exc


def resolve_soc_version(soc: Optional[str]) -> str:
    """``soc``, or this machine's chip (``acl.get_soc_name()``) when none is given; without either, say how."""
    if soc:
        return soc
    from ..run.device_ids import soc_name

    found = soc_name()
    if not found:
        raise ConfigError(
            "no --soc-version given and no chip to read it from here (pyACL's acl.get_soc_name() needs CANN's "
            "set_env.sh and an Ascend chip): give the chip the OM is for, e.g. --soc-version Ascend310P3 (`npu-smi "
            "info -m` shows the Chip Name on the target machine)"
        )
    return found


def convert(
    model_dir: Path,
    out_dir: Path,
    soc: Optional[str],
    mode: str = "dymshape",
    *,
    overwrite: bool = False,
    run: Optional[bool] = None,
    **options: Any,
) -> ConvertResult:
    """Build the OM package in ``out_dir`` for the chip ``soc`` (None: this machine's, ``acl.get_soc_name()``).
    ``run``: run ATC (default: when it is on PATH).
    ``--overwrite`` replaces only an existing package (a folder with ``inference.om.json``)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    soc = resolve_soc_version(soc)
    check_options(soc, mode, **options)
    _check_output(model_dir, out_dir, overwrite)
    work = _make_work(out_dir)
    run = shutil.which("atc") is not None if run is None else run
    try:
        conv = plan_conversion(model_dir, work, soc, mode, **options)
        command = _write_package(conv, work, out_dir, soc, run)
        work.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700
        for f in work.rglob("*"):  # ais_bench refuses group/other-writable model files (om/paths.py)
            f.chmod(f.stat().st_mode & ~0o022)
        if out_dir.exists():
            _check_output(model_dir, out_dir, overwrite)
            shutil.rmtree(out_dir)
        work.rename(out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return ConvertResult(out_dir, run, command, conv.notes)
