"""A PaddleX pipeline (or model) on one NPU on the route, as the executor's workers, the servers and the Triton
models create it (both PaddleX generations), the one reader of pipeline configs (:func:`load_config`) and the one
walker of them (:func:`sub_modules`)."""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ..errors import ConfigError, ModelFileError
from .patcher import adapter, install, is_installed, paddlex_version

MODEL_KEY = "model_dir"
# engine_config given per engine ({"hpi": {...}, "paddle_static": {...}}) rather than flat
ENGINE_BUCKETS = {"hpi", "om", "paddle", "paddle_static", "paddle_dynamic", "onnxruntime", "transformers"}

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
        if key == "engine_config" and set(cfg) & ENGINE_BUCKETS:  # bucketed: the NPU route's buckets only
            for bucket in (cfg[k] for k in ("hpi", "om") if isinstance(cfg.get(k), dict)):
                bucket["device_id"] = device_id
        else:
            cfg["device_id"] = device_id
    return kwargs


def model_spec(model_dir: Any) -> Dict[str, Any]:
    """One model folder as a pipeline stand-in for :func:`create_on_device`: ``{"model_dir", "model_name"}`` (the
    name from its ``inference.yml``)."""
    import yaml

    config = Path(model_dir) / "inference.yml"
    package = "give the folder of an OM package, as `paddlex-npu convert` writes"
    if not Path(model_dir).exists():
        raise ModelFileError(f"model folder {model_dir} does not exist: {package}")
    if not config.is_file():
        raise ModelFileError(f"{model_dir} holds no inference.yml, so it is no PaddleX model folder: {package}")
    with open(config, encoding="utf-8") as f:
        name = (yaml.safe_load(f) or {}).get("Global", {}).get("model_name")
    if not name:
        raise ConfigError(f"{model_dir}/inference.yml has no Global.model_name: it is not a PaddleX model folder")
    return {MODEL_KEY: str(model_dir), "model_name": name}


def _create(pipeline: Union[str, Dict[str, Any]], kwargs: Dict[str, Any]) -> Any:
    """``create_pipeline`` for a name, YAML path or config dict; ``create_model`` for a :func:`model_spec`."""
    if not is_installed():  # patches once even with the import hook pending (patcher.install, test_install.py)
        install()
    from paddlex import create_model, create_pipeline

    if isinstance(pipeline, dict) and MODEL_KEY in pipeline:
        return create_model(model_name=pipeline["model_name"], model_dir=pipeline[MODEL_KEY], **kwargs)
    if isinstance(pipeline, dict):
        return create_pipeline(config=pipeline, **kwargs)
    return create_pipeline(str(pipeline), **kwargs)


def create_on_device(
    pipeline: Union[str, Dict[str, Any]], device_id: int, create_kwargs: Optional[Dict[str, Any]] = None
) -> Any:
    """``paddlex.create_pipeline`` for a pipeline name, YAML path or config dict (``create_model`` for a
    :func:`model_spec`), on ``npu:<device_id>``."""
    return _create(pipeline, device_kwargs(create_kwargs, device_id))


def hpi_config(config: Dict[str, Any], device_id: int, runtime: Optional[str] = None) -> Dict[str, Any]:
    """The ``hpi_config`` of the NPU route for one device: the config's own (top level), with backend ``om`` on
    ``npu``, this device, and ``runtime`` (when given) in ``backend_config``."""
    hpi = copy.deepcopy(config.get("hpi_config") or {})
    hpi.setdefault("backend", "om")
    hpi.setdefault("device_type", "npu")
    hpi["device_id"] = device_id
    if runtime:
        hpi["backend_config"] = {**(hpi.get("backend_config") or {}), "runtime": runtime}
    return hpi


def pipeline_on_device(config: Dict[str, Any], device_id: int, runtime: Optional[str] = None) -> Any:
    """The PaddleX pipeline of a config dict on the route on ``npu:<device_id>``, its own ``hpi_config`` kept
    (:func:`hpi_config`), ``runtime`` in its ``backend_config`` when given."""
    kwargs = {"use_hpip": True, "hpi_config": hpi_config(config, device_id, runtime)}
    return create_on_device({k: v for k, v in config.items() if k not in kwargs}, device_id, kwargs)


def model_on_device(
    model_dir: Union[str, Path],
    model_name: str,
    device_id: int,
    runtime: Optional[str] = None,
    batch_size: int = 1,
    hpi: Optional[Dict[str, Any]] = None,
) -> Any:
    """One PaddleX model (predictor) on the route on ``npu:<device_id>``."""
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


