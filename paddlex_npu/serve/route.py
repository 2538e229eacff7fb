"""Build PaddleX pipelines and models on the NPU route from a pipeline config, one device at a time, and map the
route's errors to HTTP status codes. Used by the serve workers and by the Triton models."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from .. import errors
from ..devices import parse_device
from ..errors import ConfigError

# Until paddlex_npu.errors has its own mapping (``http_status``): inputs are the client's fault, everything else
# (configuration, model files, runtime, device) the server's.


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error raised on the route, by its category (:func:`paddlex_npu.errors.http_status`):
    422 for inputs the model cannot take (as PaddleX's app answers invalid requests), 503 when the runtime or
    device is unavailable, 500 for configuration and anything else."""
    return errors.http_status(exc)[0]


def parse_devices(device: Optional[str]) -> List[int]:
    """``npu:0,1`` / ``npu:0`` / ``npu`` / None -> device ids (:func:`paddlex_npu.devices.parse_device`)."""
    parsed = parse_device(device)
    if parsed.kind not in (None, "npu"):
        raise ConfigError(f"device {device!r}: serving runs on the NPU route, give npu, npu:0 or npu:0,1")
    return list(parsed.ids) or [0]


def load_config(pipeline: Union[str, Path, Dict[str, Any]]) -> Dict[str, Any]:
    if isinstance(pipeline, dict):
        return copy.deepcopy(pipeline)
    path = Path(pipeline)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"pipeline config {path}: {exc}") from exc
    if not isinstance(config, dict) or "pipeline_name" not in config:
        raise ConfigError(f"pipeline config {path}: a PaddleX pipeline YAML with `pipeline_name` is needed")
    return config


def hpi_config(config: Dict[str, Any], device_id: int, runtime: Optional[str] = None) -> Dict[str, Any]:
    """The ``hpi_config`` of the NPU route for one device: the YAML's own (top level), with backend ``om`` on
    ``npu``, this device, and ``runtime`` (when given) in ``backend_config``."""
    hpi = copy.deepcopy(config.get("hpi_config") or {})
    hpi.setdefault("backend", "om")
    hpi.setdefault("device_type", "npu")
    hpi["device_id"] = device_id
    if runtime:
        hpi["backend_config"] = {**(hpi.get("backend_config") or {}), "runtime": runtime}
    return hpi


def create_pipeline(config: Dict[str, Any], device_id: int, runtime: Optional[str] = None) -> Any:
    """The PaddleX pipeline of ``config`` on the NPU route on ``npu:<device_id>``."""
    from ..paddlex.patcher import install, is_installed

    if not is_installed():
        install()
    from paddlex import create_pipeline as paddlex_create_pipeline

    config = {k: v for k, v in config.items() if k not in ("use_hpip", "hpi_config")}
    return paddlex_create_pipeline(
        config=config,
        device=f"npu:{device_id}",
        use_hpip=True,
        hpi_config=hpi_config(config, device_id, runtime),
    )


def create_model(
    model_dir: Union[str, Path],
    model_name: str,
    device_id: int,
    runtime: Optional[str] = None,
    batch_size: int = 1,
    hpi: Optional[Dict[str, Any]] = None,
) -> Any:
    """One PaddleX model (predictor) on the NPU route."""
    from ..paddlex.patcher import install, is_installed

    if not is_installed():
        install()
    from paddlex import create_predictor

    return create_predictor(
        model_name,
        model_dir=str(model_dir),
        device=f"npu:{device_id}",
        batch_size=batch_size,
        use_hpip=True,
        hpi_config=hpi_config({"hpi_config": hpi} if hpi else {}, device_id, runtime),
    )


def submodule(config: Dict[str, Any], module_name: str) -> Optional[Dict[str, Any]]:
    """The first SubModule (also inside SubPipelines) with this ``module_name``."""
    for sub in (config.get("SubModules") or {}).values():
        if isinstance(sub, dict) and sub.get("module_name") == module_name:
            return sub
    for pipe in (config.get("SubPipelines") or {}).values():
        found = submodule(pipe, module_name) if isinstance(pipe, dict) else None
        if found:
            return found
    return None


def pruned(result: Any) -> Dict[str, Any]:
    """A PaddleX result's JSON without the per-call keys, as PaddleX's serving apps answer it."""
    from paddlex.inference.serving.basic_serving._pipeline_apps._common.common import prune_result

    return prune_result(result.json["res"])
