"""Serving on the NPU route: PaddleX's own HTTP app over worker processes (``http``), and the Python-backend
models of a Triton repository (``triton_model``). The only layer above ``paddlex`` that runs PaddleX pipelines."""
