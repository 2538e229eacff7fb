"""Routing decisions shared by the PaddleX adapters: does a call ask for the OM route, and on which device."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Set, Tuple

from .. import devices
from ..config import OMBackendConfig, validate
from ..errors import ConfigError, ModelFileError, NpuDeviceUnavailableError
from ..log import logger
from ..om.manifest import MANIFEST_NAME
from ..om.package import is_om_package

OMRoute = Tuple[int, OMBackendConfig]  # (device_id, backend options)


def as_dict(cfg: Any) -> Dict[str, Any]:
    """A plain dict of an ``hpi_config``/``engine_config`` given as dict, pydantic model or None."""
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if hasattr(cfg, "model_dump"):
        return cfg.model_dump(exclude_none=True, by_alias=True)
    if hasattr(cfg, "__dict__"):
        return {k: v for k, v in vars(cfg).items() if v is not None}
    return {}


def parse_device(device: Optional[str]) -> Tuple[Optional[str], Optional[int]]:
    """``"npu:1"`` -> ("npu", 1); ``"npu"`` -> ("npu", None); None -> (None, None) (:func:`devices.parse_device`)."""
    parsed = devices.parse_device(device)
    return parsed.kind, parsed.first


def device_of(device: Optional[str], cfg: Mapping[str, Any]) -> Tuple[Optional[str], int]:
    """Device type and id of a call: the ``device`` string wins over the config's ``device_type``/``device_id``."""
    kind, index = parse_device(device)
    if kind is None:
        kind = cfg.get("device_type")
    if index is None:
        index = cfg.get("device_id")
    return kind, int(index or 0)


def om_route(
    use_hpip: Any, hpi_config: Any, device: Optional[str], model_dir: Any = None, model_name: Optional[str] = None
) -> Optional[OMRoute]:
    """(device_id, backend options) when a call asks for HPI backend ``om``, else None. Backend ``om`` on a
    device that is not an NPU is a :class:`ConfigError` (PaddleX would only say that ultra-infer is missing).

    With no backend named, HPI on an ``npu`` device takes the OM route when ``model_dir`` is an OM package (see
    :func:`default_to_om`)."""
    if not use_hpip:
        return None
    hpi = as_dict(hpi_config)
    backend = hpi.get("backend")
    if backend is None:
        if device_of(device, hpi)[0] != "npu" or not default_to_om(model_dir, model_name, device_of(device, hpi)[1]):
            return None
    elif backend != "om":
        return None
    _warn_on_device_conflict(device, hpi)
    device_type, device_id = device_of(device, hpi)
    if device_type != "npu":
        where = f"device={device!r}" if device else f"hpi_config['device_type']={hpi.get('device_type')!r}"
        raise ConfigError(
            f"hpi backend 'om' runs OM models on an Ascend NPU, but {where} is not an NPU: pass device='npu:N' "
            "(and hpi_config device_type 'npu'), or choose another backend for that device"
        )
    return device_id, validate(OMBackendConfig, hpi.get("backend_config") or {}, "hpi_config['backend_config']")


_defaults_logged: Set[str] = set()


