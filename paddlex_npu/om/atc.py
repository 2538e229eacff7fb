"""ATC's command-line syntax: ``--input_shape`` / gear strings in, the ``atc`` command for a manifest out."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Sequence

from ..errors import ConfigError
from .manifest import MAX_GEARS, MIN_GEARS, OMManifest, range_text

SOC_VERSION = re.compile(
    r"Ascend(310|310B\d|310P[1-5]|910|910(A|B|ProA|ProB|PremiumA)|910B[1-4]|910_93\d\d)"
)  # the Ascend chips ATC's --soc_version names (npu-smi info shows yours)
SOC_FAMILIES = (
    "Ascend310, Ascend310B1.., Ascend310P1-P5, Ascend910, Ascend910A/B/ProA/ProB/PremiumA, Ascend910B1-B4, "
    "Ascend910_93xx"
)


def check_soc_version(soc: str) -> None:
    """Refuse a ``--soc_version`` that names no Ascend chip ATC builds for."""
    if not SOC_VERSION.fullmatch(soc or ""):
        raise ConfigError(
            f"--soc-version {soc!r} is not an Ascend chip ATC builds for: use one of {SOC_FAMILIES} "
            "(the Chip Name of `npu-smi info`, prefixed by Ascend, e.g. Ascend310P3)"
        )


def gear_mode_for(shapes: List[List[int]], formats: List[str]) -> str:
    """The gear mode ATC uses for inputs with these -1 dims: batch only; H/W of one image when every input is a
    4-D NCHW image (``--dynamic_image_size`` needs ``--input_format`` NCHW); else dims (ND)."""
    dyn = [[j for j, d in enumerate(s) if d < 0] for s in shapes]
    if all(d in ([], [0]) for d in dyn):
        return "dymbatch"
    all_images = all(len(s) == 4 and f == "NCHW" for s, f in zip(shapes, formats))
    if all_images and sum(1 for d in dyn if d) == 1 and any(d == [2, 3] for d in dyn):
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


def atc_args(onnx_path: Path, output: Path, soc: str, man: OMManifest, precision: str) -> List[str]:
    """The ``atc`` command line that builds the OM ``man`` describes from ``onnx_path``."""
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
    args.append(f"--precision_mode_v2={'origin' if precision == 'fp32' else 'fp16'}")
    return args


def dym_shape_text(names: Sequence[str], shapes: Sequence[Sequence[int]]) -> str:
    """ais_bench's ``"name:d0,d1;name:..."`` for shapes in input order (``set_dynamic_shape`` / ``_dims``)."""
    return ";".join(f"{n}:{','.join(str(x) for x in s)}" for n, s in zip(names, shapes))