def load_config(pipeline: Union[str, Path, Dict[str, Any]]) -> Dict[str, Any]:
    """A pipeline's config dict: a copy of a dict (or :func:`model_spec`); a YAML file read and checked (a
    :class:`ConfigError` naming the file and what is wrong); a pipeline name read from PaddleX's own configs."""
    if isinstance(pipeline, dict):
        return copy.deepcopy(pipeline)
    path = Path(pipeline)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        import yaml

        try:
            config = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"pipeline config {path}: {exc}") from exc
        if not isinstance(config, dict) or "pipeline_name" not in config:
            raise ConfigError(f"pipeline config {path}: a PaddleX pipeline YAML with `pipeline_name` is needed")
        return config
    from paddlex.inference.pipelines import load_pipeline_config

    return load_pipeline_config(str(pipeline))


def sub_modules(config: Dict[str, Any], where: str = "") -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(dotted path, sub-config) of every SubModule of a pipeline config: its own, then those of each of its
    SubPipelines, recursing, in the config's order (``"SubPipelines.GeneralOCR.SubModules.TextDetection"``)."""
    prefix = f"{where}." if where else ""
    for key, sub in (config.get("SubModules") or {}).items():
        if isinstance(sub, dict):
            yield f"{prefix}SubModules.{key}", sub
    for key, pipe in (config.get("SubPipelines") or {}).items():
        if isinstance(pipe, dict):
            yield from sub_modules(pipe, f"{prefix}SubPipelines.{key}")


def model_dirs(config: Dict[str, Any]) -> List[Path]:
    """Every ``model_dir`` of a pipeline config (nested SubPipelines too), or the model spec's folder."""
    if MODEL_KEY in config:
        return [Path(config[MODEL_KEY])]
    return [Path(sub[MODEL_KEY]) for _, sub in sub_modules(config) if sub.get(MODEL_KEY)]


CPU_ENGINES = {"onnxruntime": ("inference.onnx",), "paddle_static": ("inference.pdiparams",)}


def cpu_route(pipeline: Union[str, Dict[str, Any]], engine: str) -> Any:
    """The pipeline (or model) on PaddleX's own CPU engine (``onnxruntime``: 3.5+; ``paddle_static``: Paddle
    Inference without oneDNN, which fails on PP-OCR det with paddlepaddle 3.3), or a :class:`ConfigError` saying
    why that route does not apply (this PaddleX, or model folders without the engine's files)."""
    from .routing import paddle_installed  # routing loads pydantic: not at `import paddlex_npu`

    if engine == "paddle_static" and not paddle_installed():
        raise ConfigError(
            "paddle_static runs Paddle Inference, but paddlepaddle is not installed: `pip install paddlepaddle` "
            "(the CPU build) to measure it"
        )
    config = load_config(pipeline)
    need = CPU_ENGINES[engine]
    missing = [str(d) for d in model_dirs(config) if not all((d / f).is_file() for f in need)]
    if missing or not model_dirs(config):
        raise ConfigError(f"{engine} needs {', '.join(need)} in each model folder; not in {', '.join(missing)}")
    from paddlex.inference import PaddlePredictorOption

    if adapter().name == "paddlex_34":
        if engine != "paddle_static":
            raise ConfigError(f"PaddleX {paddlex_version()} has no {engine} engine (3.5+)")
        return _create(config, {"device": "cpu", "pp_option": PaddlePredictorOption(run_mode="paddle")})
    extra = {"engine_config": {"run_mode": "paddle"}} if engine == "paddle_static" else {}
    return _create(config, {"device": "cpu", "engine": engine, **extra})


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


def check_route_config(config: Dict[str, Any], source: str = "the pipeline YAML") -> None:
    """Before any worker loads a pipeline config on the route: its ``pipeline_name`` is one PaddleX has, and every
    SubModule names its ``model_dir`` (without one, PaddleX fetches its own model from its model hub, which the
    route does not run). One :class:`ConfigError` line each, naming the fix."""
    if MODEL_KEY in config:  # a model spec, not a pipeline
        return
    from paddlex.inference.pipelines import BasePipeline

    name = config.get("pipeline_name")
    known = sorted(BasePipeline.all())
    if name not in known:
        close = [k for k in known if k.lower() == str(name).lower()]
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"{source}: pipeline_name {name!r} is not a pipeline of PaddleX {paddlex_version()}: {hint}"
            f"give one of {', '.join(known)}"
        )
    for where, sub in sub_modules(config):
        if not sub.get(MODEL_KEY):
            model = sub.get("model_name", "its model")
            raise ConfigError(
                f"{source}: {where} has no model_dir: PaddleX would fetch {model} from its model hub, which the NPU "
                f"route does not run; set {where}.model_dir to an OM package (paddlex-npu convert builds one)"
            )
