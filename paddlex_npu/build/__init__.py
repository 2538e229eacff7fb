"""Build: a PaddleX model folder to an OM package (``convert``: export to ONNX, plan gears, write the ATC command
and the manifest). Returns values and never prints: :mod:`paddlex_npu.cli` prints."""
