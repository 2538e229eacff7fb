"""ATC's command-line syntax: ``--input_shape`` / gear strings in, the ``atc`` command for a manifest out."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..errors import ConfigError
from .manifest import MAX_GEARS, MIN_GEARS, OMManifest, range_text

SOC_VERSION = re.compile(
    r"Ascend(310|310B\d|310P[1-57]|310P3vir0[1248]|910|910(A|B|ProA|ProB|PremiumA)|910B[1-4]|910B2C|910B4-1"
    r"|910_93\d\d|950[A-Za-z0-9_]*)"
)  # the chips ATC's --soc_version names (CANN ATC docs; `acl.get_soc_name()` / `npu-smi info` show yours)
SOC_FAMILIES = (
    "Ascend310, Ascend310B1.., Ascend310P1-P5/P7, the vNPUs Ascend310P3vir01/02/04/08, Ascend910, "
    "Ascend910A/B/ProA/ProB/PremiumA, Ascend910B1-B4, Ascend910B2C, Ascend910B4-1, Ascend910_93xx, Ascend950.."
)
FP16_ONLY_SOCS = ("Ascend310", "Ascend310B", "Ascend310P")  # inference chips: the Cube units compute fp16, not fp32
# --precision_mode_v2 (CANN 7.0 / 23.0.RC2 on) and the older --precision_mode spelling of each precision.
PRECISION_V2 = {"fp16": "fp16", "fp32": "origin"}
PRECISION_V1 = {"fp16": "force_fp16", "fp32": "must_keep_origin_dtype"}


def check_soc_version(soc: str) -> None:
    """Refuse a ``--soc_version`` that names no Ascend chip ATC builds for."""
    if not SOC_VERSION.fullmatch(soc or ""):
        raise ConfigError(
            f"--soc-version {soc!r} is not an Ascend chip ATC builds for: use one of {SOC_FAMILIES} "
            "(the Chip Name of `npu-smi info`, prefixed by Ascend, e.g. Ascend310P3)"
        )


def fp16_only(soc: str) -> bool:
    """Whether ``soc`` is an inference chip (Ascend310 / 310B / 310P, vNPUs included) with fp16-only Cube units."""
    return any(soc == f or (soc.startswith(f) and soc[len(f) :][:1].isdigit()) for f in FP16_ONLY_SOCS)


def check_precision(soc: str, precision: str) -> None:
    """Refuse fp32 (ATC ``origin`` / ``must_keep_origin_dtype``) on an inference chip: its fp16-only kernels then
    run on the AI CPU (tens of times slower) or ATC fails to find an fp32 kernel."""
    if precision == "fp32" and fp16_only(soc):
        raise ConfigError(
            f"--precision fp32 on {soc}: Ascend310/310B/310P compute convolutions and matmuls in fp16 only, so an "
            "fp32 (origin) OM sends those operators to the AI CPU or fails to build; use --precision fp16 (the "
            "default; `paddlex-npu precision-preview` shows what it changes, `--keep-dtype` keeps named operators "
            "in fp32)"
        )


def precision_args(precision: str, v2: bool = True) -> List[str]:
    """ATC's precision option: ``--precision_mode_v2`` where this ATC has it (``v2``), else ``--precision_mode``."""
    if v2:
        return [f"--precision_mode_v2={PRECISION_V2[precision]}"]
    return [f"--precision_mode={PRECISION_V1[precision]}"]


