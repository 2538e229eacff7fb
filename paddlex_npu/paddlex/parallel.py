"""The ordered stream over PaddleX pipelines (``paddlex_npu.parallel``, ``paddlex_npu.ParallelExecutor``): the
executor of :mod:`paddlex_npu.executor`, which knows no pipeline, with PaddleX's hooks: each worker builds its
pipeline with :func:`.pipelines.create_on_device`, sends each result back as :func:`.pipelines.plain_result`, and
its timing holds the simulated device's counters (:func:`.stages.device_meter`; with ``stages=True``, also the
stage times: :func:`.stages.stage_meter`)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Union

from ..executor import executor
from ..executor.executor import ItemResult
from . import pipelines, stages


class ParallelExecutor(executor.ParallelExecutor):
    __doc__ = executor.ParallelExecutor.__doc__

    factory = staticmethod(pipelines.create_on_device)
    meter = staticmethod(stages.device_meter)
    stage_meter = staticmethod(stages.stage_meter)
    result = staticmethod(pipelines.plain_result)


def parallel(pipeline: Union[str, Dict[str, Any]], inputs: Iterable[Any], **options: Any) -> Iterator[ItemResult]:
    """Run ``pipeline`` over ``inputs`` with worker processes (see :class:`ParallelExecutor` for ``options``);
    yields one :class:`ItemResult` per input, in input order, then stops the workers."""
    with ParallelExecutor(pipeline, **options) as ex:
        yield from ex.map(inputs)
