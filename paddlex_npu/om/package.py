"""OM packages (model folders): ``inference.yml`` + ``inference.om`` (+ ``inference.onnx``, reference runtime)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .. import runtimes
from ..errors import ModelFileError
from ..log import logger
from .manifest import MANIFEST_NAME
from .paths import check_model_path

MODEL_FILE_PREFIX = "inference"
ONNX_RUNTIMES = runtimes.ONNX_NAMES  # they run the ONNX the OM was built from


@dataclass(frozen=True)
class OMPackage:
    """The files of one OM model folder."""

    model_dir: Path
    om_path: Path
    onnx_path: Optional[Path]

    @property
    def manifest_path(self) -> Optional[Path]:
        """The OM manifest (``inference.om.json``) when the folder has one."""
        path = self.model_dir / MANIFEST_NAME
        return path if path.is_file() else None


def is_om_package(model_dir: Union[str, Path]) -> bool:
    """Whether a folder is an OM package: ``inference.om`` or the manifest (``inference.om.json``, which
    ``paddlex-npu convert`` writes beside ``inference.onnx`` for the reference runtime) beside ``inference.yml``."""
    folder = Path(model_dir)
    return (folder / f"{MODEL_FILE_PREFIX}.yml").is_file() and any(
        (folder / name).is_file() for name in (f"{MODEL_FILE_PREFIX}.om", MANIFEST_NAME)
    )


def _check_readable(path: Path, folder: Path, how: str) -> None:
    if not path.is_file():
        raise ModelFileError(f"model folder {folder} has no {path.name}: {how}")
    if not os.access(path, os.R_OK) or path.stat().st_size == 0:
        raise ModelFileError(
            f"{path} cannot be read (permissions or an empty file): fix its permissions or produce it again; {how}"
        )


_PLAIN_ONNX_SAID: set = set()  # folders warned about once per process


def _missing_om(folder: Path) -> ModelFileError:
    """No ``inference.om`` for the device runtime: the two fixes first (the CPU runtime here, ATC on an Ascend
    machine, with the package's own ``atc.sh`` or recorded ATC command, which carry its ranges), details after."""
    script, command = folder / "atc.sh", None
    try:
        command = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("atc_command")
    except (OSError, ValueError, AttributeError):
        pass
    if script.is_file():
        build = f"`bash {script}`"
        detail = (
            "atc.sh is the ATC command `paddlex-npu convert` wrote for this package (its chip, ranges or gears); "
            "it names the OM inference.om."
        )
    elif command:
        build = f"the ATC command this package was converted with (`paddlex-npu inspect {folder}` shows it)"
        detail = f"Run it in {folder}, then rename the OM ATC writes (inference*.om) to inference.om: {command}"
    else:
        build = "ATC from its inference.onnx (command below)"
        detail = (
            f"e.g. `atc --framework=5 --model={folder / 'inference.onnx'} --output={folder / MODEL_FILE_PREFIX} "
            '--soc_version=<your chip, see npu-smi info> --input_shape="x:-1,3,-1,-1"` (dymshape needs Ascend 310P '
            "or 910), or build a package from the PaddleX model folder with `paddlex-npu convert`."
        )
    return ModelFileError(
        f"model folder {folder} has no inference.om, which runtime 'ais_bench' runs on the NPU: without an NPU, "
        f"set PADDLEX_NPU_RUNTIME=reference (its inference.onnx then runs on the CPU); on an Ascend machine, build "
        f"the OM with {build}.\n{detail}"
    )


def resolve_om_package(model_dir: Union[str, Path, None], runtime: str) -> OMPackage:
    """Check an OM model folder for what ``runtime`` needs and return its files.

    ``ais_bench`` needs ``inference.om``; ``reference`` needs ``inference.onnx`` (the ONNX the OM was
    converted from; the ``.om`` itself may be absent). Both need ``inference.yml``.
    """
    if model_dir is None:
        raise ModelFileError(
            "the OM route needs a local model folder (inference.yml + inference.om): pass model_dir, or set "
            "SubModules.<name>.model_dir in the pipeline YAML"
        )
    folder = Path(model_dir)
    if not folder.is_dir():
        raise ModelFileError(f"model folder {folder} does not exist or is not a folder: check model_dir")
    _check_readable(
        folder / f"{MODEL_FILE_PREFIX}.yml",
        folder,
        "copy inference.yml from the PaddleX model folder the OM was converted from",
    )
    om_path = folder / f"{MODEL_FILE_PREFIX}.om"
    onnx_path = folder / f"{MODEL_FILE_PREFIX}.onnx"
    if runtime in ONNX_RUNTIMES:
        _check_readable(
            onnx_path,
            folder,
            "the CPU reference runtime runs the ONNX the OM was converted from; build the package from the PaddleX "
            "model folder with `paddlex-npu convert <paddle folder> -o <package>`, which writes it",
        )
        check_model_path(om_path, onnx_path)  # what the device refuses for the OM, on the files here
        if not om_path.is_file() and not (folder / MANIFEST_NAME).is_file() and folder not in _PLAIN_ONNX_SAID:
            _PLAIN_ONNX_SAID.add(folder)
            logger.warning(
                "%s is no OM package (no inference.om, no %s): runtime %s runs its inference.onnx, an NPU could not; "
                "build a package with `paddlex-npu convert %s -o PACKAGE`",
                folder,
                MANIFEST_NAME,
                runtime,
                folder,
            )
    else:
        if not om_path.is_file():
            raise _missing_om(folder)
        _check_readable(om_path, folder, "build it again with ATC")
        check_model_path(om_path)
    return OMPackage(folder, om_path, onnx_path if onnx_path.is_file() else None)
