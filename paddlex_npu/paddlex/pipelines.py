"""A PaddleX pipeline on one NPU, as the executor's worker processes create it (both PaddleX generations)."""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Union

from .patcher import install, is_installed

DEFAULT_CREATE_KWARGS: Dict[str, Any] = {"use_hpip": True, "hpi_config": {"backend": "om", "device_type": "npu"}}


def device_kwargs(create_kwargs: Optional[Dict[str, Any]], device_id: int) -> Dict[str, Any]:
    """``create_pipeline`` keyword arguments for ``npu:<device_id>`` (default: the hpi ``om`` backend): the device,
    and the ``device_id`` of ``hpi_config`` / ``engine_config`` when given."""
    kwargs = copy.deepcopy(DEFAULT_CREATE_KWARGS if create_kwargs is None else create_kwargs)
    kwargs["device"] = f"npu:{device_id}"
    for key in ("hpi_config", "engine_config"):
        if isinstance(kwargs.get(key), dict):
            kwargs[key]["device_id"] = device_id
    return kwargs


def create_on_device(
    pipeline: Union[str, Dict[str, Any]], device_id: int, create_kwargs: Optional[Dict[str, Any]] = None
) -> Any:
    """``paddlex.create_pipeline`` for a pipeline name, YAML path or config dict, on ``npu:<device_id>``."""
    from paddlex import create_pipeline  # first: importing PaddleX runs the auto-install hook, if armed

    if not is_installed():
        install()

    kwargs = device_kwargs(create_kwargs, device_id)
    if isinstance(pipeline, dict):
        return create_pipeline(config=pipeline, **kwargs)
    return create_pipeline(str(pipeline), **kwargs)


def plain_result(result: Any) -> Any:
    """A PaddleX result as plain data (``result.json["res"]``: lists and numbers, cheap to send between
    processes); any other object unchanged."""
    data = getattr(result, "json", None)
    if isinstance(data, dict):
        return data.get("res", data)
    return result
