"""The worker pool behind ``paddlex-npu serve``: the executor's supervised :class:`~..executor.pool.WorkerPool`,
``workers`` processes per device, each holding the pipeline of the server's YAML on the NPU route.

What is serve's own here: the pipeline each worker builds (the YAML's ``hpi_config`` with this device and the
``--runtime``) and the transform of each PaddleX result into what PaddleX's serving app reads (:class:`Result`:
its ``json`` and, when the request asks for it, its ``img``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from ..executor.pool import RestartBudget, WorkerPool
from ..executor.worker import WorkerSpec, thread_env
from ..paddlex.pipelines import create_on_device, hpi_config
from ..paddlex.stages import device_meter


class Result:
    """What comes back from a worker for one PaddleX result (those do not pickle): its ``json`` and, when asked
    for, its ``img`` (the visualisations, PIL images), as PaddleX's serving apps read them."""

    def __init__(self, json: Dict[str, Any], img: Optional[Dict[str, Any]]) -> None:
        self.json = json
        self._img = img

    @property
    def img(self) -> Dict[str, Any]:
        if self._img is None:
            raise AttributeError("the visualisation was not asked for (visualize)")
        return self._img


def serve_result(item: Any, images: bool = False) -> Any:
    """The worker's transform: a PaddleX result -> :class:`Result`; PaddleX's ``{"error": ...}`` items as they are."""
    if isinstance(item, dict) and item.keys() == {"error"}:
        return dict(item)
    return Result(item.json, dict(item.img) if images else None)


def worker_spec(config: Dict[str, Any], device_id: int, runtime: Optional[str], workers: int = 1) -> WorkerSpec:
    """How a serve worker builds its pipeline: PaddleX's ``create_pipeline`` on the hpi ``om`` backend, with the
    YAML's own ``hpi_config`` (top level) and ``runtime`` in its ``backend_config``; thread pools sized for the
    server's ``workers`` processes in all (:func:`~..executor.worker.thread_env`)."""
    pipeline = {k: v for k, v in config.items() if k not in ("use_hpip", "hpi_config")}
    create = {"use_hpip": True, "hpi_config": hpi_config(config, device_id, runtime)}
    env = {**thread_env(workers), **({"PADDLEX_NPU_RUNTIME": runtime} if runtime else {})}
    from .metrics import instrument_worker

    return WorkerSpec(
        pipeline, device_id, create, {}, serve_result, env, create_on_device, device_meter, instrument_worker
    )


def check_packages(config: Dict[str, Any]) -> None:
    """Every ``model_dir`` of the YAML is a model package (a folder with ``inference.yml``): else a
    :class:`~..errors.ModelFileError` naming the model, the folder and the fix, before any worker starts."""
    from ..errors import ModelFileError
    from ..paddlex.pipelines import MODEL_KEY, model_spec, sub_modules

    for where, sub in sub_modules(config):
        if sub.get(MODEL_KEY):
            try:
                model_spec(sub[MODEL_KEY])
            except ModelFileError as exc:
                name = sub.get("model_name", "?")
                raise ModelFileError(f"{where} ({name}) of the pipeline YAML: {exc}") from None


def create_pool(
    config: Dict[str, Any],
    devices: Sequence[int],
    workers: int = 1,
    runtime: Optional[str] = None,
    *,
    max_queue: int = 64,
    timeout: Optional[float] = None,
    restarts: Optional[RestartBudget] = None,
) -> WorkerPool:
    """The (not yet started) pool of ``workers`` processes per device id."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    specs = {d: worker_spec(config, d, runtime, workers * len(devices)) for d in devices}
    return WorkerPool(specs, workers, max_queue=max_queue, timeout=timeout, restarts=restarts)
