"""Adapter for PaddleX 3.0-3.4 (legacy ``BasePredictor.create_static_infer`` layout).

Each predictor's ``__init__`` calls ``BasePredictor.__init__`` and then ``_build()``, which calls
``self.create_static_infer()`` and stores the result as ``self.infer``; ``process()`` then calls
``self.infer(x=...)`` / ``self.infer(batch_inputs)`` and expects a list of numpy arrays in output order: the
same contract as the OM runner, so no task's ``process`` needs patching for the static models routed here. The
hooks of this generation: a predictor asked for HPI backend ``om`` on an NPU is marked in ``BasePredictor``'s
``__init__`` (initialised without HPI) and gets the OM runner from ``create_static_infer``; an unknown model name
says so. What they patch, and why: ``docs/patch-ledger.md`` (checked against the record by
``tests/paddlex/test_patch_ledger.py``); the route's speed-ups are the registry's (:mod:`.speedups`).
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Dict, List, Optional

from paddlex.inference.models.base.predictor.base_predictor import BasePredictor
from paddlex.utils.errors.others import ClassNotFoundException

from ..errors import ConfigError
from ..log import logger
from ..run.runner import build_om_runner
from ..run.session import resolve_runtime_name
from . import multidevice, routing
from .adapter import Adapter, ModelEntry, wrap_bound
from .record import PATCHED_MARK, PatchRecord

_MARK = "_paddlex_npu_om"


@functools.lru_cache(maxsize=None)
def calls_static_infer(cls: type) -> bool:
    """The eligibility rule of 3.0-3.4: the predictor class builds its model with ``create_static_infer``."""
    for klass in cls.__mro__:
        try:
            if "create_static_infer()" in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False


def mark_route(
    predictor: Any, use_hpip: Any, hpi_config: Any, device: Any, model_dir: Any = None, model_name: Any = None
) -> Optional[routing.OMRoute]:
    """Mark ``predictor`` for the OM route when it asks for HPI backend ``om`` on an NPU (or HPI with no backend
    on an NPU, with an OM package as ``model_dir``, default: the predictor's); returns the mark."""
    if model_dir is None:
        model_dir = getattr(predictor, "model_dir", None)
    name = model_name or getattr(predictor, "_model_name", None) or type(predictor).__name__
    route = routing.om_route(use_hpip, hpi_config, device, model_dir, name)
    setattr(predictor, _MARK, route)
    return route


def om_static_infer(predictor: Any) -> Any:
    """The OM runner for a marked predictor; None for PaddleX's own static infer (after the NPU check).

    Shared by the monkeypatch and the fork patch.
    """
    route = getattr(predictor, _MARK, None)
    if route is not None:
        device_id, backend = route
        logger.info("%s: hpi backend 'om' on npu:%d -> OM runner", predictor.model_name, device_id)
        return build_om_runner(
            predictor.model_dir,
            runtime=resolve_runtime_name(backend.runtime),
            device_id=device_id,
            config=backend,
            model_name=predictor.model_name,
            task=type(predictor).__name__,
        )
    option = getattr(predictor, "_pp_option", None)
    if not getattr(predictor, "_use_hpip", False) and option is not None:
        routing.refuse_paddle_inference_on_npu(option.device_type, int(option.device_id or 0))
    return None


def _init(original: Any, bound: Dict[str, Any], args: tuple, kwargs: dict) -> None:
    self = args[0]
    hpi = (bound.get("use_hpip"), bound.get("hpi_config"), bound.get("device"))
    if mark_route(self, *hpi, bound.get("model_dir"), bound.get("model_name")) is None:
        if not bound.get("use_hpip") and not routing.paddle_installed():  # PaddleX would fail on `import paddle`
            routing.refuse_paddle_inference_on_npu(*routing.device_of(bound.get("device"), {}))
        return original(*args, **kwargs)
    kwargs.update(use_hpip=False, hpi_config=None, device=None, pp_option=None)
    original(*args[:3], **kwargs)  # self, model_dir, config; the rest are keyword-only in every 3.x
    self._use_hpip = True
    if not getattr(self, "_use_static_model", False) or not calls_static_infer(type(self)):
        raise ConfigError(
            f"{self.model_name} ({type(self).__name__}) does not run a static model, so it cannot take the NPU "
            "route (hpi backend 'om'); run it without use_hpip, or on the NPU through paddle-custom-npu"
        )


class UnknownModelError(ConfigError, ClassNotFoundException):
    """A model name this PaddleX has no predictor for (still a ClassNotFoundException for PaddleX's callers)."""


def _get(cls: type, name: str) -> type:
    """``BasePredictor.get`` with an error that says what is wrong when the name is unknown."""
    all_entities = type(cls).all(cls)
    if name in all_entities:
        return all_entities[name]
    from .patcher import paddlex_version

    raise UnknownModelError(
        f"PaddleX {paddlex_version()} does not know the model {name!r} (no predictor of this PaddleX is registered "
        "under that name): it may come from a newer PaddleX, e.g. PP-OCRv6, which PaddleX 3.7 and PaddleOCR 3.7 "
        "brought. Install a PaddleX that has it (pip install -U 'paddlex[ocr-core]>=3.7' 'paddleocr>=3.7'), or "
        "give a model name this PaddleX knows (e.g. PP-OCRv5_mobile_det / PP-OCRv5_mobile_rec)"
    )


def _create_static_infer(original: Any, bound: Dict[str, Any], args: tuple, kwargs: dict) -> Any:
    infer = om_static_infer(args[0])
    return original(*args, **kwargs) if infer is None else infer


class Paddlex34Adapter(Adapter):
    name = "paddlex_34"

    def requires(self) -> List[str]:
        missing = [
            f"BasePredictor.{a}" for a in ("create_static_infer", "_prepare_pp_option") if not hasattr(BasePredictor, a)
        ]
        params = inspect.signature(BasePredictor.__init__).parameters
        missing += [
            f"BasePredictor.__init__({p}=...)"
            for p in ("device", "pp_option", "use_hpip", "hpi_config")
            if p not in params
        ]
        return missing

    def is_fork_patched(self) -> bool:
        return bool(getattr(sys.modules[BasePredictor.__module__], "PADDLEX_NPU_FORK", False))

    def models(self) -> List[ModelEntry]:
        out = []
        for model, cls in BasePredictor.all().items():
            static = calls_static_infer(cls)
            out.append(ModelEntry(model, cls, static, ("paddle_static",) if static else ("paddle_dynamic",)))
        return out

    def static_infer_attr(self) -> str:
        return "infer"

    def apply(self, record: PatchRecord) -> None:
        record.set_attr(BasePredictor, "__init__", wrap_bound(BasePredictor.__init__, _init))
        record.set_attr(
            BasePredictor, "create_static_infer", wrap_bound(BasePredictor.create_static_infer, _create_static_infer)
        )
        getter = classmethod(_get)
        setattr(getter, PATCHED_MARK, True)  # as wrap_bound marks its wrappers (uninstall and the tests read it)
        record.set_attr(BasePredictor, "get", getter)
        multidevice.apply(record)  # device="npu:0,1" on the OM route: the executor's worker processes


ADAPTER = Paddlex34Adapter()
