"""What the servers read of a pipeline config: the devices to serve on, a SubModule. The pipeline on a device is
:func:`paddlex_npu.paddlex.pipelines.pipeline_on_device`; a result as PaddleX's apps answer it
:func:`paddlex_npu.paddlex.serving.pruned`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..devices import parse_device
from ..errors import ConfigError
from ..paddlex.pipelines import sub_modules


def parse_devices(device: Optional[str]) -> List[int]:
    """``npu:0,1`` / ``npu:0`` / ``npu`` / None -> device ids (:func:`paddlex_npu.devices.parse_device`)."""
    parsed = parse_device(device)
    if parsed.kind not in (None, "npu"):
        raise ConfigError(f"device {device!r}: serving runs on the NPU route, give npu, npu:0 or npu:0,1")
    return list(parsed.ids) or [0]


def submodule(config: Dict[str, Any], module_name: str) -> Optional[Dict[str, Any]]:
    """The first SubModule (also inside SubPipelines, in :func:`~..paddlex.pipelines.sub_modules`' order) with this
    ``module_name``."""
    return next((sub for _, sub in sub_modules(config) if sub.get("module_name") == module_name), None)
