"""``paddlex-npu inspect PATH``: what an OM package or an ONNX file holds; any other path is refused with what it
is and what to do (a PaddleX model folder: the ``paddlex-npu convert`` command that builds its package)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Set

from ..deps import require
from ..errors import ModelFileError
from ..om import manifest as mf


def _onnx_lines(path: Path) -> List[str]:
    ort = require("onnxruntime", "inspect (it opens the package's ONNX)")

    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - a broken file is what inspect should report
        return [f"  [x] {path.name} cannot be loaded: {str(exc).splitlines()[0][:200]}"]
    lines = []
    for kind, nodes in (("input", sess.get_inputs()), ("output", sess.get_outputs())):
        for n in nodes:
            dims = [d if isinstance(d, int) and d > 0 else -1 for d in n.shape]
            dyn = [j for j, d in enumerate(dims) if d < 0]
            lines.append(f"  {kind:<6} {n.name}: {n.type} {dims}" + (f"  dynamic dims {dyn}" if dyn else ""))
    return lines


MODEL_FILES = ("inference.pdmodel", "inference.json", "inference.onnx")  # what convert builds a package from
CONVERT = "`paddlex-npu convert {path} -o OUT --soc-version SOC` (SOC: the chip `npu-smi info` names, e.g. Ascend310P3)"


def _not_a_package(path: Path, files: Set[str]) -> ModelFileError:
    """The error for a folder with neither inference.om nor the manifest: what it is, and what to do instead."""
    held = ", ".join(sorted(files)[:10]) + (", ..." if len(files) > 10 else "")
    onnx = f"; its ONNX alone: `paddlex-npu inspect {path / 'inference.onnx'}`" if "inference.onnx" in files else ""
    if "inference.yml" in files and set(MODEL_FILES) & files:
        return ModelFileError(
            f"{path} is a PaddleX model folder ({held}), not an OM package: build one from it with "
            f"{CONVERT.format(path=path)}, then inspect OUT{onnx}"
        )
    return ModelFileError(
        f"{path} is not an OM package: it holds neither inference.om nor {mf.MANIFEST_NAME} "
        f"(it holds: {held or 'nothing'}). Give the folder `paddlex-npu convert` wrote, an .om or an .onnx file{onnx}"
    )


def _reserved(reserved: Dict[str, int]) -> str:
    """The device memory one call allocates (ais_bench mallocs every input and output buffer per call)."""
    mib = {k: v / 1024**2 for k, v in reserved.items()}
    return f"device buffers {mib.get('inputs', 0):.2f} MiB in, {mib.get('outputs', 0):.2f} MiB out"


def _loop_lines(path: Path, loop: Any) -> List[str]:
    """A split model's loop and each part's per-call device buffers."""
    parts = ", ".join(f"{p}/" for p in (loop.first, loop.step, loop.tail) if p)
    steps = f"{loop.unroll} decoder steps per call of step/" if loop.unroll > 1 else "one decoder step per call"
    lines = [
        f"  loop        the model's {loop.node} (up to {loop.max_steps or 'unbounded'} steps) runs on the "
        f"host: this OM is the encoder, {parts} packages of their own (inspect each); {steps}"
    ]
    for part in (loop.first, loop.step, loop.tail):
        manifest = path / part / mf.MANIFEST_NAME if part else None
        if manifest is not None and manifest.is_file():
            reserved = mf.load(manifest).reserved
            lines.append(f"  {part + '/':<11} {_reserved(reserved) if reserved else 'per-call buffers not recorded'}")
    return lines


def inspect_path(path: Path) -> str:
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"{path} does not exist: give an OM package folder, an .om or an .onnx file")
    if path.is_file() and path.suffix == ".om":
        path = path.parent
    if path.is_file() and path.suffix == ".onnx":
        return "\n".join([f"ONNX {path}", *_onnx_lines(path), f"  sha256 {mf.sha256(path)}"])
    if not path.is_dir():
        raise ModelFileError(f"{path} is neither an OM package folder nor an .onnx/.om file")
    files = {p.name for p in path.iterdir()}
    if not {"inference.om", mf.MANIFEST_NAME} & files:
        raise _not_a_package(path, files)
    out = [f"OM package {path}"]
    for name, role in (
        ("inference.yml", "PaddleX model config"),
        ("inference.om", "OM (NPU)"),
        ("inference.onnx", "ONNX (reference runtime)"),
        (mf.MANIFEST_NAME, "manifest"),
    ):
        out.append(f"  {'[✓]' if name in files else '[x]'} {name:<18} {role}")
    if (path / mf.MANIFEST_NAME).is_file():
        man = mf.load(path / mf.MANIFEST_NAME)
        out += [
            f"  mode        {man.mode}",
            f"  accepts     {man.describe()}",
            f"  soc_version {man.soc_version or '?'}",
            f"  precision   {man.precision or '?'}",
        ]
        for spec in man.inputs:
            out.append(f"  input       {spec.name}: {spec.dtype} {spec.format} {spec.shape}")
        if man.atc_command:
            out.append(f"  atc         {man.atc_command}")
        if man.reserved is not None:
            out.append(f"  per call    {_reserved(man.reserved)}")
        if man.loop is not None:
            out += _loop_lines(path, man.loop)
        if "inference.onnx" in files and man.onnx_sha256:
            same = mf.sha256(path / "inference.onnx") == man.onnx_sha256
            # without inference.om the manifest records the ONNX the OM is to be built from (atc.sh), not one built
            source = "the OM was built from" if "inference.om" in files else "the manifest records (no OM built yet)"
            out.append(
                f"  {'[✓]' if same else '[x]'} checksum    inference.onnx "
                f"{'matches' if same else 'does NOT match'} the ONNX {source}"
            )
    else:
        out.append("  no manifest: the OM is taken as dymshape (or static when nothing varies)")
    if "inference.onnx" in files:
        out.append("  ONNX:")
        out += _onnx_lines(path / "inference.onnx")
    return "\n".join(out)
