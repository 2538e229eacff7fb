"""Adapter for PaddleX 3.0-3.4 (legacy ``BasePredictor.create_static_infer`` layout).

Each predictor's ``__init__`` calls ``BasePredictor.__init__`` and then ``_build()``, which calls
``self.create_static_infer()`` and stores the result as ``self.infer``; ``process()`` then calls
``self.infer(x=...)`` / ``self.infer(batch_inputs)`` and expects a list of numpy arrays in output order: the
same contract as the OM runner, so no task's ``process`` needs patching for the static models routed here.

Patched, and restored by the patch record:
- ``BasePredictor.__init__``: a call with ``use_hpip=True`` + ``hpi_config`` backend ``om`` on an NPU is
  marked for the OM route and initialised without HPI, so ``require_hpip()`` (ultra-infer) is skipped on that
  route only;
- ``BasePredictor.create_static_infer``: marked predictors get the shared OM runner; a Paddle Inference
  predictor on ``npu`` without the NPU custom device raises instead of aborting; everything else is PaddleX's
  own ``PaddleInfer``/``HPInfer``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

from ..errors import ConfigError
from ..log import logger
from ..runner import build_om_runner
from ..runtimes import resolve_runtime_name
from . import common
from .patching import Patches

_MARK = "_paddlex_npu_om"


def om_route(predictor: Any, use_hpip: Any, hpi_config: Any, device: Any) -> Any:
    """Mark ``predictor`` for the OM route when it asks for HPI backend ``om`` on an NPU; returns the mark."""
    route = common.om_route(use_hpip, hpi_config, device)
    setattr(predictor, _MARK, route)
    return route


def om_static_infer(predictor: Any) -> Any:
    """The OM runner for a marked predictor; None for PaddleX's own static infer (after the NPU check).

    Shared by the monkeypatch below and the fork patch (:mod:`paddlex_npu.fork`).
    """
    route = getattr(predictor, _MARK, None)
    if route is not None:
        device_id, backend = route
        logger.info("%s: hpi backend 'om' on npu:%d -> OM runner", predictor.model_name, device_id)
        return build_om_runner(
            predictor.model_dir, runtime=resolve_runtime_name(backend.runtime), device_id=device_id,
            config=backend, model_name=predictor.model_name, task=type(predictor).__name__,
        )  # fmt: skip
    option = getattr(predictor, "_pp_option", None)
    if not getattr(predictor, "_use_hpip", False) and option is not None:
        common.refuse_paddle_inference_on_npu(option.device_type, int(option.device_id or 0))
    return None


def _wrap_init(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces BasePredictor.__init__
        bound = signature.bind_partial(self, *args, **kwargs).arguments
        if om_route(self, bound.get("use_hpip"), bound.get("hpi_config"), bound.get("device")) is None:
            return original(self, *args, **kwargs)
        kwargs.update(use_hpip=False, hpi_config=None, device=None, pp_option=None)
        original(self, *args[:2], **kwargs)  # model_dir, config; the rest are keyword-only in every 3.x
        self._use_hpip = True
        from ..support import calls_static_infer

        if not getattr(self, "_use_static_model", False) or not calls_static_infer(type(self)):
            raise ConfigError(
                f"{self.model_name} ({type(self).__name__}) does not run a static model, so it cannot take the NPU "
                "route (hpi backend 'om'); run it without use_hpip, or on the NPU through paddle-custom-npu"
            )

    __init__.__paddlex_npu_patched__ = True
    return __init__


def _wrap_create_static_infer(original):
    @functools.wraps(original)
    def create_static_infer(self):
        infer = om_static_infer(self)
        return original(self) if infer is None else infer

    create_static_infer.__paddlex_npu_patched__ = True
    return create_static_infer


def is_fork_patched() -> bool:
    """Whether this PaddleX carries paddlex-npu's fork patch (routing in its own source)."""
    import sys

    return bool(getattr(sys.modules[BasePredictor.__module__], "PADDLEX_NPU_FORK", False))


def missing_hooks() -> list:
    """The hook points this adapter needs that the installed PaddleX lacks (empty: the layout is known)."""
    missing = [f"BasePredictor.{a}" for a in ("create_static_infer", "_prepare_pp_option")
               if not hasattr(BasePredictor, a)]  # fmt: skip
    params = inspect.signature(BasePredictor.__init__).parameters
    missing += [f"BasePredictor.__init__({p}=...)" for p in ("device", "pp_option", "use_hpip", "hpi_config")
                if p not in params]  # fmt: skip
    return missing


def apply(patches: Patches) -> None:
    patches.set_attr(BasePredictor, "__init__", _wrap_init(BasePredictor.__init__))
    patches.set_attr(BasePredictor, "create_static_infer", _wrap_create_static_infer(BasePredictor.create_static_infer))
