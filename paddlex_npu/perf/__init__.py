"""Performance: throughput by route (``benchmark``), load on real servers (``serve-bench``) and the chart. Returns
values and never prints: :mod:`paddlex_npu.cli` prints."""