def atc_has_precision_mode_v2(atc: str = "atc", timeout: float = 60.0) -> bool:
    """Whether this ATC knows ``--precision_mode_v2`` (``atc --help`` lists it; CANN 6.x's does not). Run in a
    throwaway folder: ATC writes ``kernel_meta/`` and logs into its working directory."""
    with tempfile.TemporaryDirectory(prefix="paddlex-npu-atc-") as cwd:
        try:
            proc = subprocess.run(
                [atc, "--help"], cwd=cwd, capture_output=True, text=True, timeout=timeout, errors="replace"
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return "--precision_mode_v2" in proc.stdout + proc.stderr


# atc.sh: the same probe in the shell, where the package is built later on a machine with CANN.
PRECISION_PROBE_SH = """# --precision_mode_v2 exists from CANN 7.0 on; older ATC refuses it and takes --precision_mode
probe=$(mktemp -d)  # atc writes into its working folder: ask it elsewhere
if (cd "$probe" && atc --help 2>&1) | grep -q -- --precision_mode_v2; then PRECISION=({v2}); else PRECISION=({v1}); fi
rm -rf "$probe"
"""


def precision_probe_sh(precision: str) -> str:
    """The shell lines of ``atc.sh`` that choose the precision option for the ATC found at run time."""
    return PRECISION_PROBE_SH.format(v2=precision_args(precision)[0], v1=precision_args(precision, False)[0])


def gear_mode_for(shapes: List[List[int]], formats: List[str]) -> str:
    """The gear mode ATC uses for inputs with these -1 dims: batch only; H/W when every input is a 4-D NCHW image
    and the -1 dims are H and W (one or more images: ais_bench's own dymhw ``add_model`` has two;
    ``--dynamic_image_size`` needs ``--input_format`` NCHW); else dims (ND)."""
    dyn = [[j for j, d in enumerate(s) if d < 0] for s in shapes]
    if all(d in ([], [0]) for d in dyn):
        return "dymbatch"
    all_images = all(len(s) == 4 and f == "NCHW" for s, f in zip(shapes, formats))
    if all_images and all(d in ([], [2, 3]) for d in dyn):  # ATC applies each H,W gear to every such image
        return "dymhw"
    return "dymdims"


def input_format(man: OMManifest) -> str:
    """ATC's one ``--input_format``: ND for dims gears or mixed inputs, else the inputs' common format."""
    formats = {i.format if len(i.shape) == 4 else "ND" for i in man.inputs}
    if man.mode == "dymdims" or len(formats) != 1:
        return "ND"
    return formats.pop()


def parse_input_shape(text: str, names: Sequence[str]) -> Dict[str, List[int]]:
    """ATC syntax ``"x:1,3,-1,-1;y:1,2"``; names must be model inputs."""
    out = {}
    for part in text.split(";"):
        name, sep, dims = part.strip().rpartition(":")
        if not sep or name not in names:
            raise ConfigError(
                f"--input-shape {text!r}: {name or part!r} is not an input of the model ({', '.join(names)})"
            )
        try:
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ConfigError(f"--input-shape {text!r}: dims must be integers (-1 for a varying dim)") from None
    return out


def parse_gears(text: str) -> List[List[int]]:
    """ATC gear syntax ``"640,640;960,960"``."""
    try:
        gears = [[int(v) for v in g.split(",")] for g in text.split(";") if g.strip()]
    except ValueError:
        raise ConfigError(f"--gears {text!r}: use 'auto' or ATC's syntax, e.g. '640,640;960,960'") from None
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        raise ConfigError(f"--gears has {len(gears)} gears; ATC accepts {MIN_GEARS} to {MAX_GEARS}")
    return gears


def input_shape_arg(man: OMManifest) -> str:
    """``--input_shape``: ranges for dymshape, -1 at the gear dims otherwise."""
    if man.mode == "dymshape":
        ranges = man.input_ranges()
        dims = {i.name: ",".join(range_text(lo, hi) for lo, hi in ranges[i.name]) for i in man.inputs}
    else:
        dims = {i.name: ",".join(map(str, i.shape)) for i in man.inputs}
    return ";".join(f"{n}:{d}" for n, d in dims.items())


KEEP_DTYPE_FILE = "keep_dtype.cfg"  # the package's ATC --keep_dtype file: operator names kept float32


def atc_args(
    onnx_path: Path, output: Path, soc: str, man: OMManifest, precision: Optional[str], v2: bool = True
) -> List[str]:
    """The ``atc`` command line that builds the OM ``man`` describes from ``onnx_path``; ``precision`` None leaves
    the precision option out (``atc.sh`` adds it after probing ATC), ``v2``: this ATC has ``--precision_mode_v2``."""
    args = ["atc", "--framework=5", f"--model={onnx_path}", f"--output={output}", f"--soc_version={soc}"]
    args.append(f"--input_format={input_format(man)}")
    args.append("--input_shape=" + input_shape_arg(man))
    gears = ";".join(",".join(map(str, g)) for g in man.gears or [])
    if man.mode == "dymbatch":
        args.append("--dynamic_batch_size=" + ",".join(str(g[0]) for g in man.gears or []))
    elif man.mode == "dymhw":
        args.append(f"--dynamic_image_size={gears}")
    elif man.mode == "dymdims":
        args.append(f"--dynamic_dims={gears}")
    if man.keep_dtype:
        args.append(f"--keep_dtype={Path(onnx_path).parent / KEEP_DTYPE_FILE}")
    if precision is not None:
        args += precision_args(precision, v2)
    return args


def dym_shape_text(names: Sequence[str], shapes: Sequence[Sequence[int]]) -> str:
    """ais_bench's ``"name:d0,d1;name:..."`` for shapes in input order (``set_dynamic_shape`` / ``_dims``)."""
    return ";".join(f"{n}:{','.join(str(x) for x in s)}" for n, s in zip(names, shapes))
