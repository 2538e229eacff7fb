"""A PaddleX pipeline on one NPU, as the executor's worker processes create it (both PaddleX generations)."""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from .patcher import install, is_installed

DEFAULT_CREATE_KWARGS: Dict[str, Any] = {"use_hpip": True, "hpi_config": {"backend": "om", "device_type": "npu"}}


def device_kwargs(create_kwargs: Optional[Dict[str, Any]], device_id: int) -> Dict[str, Any]:
    """``create_pipeline`` keyword arguments for ``npu:<device_id>`` (default: the hpi ``om`` backend): the device,
    and the ``device_id`` of ``hpi_config`` / ``engine_config`` when given."""
    kwargs = copy.deepcopy(DEFAULT_CREATE_KWARGS if create_kwargs is None else create_kwargs)
    kwargs["device"] = f"npu:{device_id}"
    for key in ("hpi_config", "engine_config"):
        cfg = kwargs.get(key)
        if not isinstance(cfg, dict):
            continue
        buckets = [v for k, v in cfg.items() if k in ("hpi", "om") and isinstance(v, dict)]
        if key == "engine_config" and any(isinstance(v, dict) for v in cfg.values()):
            for bucket in buckets:  # bucketed: only the NPU route's buckets take a device id
                bucket["device_id"] = device_id
        else:
            cfg["device_id"] = device_id
    return kwargs


def create_on_device(
    pipeline: Union[str, Dict[str, Any]], device_id: int, create_kwargs: Optional[Dict[str, Any]] = None
) -> Any:
    """``paddlex.create_pipeline`` for a pipeline name, YAML path or config dict, on ``npu:<device_id>``."""
    if not is_installed():  # patches once even with the import hook pending (patcher.install, test_install.py)
        install()
    from paddlex import create_pipeline

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


@dataclass
class PortableResult:
    """A PaddleX result object as data that pickles (result objects hold weak methods that do not): its class,
    by module and name, and its items (nested result objects too)."""

    module: str
    name: str
    data: Dict[str, Any]


def portable_result(result: Any) -> Any:
    """A PaddleX result (a ``dict`` subclass) as a :class:`PortableResult`, recursively; other values unchanged."""
    if isinstance(result, dict):
        items = {k: portable_result(v) for k, v in result.items()}
        if type(result) is dict:
            return items
        return PortableResult(type(result).__module__, type(result).__qualname__, items)
    if isinstance(result, list):
        return [portable_result(v) for v in result]
    return result


def restore_result(value: Any) -> Any:
    """The PaddleX result object a :func:`portable_result` came from (a plain dict if its class cannot be
    rebuilt from its items)."""
    if isinstance(value, PortableResult):
        items = {k: restore_result(v) for k, v in value.data.items()}
        try:
            return getattr(importlib.import_module(value.module), value.name)(items)
        except Exception:  # noqa: BLE001 - a result class that does not take its items: keep the data
            return items
    if isinstance(value, dict):
        return {k: restore_result(v) for k, v in value.items()}
    if isinstance(value, list):
        return [restore_result(v) for v in value]
    return value
