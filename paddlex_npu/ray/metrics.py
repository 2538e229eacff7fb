"""The device and stage series of ``paddlex-npu serve`` (:mod:`..serve.metrics`), from a Ray Serve replica
through Ray's own metrics (``ray.util.metrics``): Ray exports them with every node's metrics (Prometheus names
prefixed ``ray_``, e.g. ``ray_paddlex_npu_stage_seconds_bucket{device, stage}``), where Ray's Prometheus setup
scrapes them. The same instrumentation as ``serve``'s workers, into Ray's metric objects."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

from ..serve.metrics import DEVICE_BUCKETS, LATENCY_BUCKETS, instrument_with


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
    """The worker-side families of :class:`..serve.metrics._Metrics`, as Ray metrics."""

    def __init__(self) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        def family(kind: Any, name: str, doc: str, tags: Sequence[str], **kw: Any) -> _Family:
            return _Family(kind(name, description=doc, tag_keys=tuple(tags), **kw), tags)

        self.stage = family(
            Histogram,
            "paddlex_npu_stage_seconds",
            "seconds per request in a replica, by stage: pre, model, post, other, device",
            ("device", "stage"),
            boundaries=list(LATENCY_BUCKETS),
        )
        self.device_calls = family(Counter, "paddlex_npu_device_calls", "InferSession.infer calls", ("device", "model"))
        self.device_failures = family(
            Counter, "paddlex_npu_device_call_failures", "InferSession.infer calls that raised", ("device", "model")
        )
        self.device_seconds = family(
            Histogram,
            "paddlex_npu_device_call_seconds",
            "seconds per InferSession.infer call",
            ("device", "model"),
            boundaries=list(DEVICE_BUCKETS),
        )
        self.busy = family(Gauge, "paddlex_npu_workers_busy", "replicas running a pipeline call", ("device",))
        self.ready = family(Gauge, "paddlex_npu_workers_ready", "replicas whose pipeline is loaded", ("device",))
        self.starts = family(Counter, "paddlex_npu_worker_starts", "replicas that loaded their pipeline", ("device",))


def instrument(pipeline: Any, device_id: int) -> Any:
    """``pipeline`` with its stages and device calls timed into Ray's metrics (in a Serve replica)."""
    return instrument_with(pipeline, RayMetrics(), device_id)
