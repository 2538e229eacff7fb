"""What the benchmark compares: the NPU route runs the packages as given (``convert`` reduces a CTC recogniser's
output on the device by default), and PaddleX's own CPU engines run the models those packages were built from.

A reduced package's ``inference.onnx`` ends in the reduction (``ArgMax``/``ReduceMax``, :mod:`..build.reduction`):
PaddleX's ``CTCLabelDecode`` cannot take its two ``[N, T]`` arrays (``TypeError: object of type 'numpy.int64' has
no len()``), and it is not the model PaddleX would run. The manifest records the reduction (``reduction``: the
output it replaced and its class count), so the source model is the package's ONNX with the appended nodes taken
off (:func:`..build.reduction.unreduced`, equal outputs to the ONNX ``convert`` was given). A detection package
that normalises on the device (``normalisation``) takes uint8 pixels; its source model is the ONNX with the
normalising head taken off, float32 in again (:func:`..build.normalisation.unnormalised`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ..om import manifest as mf
from ..paddlex.pipelines import MODEL_KEY, load_config, model_dirs, sub_modules

_OM_FILES = ("inference.onnx", "inference.om", mf.MANIFEST_NAME, "atc.sh")  # the package's OM parts


def manifest_of(folder: Path) -> Optional[mf.OMManifest]:
    """A package's manifest (None: a folder without one, e.g. a Paddle model)."""
    path = Path(folder) / mf.MANIFEST_NAME
    return mf.load(path) if path.is_file() else None


def reduction_of(folder: Path) -> Optional[mf.OutputReduction]:
    """The reduction a package's manifest records (None: no manifest, or none recorded)."""
    man = manifest_of(folder)
    return man.reduction if man is not None else None


def model_name(folder: Path) -> str:
    """The model's name from its ``inference.yml`` (``Global.model_name``), else the folder's name."""
    import yaml

    try:
        cfg = yaml.safe_load((Path(folder) / "inference.yml").read_text(encoding="utf-8")) or {}
        return str((cfg.get("Global") or {}).get("model_name") or Path(folder).name)
    except (OSError, yaml.YAMLError, AttributeError):
        return Path(folder).name


def reductions(pipeline: Union[str, Path, Dict[str, Any]]) -> Dict[str, bool]:
    """Per model with a CTC output of the pipeline (or model spec): whether its package reduces it on the device.
    Models without a CTC head (detection, layout, ...) are not listed."""
    import yaml

    from ..build.reduction import ctc_decoded

    found: Dict[str, bool] = {}
    for folder in model_dirs(load_config(pipeline)):
        try:
            cfg = yaml.safe_load((folder / "inference.yml").read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(cfg, dict) and ctc_decoded(cfg):
            found[model_name(folder)] = reduction_of(folder) is not None
    return found


def describe(found: Dict[str, bool]) -> str:
    """:func:`reductions`' answer in words."""
    if not found:
        return "no CTC recognition model"
    how = {True: "CTC output reduced on the device (as convert builds it)", False: "unreduced (--no-reduce)"}
    return ", ".join(f"{name} {how[on]}" for name, on in sorted(found.items()))


def source_config(pipeline: Union[str, Path, Dict[str, Any]], work: Path) -> Tuple[Dict[str, Any], List[str]]:
    """The pipeline config with every reduced or device-normalising package replaced by its source model, written
    under ``work`` (the package's files without its OM parts, and the source ONNX); and the names of the models so
    replaced."""
    from ..build.normalisation import unnormalised
    from ..build.reduction import unreduced

    config = load_config(pipeline)
    replaced: Dict[str, str] = {}
    names: List[str] = []
    for folder in model_dirs(config):
        man = manifest_of(folder)
        if man is None or (man.reduction is None and man.normalisation is None) or str(folder) in replaced:
            continue
        out = Path(work) / f"{len(replaced)}-{folder.name}"
        shutil.copytree(folder, out, ignore=shutil.ignore_patterns(*_OM_FILES))
        onnx = folder / "inference.onnx"
        if man.reduction is not None:
            onnx = unreduced(onnx, man.reduction, out / "inference.onnx")
        if man.normalisation is not None:
            unnormalised(onnx, man.normalisation, out / "inference.onnx")
        replaced[str(folder)] = str(out)
        names.append(model_name(folder))
    _replace_dirs(config, replaced)
    return config, names


def _replace_dirs(config: Dict[str, Any], replaced: Dict[str, str]) -> None:
    """Each ``model_dir`` of ``config`` (a model spec's own, or every SubModule's) found in ``replaced``, replaced."""
    holders = [config] if MODEL_KEY in config else [sub for _, sub in sub_modules(config)]
    for holder in holders:
        value = holder.get(MODEL_KEY)
        if value and str(Path(value)) in replaced:
            holder[MODEL_KEY] = replaced[str(Path(value))]
