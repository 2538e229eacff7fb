"""The one logger of paddlex-npu."""

from __future__ import annotations

import logging

logger = logging.getLogger("paddlex_npu")
if not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[paddlex-npu] %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
