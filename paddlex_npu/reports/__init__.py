"""Reports: what a machine, a package or PaddleX's registry holds for the NPU route (``doctor``, ``inspect``,
``support``, ``selftest``). Returns values and never prints: :mod:`paddlex_npu.cli` prints."""
