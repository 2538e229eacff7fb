"""Serving on the NPU route: PaddleX's own HTTP app over worker processes (``http``), and the Python-backend
guard, fetch and reply modules that the Triton wing (:mod:`..triton`) and Ray Serve share."""
