"""Deployment: the Triton model repository for the OCR pipeline on the NPU route and the tritonserver command."""
