"""Adapter for PaddleX 3.5+ (runner/engine layout).

What it adds, all removed again by :func:`revert`:
- an ``om`` inference engine (``engine="om"``, YAML ``engine: om``, CLI ``--engine om``) whose runner builder
  returns the OM runner, and an ``om`` binding for every model that has a ``paddle_static`` runner binding;
- a wrapper around ``create_predictor`` that sends ``use_hpip=True`` + ``hpi_config`` backend ``om`` on an
  ``npu`` device to that engine (no ``ultra-infer`` needed), and that refuses ``device="npu"`` on Paddle
  Inference when this paddlepaddle has no NPU custom device (Paddle would abort the process).
Every other call reaches PaddleX unchanged.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..config import OMBackendConfig, OMEngineConfig, validate
from ..errors import ConfigError
from ..log import logger
from ..runner import OMRunner, build_om_runner
from ..runtimes import resolve_runtime_name
from . import common
from .patching import Patches

ENGINE_NAME = "om"

from paddlex.inference import models as pdx_models  # noqa: E402
from paddlex.inference.models.bindings import Binding, default_registry  # noqa: E402
from paddlex.inference.models.engines import InferenceEngine, RunnerEngine  # noqa: E402
from paddlex.inference.models.predictors import RunnerPredictor  # noqa: E402
from paddlex.inference.models.runners.inference_runner import InferenceRunner  # noqa: E402


class PaddlexOMRunner(OMRunner, InferenceRunner):
    """The OM runner as a PaddleX ``InferenceRunner`` (PaddleX's benchmark timer wraps ``__call__``)."""

    __call__ = OMRunner.__call__
    close = OMRunner.close


class OMEngine(RunnerEngine):
    """The ``om`` engine: OM models on an Ascend NPU through an ``InferSession``."""

    @property
    def name(self) -> str:
        return ENGINE_NAME

    def get_supported_model_formats(self):
        return ("om", "onnx")

    def prepare_config_dict(self, raw: Dict[str, Any], *, model_name: Optional[str] = None,
                            device: Optional[str] = None) -> Dict[str, Any]:
        self._apply_device(raw, device)
        raw.setdefault("device_type", "npu")
        if raw.get("device_id") is None:
            raw.pop("device_id", None)
        return raw

    def validate_config_dict(self, raw: Dict[str, Any]) -> Dict[str, Any]:
        if raw.get("device_type") != "npu":
            raise ConfigError(
                f"engine 'om' runs OM models on an Ascend NPU, but the device is {raw.get('device_type')!r}: "
                "use device='npu' or 'npu:N', or pick another engine (paddle, onnxruntime) for that device"
            )
        return validate(OMEngineConfig, raw, "om engine_config").model_dump(exclude_none=True)

    def ensure_model_files(self, model_dir: Path) -> None:
        """Checked by the runner builder, which knows the runtime and so which files are needed."""

    def get_default_runner_builder(self):
        def runner_builder(*, model_name: str, model_dir: Optional[Path], model_config: Any,
                           engine_config: Dict[str, Any], default_builder: Any = None) -> PaddlexOMRunner:
            cfg = OMEngineConfig.model_validate(engine_config)
            backend = OMBackendConfig.model_validate(cfg.model_dump(exclude={"device_type", "device_id"}))
            binding = default_registry.try_get_binding(model_name, ENGINE_NAME)
            return build_om_runner(
                model_dir, runtime=resolve_runtime_name(cfg.runtime), device_id=cfg.device_id, config=backend,
                model_name=model_name, task=binding.predictor.__name__ if binding else None,
                runner_cls=PaddlexOMRunner,
            )  # fmt: skip

        return runner_builder

    def validate_runner(self, runner: InferenceRunner) -> None:
        if not isinstance(runner, PaddlexOMRunner):
            raise TypeError(f"engine 'om' must build an OM runner, got {type(runner).__name__}")


# ---- routing ----------------------------------------------------------------------------------------------


def _hpi_route_config(bound: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The ``om`` engine_config for a call that asks for HPI backend ``om`` on an NPU, else None."""
    if bound.get("engine") is not None:
        return None
    route = common.om_route(bound.get("use_hpip"), bound.get("hpi_config"), bound.get("device"))
    if route is None:
        return None
    device_id, backend = route
    return {"device_type": "npu", "device_id": device_id, **backend.model_dump(exclude_unset=True)}


def route(bound: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Decide the route of a ``create_predictor`` call from its arguments.

    Returns the arguments to replace for the OM route (``engine="om"`` with its engine_config), or None to
    leave the call as it is; raises instead of letting Paddle Inference abort on an NPU it cannot use.
    Shared by the monkeypatch below and the fork patch (:mod:`paddlex_npu.fork`).
    """
    om_config = _hpi_route_config(bound)
    if om_config is None:
        common.refuse_npu_without_custom_device(bound)
        return None
    model_name = bound.get("model_name")
    if model_name in default_registry._registry and default_registry.try_get_binding(model_name, ENGINE_NAME) is None:
        engines = sorted(default_registry._registry[model_name])
        raise ConfigError(
            f"{model_name} has no static model to convert to an OM (its engines: {', '.join(engines)}), so it cannot "
            "take the NPU route (hpi backend 'om'); run it without use_hpip on device='cpu', or on the NPU "
            "through paddle-custom-npu; `paddlex-npu support` lists what the route covers"
        )
    logger.info("%s: hpi backend 'om' on npu:%d -> OM runner", bound.get("model_name"), om_config["device_id"])
    return {"engine": ENGINE_NAME, "engine_config": om_config, "device": None, "use_hpip": False, "hpi_config": None}


def _wrap_create_predictor(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def create_predictor(*args: Any, **kwargs: Any):
        bound = signature.bind_partial(*args, **kwargs).arguments
        replace = route(bound)
        if replace is None:
            return original(*args, **kwargs)
        extra = bound.pop("kwargs", {})
        return original(**{**bound, **extra, **replace})

    create_predictor.__paddlex_npu_patched__ = True
    return create_predictor


def _om_bindings() -> List[str]:
    names = []
    for model_name, engine_map in default_registry._registry.items():
        static = engine_map.get("paddle_static")
        if static is None or ENGINE_NAME in engine_map or not issubclass(static.predictor, RunnerPredictor):
            continue
        engine_map[ENGINE_NAME] = Binding(predictor=static.predictor)
        names.append(model_name)
    return names


def missing_hooks() -> List[str]:
    """The hook points this adapter needs that the installed PaddleX lacks (empty: the layout is known)."""
    needed = {
        "models.create_predictor": getattr(pdx_models, "create_predictor", None),
        "models._get_inference_engine.cache_clear": getattr(pdx_models._get_inference_engine, "cache_clear", None)
        if hasattr(pdx_models, "_get_inference_engine") else None,
        "models._engine_config_bucket_key_allowlist": getattr(pdx_models, "_engine_config_bucket_key_allowlist", None),
        "bindings.default_registry._registry": getattr(default_registry, "_registry", None),
        "RunnerEngine.build_runner": getattr(RunnerEngine, "build_runner", None),
    }  # fmt: skip
    missing = [name for name, hook in needed.items() if hook is None]
    if "device" not in inspect.signature(pdx_models.create_predictor).parameters:
        missing.append("create_predictor(device=...)")
    return missing


def is_fork_patched() -> bool:
    """Whether this PaddleX carries paddlex-npu's fork patch (routing in its own source)."""
    return bool(getattr(pdx_models, "PADDLEX_NPU_FORK", False))


def register_om_engine() -> None:
    """Permanently register the ``om`` engine and bindings (fork-patched PaddleX); idempotent."""
    registry = InferenceEngine.all()
    if registry.get(ENGINE_NAME) is OMEngine:
        return
    registry[ENGINE_NAME] = OMEngine
    _om_bindings()
    _clear_engine_caches()


def apply(patches: Patches) -> None:
    registry = InferenceEngine.all()
    if ENGINE_NAME in registry and registry[ENGINE_NAME] is not OMEngine:
        raise ConfigError(f"an engine named {ENGINE_NAME!r} is already registered by {registry[ENGINE_NAME]}")
    patches.set_item(registry, ENGINE_NAME, OMEngine)
    bound = _om_bindings()
    patches.on_revert(lambda: [default_registry._registry[n].pop(ENGINE_NAME, None) for n in bound])
    import paddlex
    import paddlex.inference as pdx_inference

    original = pdx_models.create_predictor
    wrapper = _wrap_create_predictor(original)
    for owner in (pdx_models, pdx_inference, paddlex):
        if getattr(owner, "create_predictor", None) is original:
            patches.set_attr(owner, "create_predictor", wrapper)
    patches.on_apply_and_revert(_clear_engine_caches)
    logger.debug("PaddleX 3.5+ adapter: engine 'om' for %d models", len(bound))


def _clear_engine_caches() -> None:
    pdx_models._get_inference_engine.cache_clear()
    pdx_models._engine_config_bucket_key_allowlist.cache_clear()
