"""PaddleX's own multi-device pipelines (``device="npu:0,1"``) on the OM route, through paddlex-npu's executor.

PaddleX builds a pipeline given several device ids (``AutoParallelSimpleInferencePipeline``, the base of the OCR,
detection, classification, layout, table, ... pipelines) as one in-process pipeline per device, driven by
``MultiDeviceSimpleInferenceExecutor``: one thread per device, in lock step. On an NPU that overlaps nothing:
the ais_bench bindings hold the GIL for the whole device call. When the pipeline asks for the OM route
(``engine="om"``, or HPI with backend ``om`` or no backend) on two or more NPUs, the patched constructor builds
no in-process pipeline; it starts the executor (:class:`.parallel.ParallelExecutor`: worker processes, each
with its own pipeline on one device, ``$PADDLEX_NPU_WORKERS_PER_DEVICE`` per device, default 1) and puts it where
PaddleX keeps its own executor, so ``predict`` spreads the inputs over the devices: every file, page of a PDF,
image array of a list, in input order, with PaddleX's result objects. Any other pipeline reaches PaddleX as is.

The executor's layer sits below this one, so this module imports it (no registration at the package's import);
it imports PaddleX only in :func:`apply`.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional

from .. import envs
from ..devices import npu_ids
from ..errors import ConfigError, ExecutorError
from ..log import logger
from .adapter import wrap_bound
from .parallel import ParallelExecutor
from .pipelines import portable_result, restore_result
from .record import PatchRecord


def asks_for_om(use_hpip: Any, hpi_config: Any, engine: Optional[str], engine_config: Any) -> bool:
    """Whether a pipeline's options ask for the OM route: ``engine="om"``, or HPI (``use_hpip`` or
    ``engine="hpi"``) whose backend (``engine_config``, flat or its ``hpi`` bucket, else ``hpi_config``) is ``om``
    or not given (OM packages then take the route; other folders fail in the workers with the reason)."""
    if engine == "om":
        return True
    if not (use_hpip or engine == "hpi") or engine not in (None, "hpi"):
        return False
    from .routing import as_dict  # routing loads pydantic: only when asked, so `import paddlex_npu` stays light

    engine_cfg = as_dict(engine_config)
    bucket = as_dict(engine_cfg.get("hpi")) if isinstance(engine_cfg.get("hpi"), dict) else engine_cfg
    backend = bucket.get("backend") or as_dict(hpi_config).get("backend")
    return backend in (None, "om")


def workers_per_device() -> int:
    raw = envs.workers_per_device()
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"{envs.WORKERS_PER_DEVICE.name}={raw!r} is not a positive number of worker processes per device"
        )
    return int(raw)


def expand_inputs(input: Any) -> Iterator[Any]:
    """The items PaddleX's batch sampler would take one by one, unread: each element of a list, each file of a
    folder (PaddleX's own listing), else the input itself (a file, URL or array). A worker reads each item itself,
    so a PDF's pages come back from the worker that read it, in order."""
    from paddlex.inference.common.batch_sampler import ImageBatchSampler

    for item in input if isinstance(input, (list, tuple)) else [input]:
        if isinstance(item, str) and os.path.isdir(item):
            yield from ImageBatchSampler(1)._get_files_list(item)
        else:
            yield item


class _InWorkers:
    """Stands for PaddleX's first in-process pipeline (``pipeline.<attribute>`` falls through to it)."""

    def __init__(self, device: str) -> None:
        self._device = device

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"{name!r}: on device {self._device!r} this pipeline runs in paddlex-npu's worker processes (one "
            "pipeline per device in each), so its models are not in this process; create the pipeline on one "
            "device (device='npu:0') to reach them"
        )


