"""What the servers read of a pipeline config: the devices to serve on, a SubModule, a result as PaddleX's apps
answer it. The pipeline on a device is :func:`paddlex_npu.paddlex.pipelines.pipeline_on_device`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..devices import parse_device
from ..errors import ConfigError


def parse_devices(device: Optional[str]) -> List[int]:
    """``npu:0,1`` / ``npu:0`` / ``npu`` / None -> device ids (:func:`paddlex_npu.devices.parse_device`)."""
    parsed = parse_device(device)
    if parsed.kind not in (None, "npu"):
        raise ConfigError(f"device {device!r}: serving runs on the NPU route, give npu, npu:0 or npu:0,1")
    return list(parsed.ids) or [0]


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


# What PaddleX's text recognition result drops from its JSON: ``TextRecResult._to_json`` pops them from a deep
# copy of the whole result, the input image and the font object included.
_NOT_IN_JSON = ("input_img", "vis_font")


def pruned(result: Any) -> Dict[str, Any]:
    """A PaddleX result's JSON without the per-call keys, as PaddleX's serving apps answer it.

    A text line's result (whose class converts with ``TextRecResult._to_json``, its other values scalars) is
    converted as that method does but without its deep copy of the image and the font (0.3 ms of a 1.2 ms
    recognition request): the same JSON."""
    from ..paddlex.serving import prune_result, text_rec_json

    to_json, format_data = text_rec_json()
    if type(result)._to_json is to_json and all(k in result for k in _NOT_IN_JSON) and _plain(result):
        return prune_result(format_data({k: v for k, v in result.items() if k not in _NOT_IN_JSON}))
    return prune_result(result.json["res"])


def _plain(result: Dict[str, Any]) -> bool:
    """Every value but the image and the font is a scalar (nothing a deep copy would change)."""
    import numpy as np

    scalars = (str, int, float, bool, type(None), np.generic)
    return all(isinstance(v, scalars) for k, v in result.items() if k not in _NOT_IN_JSON)
