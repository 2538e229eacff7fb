"""The pipelined executor: a PaddleX pipeline over many inputs with worker processes per device
(:func:`parallel`, :class:`ParallelExecutor`). Imports no PaddleX itself; its workers do, through
:mod:`paddlex_npu.paddlex.pipelines`."""

from ..paddlex.multidevice import register_executor
from .executor import ItemError, ItemResult, ParallelExecutor, parallel

register_executor(ParallelExecutor)  # PaddleX's device="npu:0,1" on the OM route runs through it

__all__ = ["ItemError", "ItemResult", "ParallelExecutor", "parallel"]
