"""The pipelined executor: a PaddleX pipeline over many inputs with worker processes per device
(:func:`parallel`, :class:`ParallelExecutor`). Imports no PaddleX itself; its workers do, through
:mod:`paddlex_npu.paddlex.pipelines`."""

from .executor import ItemError, ItemResult, ParallelExecutor, parallel

__all__ = ["ItemError", "ItemResult", "ParallelExecutor", "parallel"]
