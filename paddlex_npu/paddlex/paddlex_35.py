"""Adapter for PaddleX 3.5+ (runner/engine layout).

It adds an ``om`` inference engine (``engine="om"``, YAML ``engine: om``, CLI ``--engine om``) whose runner builder
returns the OM runner, with an ``om`` binding for every eligible model (one with a static-model runner), and sends
a ``create_predictor`` call for PaddleX's ``hpi`` engine with backend ``om`` on an ``npu`` device (or no backend
and an OM package as model folder) to that engine, with no ``ultra-infer``; ``device="npu"`` on Paddle Inference
without the NPU custom device is refused (Paddle would abort). Every other call reaches PaddleX unchanged. What
it patches, and why: ``docs/patch-ledger.md`` (checked against the record by ``tests/paddlex/test_patch_ledger.py``);
the route's speed-ups are the registry's (:mod:`.speedups`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Dict, List, Optional

from paddlex.inference import models as pdx_models
from paddlex.inference.models.bindings import Binding, default_registry
from paddlex.inference.models.engines import InferenceEngine, RunnerEngine
from paddlex.inference.models.predictors import RunnerPredictor
from paddlex.inference.models.runners.inference_runner import InferenceRunner

from ..config import OMBackendConfig, OMEngineConfig, validate
from ..errors import ConfigError
from ..log import logger
from ..run.runner import OMRunner, build_om_runner
from ..run.session import resolve_runtime_name
from . import multidevice, routing
from .adapter import Adapter, ModelEntry, wrap_bound
from .record import PatchRecord

ENGINE_NAME = "om"


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

    def prepare_config_dict(
        self, raw: Dict[str, Any], *, model_name: Optional[str] = None, device: Optional[str] = None
    ) -> Dict[str, Any]:
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
        def runner_builder(
            *,
            model_name: str,
            model_dir: Optional[Path],
            model_config: Any,
            engine_config: Dict[str, Any],
            default_builder: Any = None,
        ) -> PaddlexOMRunner:
            cfg = OMEngineConfig.model_validate(engine_config)
            backend = OMBackendConfig.model_validate(cfg.model_dump(exclude={"device_type", "device_id"}))
            binding = default_registry.try_get_binding(model_name, ENGINE_NAME)
            return build_om_runner(
                model_dir,
                runtime=resolve_runtime_name(cfg.runtime),
                device_id=cfg.device_id,
                config=backend,
                model_name=model_name,
                task=binding.predictor.__name__ if binding else None,
                runner_cls=PaddlexOMRunner,
            )

        return runner_builder

    def validate_runner(self, runner: InferenceRunner) -> None:
        if not isinstance(runner, PaddlexOMRunner):
            raise TypeError(f"engine 'om' must build an OM runner, got {type(runner).__name__}")


def _static_binding(engine_map: Dict[str, Any]) -> Optional[Any]:
    """The eligibility rule of 3.5+: a ``paddle_static`` binding whose predictor runs a static-model runner."""
    static = engine_map.get("paddle_static")
    return static if static is not None and issubclass(static.predictor, RunnerPredictor) else None


def refuse_npu_without_custom_device(bound: Dict[str, Any]) -> None:
    """Raise instead of letting Paddle Inference abort the process on ``device="npu"`` without NPU support:
    for a ``create_predictor`` call that builds a Paddle Inference predictor (engine paddle/paddle_static, or
    HPI with backend ``paddle``) on an NPU."""
    engine = bound.get("engine")
    hpi = routing.as_dict(hpi_config_of(bound))
    if engine is None and bound.get("use_hpip"):
        if hpi.get("backend") != "paddle":
            return
        engine_cfg = hpi
    elif engine in (None, "paddle", "paddle_static"):
        engine_cfg = routing.as_dict(bound.get("engine_config") or bound.get("pp_option"))
    else:
        return
    routing.refuse_paddle_inference_on_npu(*routing.device_of(bound.get("device"), engine_cfg))


def hpi_config_of(bound: Dict[str, Any]) -> Any:
    """The HPI config a ``create_predictor`` call gives PaddleX's ``hpi`` engine, as PaddleX picks it:
    ``engine_config`` before ``hpi_config``, its ``hpi`` bucket when bucketed (``{"hpi": {...}}``, 3.5+).

    One difference: a bucketed ``engine_config`` with no ``hpi`` bucket (PaddleOCR passes
    ``{"paddle_static": {...}}`` whenever no engine_config is given) leaves ``hpi_config`` in charge, where
    PaddleX would run HPI with an empty config, dropping a pipeline-level ``hpi_config``."""
    hpi_config, engine_config = bound.get("hpi_config"), bound.get("engine_config")
    if engine_config is None:
        return hpi_config
    cfg = routing.as_dict(engine_config)
    engines = set(InferenceEngine.all())
    if cfg and set(cfg) <= engines:
        return cfg.get("hpi", hpi_config)
    return cfg


class Paddlex35Adapter(Adapter):
    name = "paddlex_35"

    def requires(self) -> List[str]:
        cache = getattr(pdx_models, "_get_inference_engine", None)
        needed = {
            "models.create_predictor": getattr(pdx_models, "create_predictor", None),
            "models._get_inference_engine.cache_clear": getattr(cache, "cache_clear", None),
            "models._engine_config_bucket_key_allowlist": getattr(
                pdx_models, "_engine_config_bucket_key_allowlist", None
            ),
            "bindings.default_registry._registry": getattr(default_registry, "_registry", None),
            "RunnerEngine.build_runner": getattr(RunnerEngine, "build_runner", None),
        }
        missing = [name for name, hook in needed.items() if hook is None]
        if "device" not in inspect.signature(pdx_models.create_predictor).parameters:
            missing.append("create_predictor(device=...)")
        return missing

    def is_fork_patched(self) -> bool:
        return bool(getattr(pdx_models, "PADDLEX_NPU_FORK", False))

    def models(self) -> List[ModelEntry]:
        out = []
        for model, engine_map in default_registry._registry.items():
            static = _static_binding(engine_map)
            binding = static or next(iter(engine_map.values()))
            engines = tuple(e for e in engine_map if e != ENGINE_NAME)
            out.append(ModelEntry(model, binding.predictor, static is not None, engines))
        return out

    def static_infer_attr(self) -> str:
        return "runner"

    def route(self, bound: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Decide the route of a ``create_predictor`` call from its arguments.

        Returns the arguments to replace for the OM route (``engine="om"`` with its engine_config), or None to
        leave the call as it is; raises instead of letting Paddle Inference abort on an NPU it cannot use.
        Shared by the monkeypatch and the fork patch.
        """
        engine = bound.get("engine")
        route = (
            None
            if engine not in (None, "hpi")
            else routing.om_route(
                bound.get("use_hpip") or engine == "hpi",
                hpi_config_of(bound),
                bound.get("device"),
                bound.get("model_dir"),
                bound.get("model_name"),
            )
        )
        if route is None:
            refuse_npu_without_custom_device(bound)
            return None
        device_id, backend = route
        model_name = bound.get("model_name")
        engine_map = default_registry._registry.get(model_name)
        if engine_map is not None and _static_binding(engine_map) is None:
            raise ConfigError(
                f"{model_name} has no static model to convert to an OM (its engines: {', '.join(sorted(engine_map))}), "
                "so it cannot take the NPU route (hpi backend 'om'); run it without use_hpip on device='cpu', or on "
                "the NPU through paddle-custom-npu; `paddlex-npu support` lists what the route covers"
            )
        logger.info("%s: hpi backend 'om' on npu:%d -> OM runner", model_name, device_id)
        engine_config = {"device_type": "npu", "device_id": device_id, **backend.model_dump(exclude_unset=True)}
        return {
            "engine": ENGINE_NAME,
            "engine_config": engine_config,
            "device": None,
            "use_hpip": False,
            "hpi_config": None,
        }

    def _register_engine(self, record: PatchRecord) -> int:
        """The ``om`` engine, and an ``om`` binding for every eligible model that lacks one (each an item of the
        record), the engine caches cleared (again on revert); returns how many bindings it added."""
        record.set_item(InferenceEngine.all(), ENGINE_NAME, OMEngine)
        added = 0
        for engine_map in default_registry._registry.values():
            static = _static_binding(engine_map)
            if static is not None and ENGINE_NAME not in engine_map:
                record.set_item(engine_map, ENGINE_NAME, Binding(predictor=static.predictor))
                added += 1
        record.on_apply_and_revert(_clear_engine_caches)
        return added

    def fork(self, record: PatchRecord) -> None:
        """A fork-patched PaddleX routes in its own ``create_predictor``: it needs the engine and bindings."""
        self._register_engine(record)

    def apply(self, record: PatchRecord) -> None:
        registry = InferenceEngine.all()
        if ENGINE_NAME in registry and registry[ENGINE_NAME] is not OMEngine:
            raise ConfigError(f"an engine named {ENGINE_NAME!r} is already registered by {registry[ENGINE_NAME]}")
        bound = self._register_engine(record)
        original = pdx_models.create_predictor
        # every module-level alias (paddlex, paddlex.inference, paddlex.model's `from .inference import
        # create_predictor`, PaddleOCR's, ...), not only the defining module
        record.set_everywhere(original, wrap_bound(original, self._create_predictor))
        multidevice.apply(record)  # device="npu:0,1" on the OM route: the executor's worker processes
        logger.debug("PaddleX 3.5+ adapter: engine 'om' for %d models", bound)

    def _create_predictor(self, original: Any, bound: Dict[str, Any], args: tuple, kwargs: dict) -> Any:
        replace = self.route(bound)
        if replace is None:
            return original(*args, **kwargs)
        extra = bound.pop("kwargs", {})
        return original(**{**bound, **extra, **replace})


def _clear_engine_caches() -> None:
    pdx_models._get_inference_engine.cache_clear()
    pdx_models._engine_config_bucket_key_allowlist.cache_clear()


ADAPTER = Paddlex35Adapter()
