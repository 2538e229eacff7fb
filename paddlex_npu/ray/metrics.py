"""The device and stage series of ``paddlex-npu serve`` (:mod:`..serve.metrics`), from a Ray Serve replica
through Ray's own metrics (``ray.util.metrics``): Ray exports them with every node's metrics (Prometheus names
prefixed ``ray_``, e.g. ``ray_paddlex_npu_stage_seconds_bucket{device, stage}``), where Ray's Prometheus setup
scrapes them. The same instrumentation as ``serve``'s workers, into Ray's metric objects."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

from ..serve.metrics import WORKER_SERIES, instrument_with


class _Child:
    """One labelled series of a Ray metric, with prometheus_client's child methods."""

    def __init__(self, metric: Any, tags: Dict[str, str]) -> None:
        self.metric, self.tags, self.value = metric, tags, 0.0

    def inc(self, amount: float = 1.0) -> None:
        if hasattr(self.metric, "inc"):
            self.metric.inc(amount, tags=self.tags)
        else:  # a Gauge: Ray's has set only
            self.set(self.value + amount)

    def dec(self, amount: float = 1.0) -> None:
        self.set(self.value - amount)

    def set(self, value: float) -> None:
        self.value = value
        self.metric.set(value, tags=self.tags)

    def observe(self, value: float) -> None:
        self.metric.observe(value, tags=self.tags)


class _Family:
    """A Ray metric with ``labels(*values)``, as a prometheus_client family."""

    def __init__(self, metric: Any, tag_keys: Sequence[str]) -> None:
        self.metric, self.tag_keys = metric, tuple(tag_keys)
        self._children: Dict[Tuple[str, ...], _Child] = {}

    def labels(self, *values: str) -> _Child:
        key = tuple(str(v) for v in values)
        if key not in self._children:
            self._children[key] = _Child(self.metric, dict(zip(self.tag_keys, key)))
        return self._children[key]


class RayMetrics:
    """The worker-side series (:data:`..serve.metrics.WORKER_SERIES`), as Ray metrics."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
        for s in WORKER_SERIES:
            extra = {"boundaries": list(s.buckets)} if s.kind == "histogram" else {}
            metric = kinds[s.kind](s.name, description=s.doc, tag_keys=s.labels, **extra)
            setattr(self, s.attr, _Family(metric, s.labels))


def instrument(pipeline: Any, device_id: int) -> Any:
    """``pipeline`` with its stages and device calls timed into Ray's metrics (in a Serve replica)."""
    return instrument_with(pipeline, RayMetrics(), device_id)
