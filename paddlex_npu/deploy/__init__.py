"""Deployment: Kubernetes manifests for ``paddlex-npu serve`` or ``triton-serve`` (``k8s``). The Triton
repository itself is written by :mod:`..triton.repo`."""