def default_to_om(model_dir: Any, model_name: Optional[str], device_id: int) -> bool:
    """Whether HPI with no backend on an NPU takes the OM route: yes for an OM package (logged once per folder);
    no when ultra-infer is installed (PaddleX's own HPI then chooses); otherwise a :class:`ModelFileError` that
    says what is missing and how to build it (PaddleX would only say that ultra-infer is missing)."""
    name = model_name or "the model"
    if model_dir is not None and is_om_package(model_dir):
        key = str(Path(model_dir).resolve())
        if key not in _defaults_logged:
            _defaults_logged.add(key)
            logger.info(
                "%s: HPI on npu:%d with no backend given, and %s is an OM package -> hpi backend 'om' (the NPU route)",
                name,
                device_id,
                model_dir,
            )
        return True
    if importlib.util.find_spec("ultra_infer") is not None:
        return False
    build = "`paddlex-npu convert <PaddleX model folder> -o <package> --soc-version <chip>`"
    if model_dir is None:
        where = f"no model folder was given for {name} (PaddleX would fetch its Paddle model, which is no OM package)"
    else:
        held = sorted(p.name for p in Path(model_dir).iterdir()) if Path(model_dir).is_dir() else None
        where = (
            f"{model_dir} ({name}) holds neither inference.om nor {MANIFEST_NAME} (it holds: {', '.join(held)})"
            if held is not None
            else f"{model_dir} ({name}) is not a folder"
        )
        if held is not None and {"inference.pdmodel", "inference.json"} & set(held):
            build = f"`paddlex-npu convert {model_dir} -o <package> --soc-version <chip>`"
    raise ModelFileError(
        f"{where}, so it is no OM package for the NPU route: build one with {build} and pass it as model_dir "
        "(SubModules.<name>.model_dir in a pipeline config).\n"
        f"use_hpip=True on device='npu:{device_id}' with no hpi backend takes paddlex-npu's OM route when the model "
        f"folder is an OM package (inference.yml + inference.om, or its {MANIFEST_NAME} manifest with "
        "inference.onnx on the reference runtime); convert runs ATC where CANN is installed. Or name the "
        "backend: hpi_config={'backend': 'om', ...}"
    )


def _warn_on_device_conflict(device: Optional[str], hpi: Mapping[str, Any]) -> None:
    kind, index = parse_device(device)
    cfg_type, cfg_id = hpi.get("device_type"), hpi.get("device_id")
    if kind is not None and cfg_type is not None and kind != cfg_type:
        logger.warning("device=%r and hpi_config device_type=%r disagree: device wins", device, cfg_type)
    if index is not None and cfg_id is not None and int(cfg_id) != index:
        logger.warning("device=%r and hpi_config device_id=%s disagree: device wins (npu:%d)", device, cfg_id, index)


def paddle_installed() -> bool:
    try:
        return importlib.util.find_spec("paddle") is not None
    except (ImportError, ValueError):  # a broken or blocked paddle counts as none
        return False


def paddle_has_npu() -> bool:
    """Whether paddlepaddle is installed and has the ``npu`` custom device (paddle-custom-npu)."""
    if not paddle_installed():
        return False
    try:
        import paddle

        return "npu" in paddle.device.get_all_custom_device_type()
    except Exception:  # noqa: BLE001 - any failure (paddle broken or blocked) means no usable NPU plugin
        return False


def refuse_paddle_inference_on_npu(device_type: Optional[str], device_id: int) -> None:
    """Raise if Paddle Inference is about to run on an NPU that this environment cannot use (paddlepaddle
    missing: PaddleX would fail on ``import paddle``; no NPU custom device: Paddle would abort the process)."""
    if device_type != "npu" or paddle_has_npu():
        return
    why = (
        "paddlepaddle is not installed"
        if not paddle_installed()
        else "this paddlepaddle build has no 'npu' custom device (paddle-custom-npu is not installed)"
    )
    raise NpuDeviceUnavailableError(
        f"device='npu:{device_id}' asks Paddle Inference for an Ascend NPU, but {why}: take paddlex-npu's OM route "
        "instead (use_hpip=True with OM packages as model folders; PaddleOCR: enable_hpi=True), or use device='cpu'."
        "\nThe OM route runs inference.om through ais_bench: `import paddlex_npu` and pass use_hpip=True, "
        f"hpi_config={{'backend': 'om', 'device_type': 'npu', 'device_id': {device_id}}} (or engine='om' on PaddleX "
        "3.5+) with an OM package as model_dir (`paddlex-npu convert` builds one); without an NPU, "
        "PADDLEX_NPU_RUNTIME=reference runs it on the CPU. Or install paddle-custom-npu (Ascend 910B) for Paddle "
        "Inference on the NPU."
    )
