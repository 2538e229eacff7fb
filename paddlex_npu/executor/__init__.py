"""The pipelined executor: a PaddleX pipeline over many inputs with worker processes per device
(:func:`parallel`, :class:`ParallelExecutor`). Imports no PaddleX and no part of paddlex-npu's PaddleX layer: its
workers build the pipeline through the factory their spec names (:mod:`paddlex_npu.paddlex.pipelines`)."""

from .executor import ItemError, ItemResult, ParallelExecutor, parallel

__all__ = ["ItemError", "ItemResult", "ParallelExecutor", "parallel"]