class NpuSpread:
    """In place of PaddleX's ``MultiDeviceSimpleInferenceExecutor``: ``execute`` runs the inputs through the
    executor's workers and yields PaddleX's result objects in input order."""

    def __init__(self, executor: Any, device: str) -> None:
        self.executor, self.device = executor, device
        self._finalizer = weakref.finalize(self, executor.close, force=True)

    @property
    def pipelines(self) -> List[Any]:
        return [_InWorkers(self.device)]

    def execute(self, input: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        if args:
            raise TypeError(f"on {self.device} through paddlex-npu's executor, pass predict options as keywords")
        for item in self.executor.map(expand_inputs(input), predict_kwargs=kwargs):
            if not item.ok:
                raise ExecutorError(
                    f"input {item.index} ({item.input if isinstance(item.input, str) else type(item.input).__name__})"
                    f" failed in a worker on {self.device}: {item.error.type}: {item.error.message}\n"
                    f"{item.error.traceback}"
                )
            for result in item.results:
                yield restore_result(result)

    def close(self) -> None:
        """Stop the workers the way the executor's ``close`` does: each finishes and exits (a worker terminated by
        a signal makes Paddle print a crash dump); the finalizer, at interpreter exit, terminates them."""
        if self._finalizer.detach() is not None:
            self.executor.close(timeout=10.0)


def _worker_kwargs(bound: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    """``create_pipeline`` options of each worker's pipeline (the device is set per worker)."""
    from .routing import as_dict

    kwargs: Dict[str, Any] = {"use_hpip": bool(bound.get("use_hpip")), **extra}
    if bound.get("hpi_config") is not None:
        kwargs["hpi_config"] = as_dict(bound["hpi_config"])
    for key in ("engine", "engine_config", "pp_option"):
        if bound.get(key) is not None:
            kwargs[key] = as_dict(bound[key]) if key == "engine_config" else bound[key]
    return kwargs


def _init(original: Callable[..., Any], bound: Dict[str, Any], args: tuple, kwargs: dict) -> Any:
    """``AutoParallelSimpleInferencePipeline.__init__``: several NPUs on the OM route go to the executor."""
    extra = dict(bound.get("kwargs") or {})
    ids = npu_ids(bound.get("device"))
    from .patcher import is_installed  # a subclass decorated after install keeps this wrapper: inert once removed

    if len(ids) < 2 or bound.get("args") or not is_installed():
        return original(*args, **kwargs)
    if not asks_for_om(bound.get("use_hpip"), bound.get("hpi_config"), bound.get("engine"), bound.get("engine_config")):
        return original(*args, **kwargs)
    self, cls = bound["self"], _auto_parallel_class()
    names = ("device", "engine", "engine_config", "pp_option", "use_hpip", "hpi_config")
    super(cls, self).__init__(**{k: bound[k] for k in names if k in bound}, **extra)
    self._init_kwargs, self._init_args = extra, ()
    k = workers_per_device()
    config = dict(bound["config"])
    executor = ParallelExecutor(
        config,
        devices=ids,
        workers_per_device=k,
        create_kwargs=_worker_kwargs(bound, extra),
        transform=portable_result,
    )
    self._executor = NpuSpread(executor, str(bound["device"]))
    self._multi_device_inference = True
    logger.info(
        "%s on %s: paddlex-npu's executor, %d worker process(es) per device (%s), one pipeline each",
        config.get("pipeline_name", type(self).__name__),
        bound["device"],
        k,
        envs.WORKERS_PER_DEVICE.name,
    )


def _close(original: Callable[..., Any], bound: Dict[str, Any], args: tuple, kwargs: dict) -> Any:
    """``BasePipeline.close``: also stops the workers of a pipeline spread by :func:`_init` (they stop at exit or
    when the pipeline is collected anyway)."""
    spread = bound["self"].__dict__.get("_executor")
    if isinstance(spread, NpuSpread):
        spread.close()
    return original(*args, **kwargs)


def _auto_parallel_class() -> type:
    from paddlex.inference.pipelines._parallel import AutoParallelSimpleInferencePipeline

    return AutoParallelSimpleInferencePipeline


def apply(record: PatchRecord) -> None:
    """Patch PaddleX's multi-device pipeline base (3.4 and 3.7 have it; a PaddleX without it keeps its own)."""
    try:
        cls = _auto_parallel_class()
    except ImportError:
        logger.debug("this PaddleX has no AutoParallelSimpleInferencePipeline: device='npu:0,1' is left to it")
        return
    # PaddleX's pipeline_requires_extra decorator gives each pipeline class its own __init__ that calls the base's
    # __init__ as it was when the class was made: each of those is wrapped too (all are loaded with paddlex)
    for owner in [cls, *_subclasses(cls)]:
        if "__init__" in owner.__dict__:
            record.set_attr(owner, "__init__", wrap_bound(owner.__dict__["__init__"], _init))
    base = cls.__mro__[1]  # BasePipeline
    record.set_attr(base, "close", wrap_bound(base.__dict__["close"], _close))


def _subclasses(cls: type) -> List[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
