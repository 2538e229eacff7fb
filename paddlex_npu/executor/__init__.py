"""The pipelined executor: a pipeline over many inputs with worker processes per device (:class:`ParallelExecutor`,
the one supervised pool of :mod:`.pool`). It sits below paddlex-npu's PaddleX layer and imports none of it: the
factory that builds a worker's pipeline and its meter are given by the caller (PaddleX's:
:mod:`paddlex_npu.paddlex.parallel`, whose ``ParallelExecutor`` and ``parallel`` the package exports)."""

from .executor import ItemError, ItemResult, ParallelExecutor

__all__ = ["ItemError", "ItemResult", "ParallelExecutor"]
