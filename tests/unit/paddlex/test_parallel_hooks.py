"""PaddleX's ordered stream (``paddlex/parallel.py``, exported as ``paddlex_npu.ParallelExecutor`` and
``paddlex_npu.parallel``): the executor below, which knows no pipeline, with PaddleX's hooks by reference."""

from __future__ import annotations

import paddlex_npu
from paddlex_npu.executor import executor
from paddlex_npu.paddlex import parallel, pipelines, stages


def test_the_package_exports_the_paddlex_executor_with_paddlexs_hooks():
    assert paddlex_npu.ParallelExecutor is parallel.ParallelExecutor and paddlex_npu.parallel is parallel.parallel
    ex = parallel.ParallelExecutor
    assert issubclass(ex, executor.ParallelExecutor)
    hooks = (ex.factory, ex.meter, ex.stage_meter, ex.result)  # plain functions: a spec pickles them by reference
    assert hooks == (pipelines.create_on_device, stages.device_meter, stages.stage_meter, pipelines.plain_result)
    base = executor.ParallelExecutor
    assert (base.factory, base.meter, base.stage_meter, base.result) == (None, None, None, None)


def test_the_bare_executor_builds_no_pipeline_of_its_own():
    import pytest

    with pytest.raises(ValueError, match="a WorkerSpec needs factory="):
        executor.ParallelExecutor("OCR")  # refused before any worker starts
