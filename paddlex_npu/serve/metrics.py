"""Prometheus metrics of ``paddlex-npu serve``, answered at ``/metrics`` (the text exposition format).

The server and its worker processes count in prometheus-client's multiprocess mode: :func:`start` makes a fresh
folder for this server and sets ``PROMETHEUS_MULTIPROC_DIR`` before any worker starts (spawned workers inherit
it); every process writes its own files there; ``/metrics`` merges them (``MultiProcessCollector``) and adds
what only the server knows (workers configured, restarts, requests waiting for a worker). :func:`stop` removes
the folder. How the worker pool is built does not matter: a worker calls :func:`instrument_worker` on its
pipeline once it is loaded, and counts from then on.

Series (all prefixed ``paddlex_npu_``):

- ``requests_total{path,status,category}``: answered requests; category the ``metrics label`` of the reply row
  the request was answered with (:data:`paddlex_npu.errors.REPLIES`; ``docs/monitoring.md`` lists them);
- ``request_duration_seconds{path}``: latency histogram, from the first byte read to the last byte sent;
- ``requests_in_flight``, ``requests_queued`` (in flight and not in a worker's ``predict``: decoding, waiting
  for a worker, encoding the answer);
- ``stage_seconds{device,stage}``: per request in a worker, ``pre`` / ``model`` / ``post`` (each predictor's
  pre-processing, model calls, post-processing: :mod:`paddlex_npu.paddlex.stages`), ``other`` (the pipeline's
  own work between its predictors) and ``device`` (the session calls within it);
- ``device_calls_total{device,model}``, ``device_call_failures_total{device,model}``,
  ``device_call_seconds{device,model}``: each ``InferSession.infer`` (copies in, execution, copies out);
- ``url_fetches_total{outcome}``: URL inputs (:mod:`.fetch`), by outcome: ``ok``, ``off`` (URL inputs are not
  allowed), ``scheme``, ``host``, ``address``, ``redirects``, ``status``, ``too_large``, ``pixels``, ``timeout``,
  ``error``; ``unauthorized_total{scope}``: requests refused 401 (:mod:`.auth`), ``api`` or ``metrics``;
- ``workers_configured{device}``, ``workers_ready{device}`` (pipeline loaded and warmed up), ``workers_busy``,
  ``worker_starts_total{device}``, ``worker_restarts_total{device}`` (starts beyond the configured workers),
  ``warmed_up`` (1 once every configured worker is ready);
- ``device_memory_bytes{device,worker}`` (what the simulated device accounts to the worker),
  ``device_memory_used_bytes{device,worker}`` and ``device_memory_total_bytes{device,worker}`` (its device's,
  every process on it, as ACL reports them after each request).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, Tuple

from ..errors import REPLIES, ConfigError

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
DEVICE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STAGES = ("pre", "model", "post", "other", "device")


@dataclass(frozen=True)
class WorkerSeries:
    """One series a worker writes (serve's worker processes and Ray Serve replicas alike)."""

    attr: str  # the attribute of the metrics object instrument_with writes to
    kind: Literal["counter", "gauge", "histogram"]
    name: str
    doc: str
    labels: Tuple[str, ...]
    buckets: Tuple[float, ...] = ()


# The one home of the worker-side series: _Metrics makes them prometheus_client metrics, ray/metrics Ray's.
WORKER_SERIES = (
    WorkerSeries(
        "stage",
        "histogram",
        "paddlex_npu_stage_seconds",
        "seconds per request in a worker, by stage: pre, model, post (the predictors'), other (the pipeline's own "
        "work), device (its session calls)",
        ("device", "stage"),
        LATENCY_BUCKETS,
    ),
    WorkerSeries(
        "device_calls", "counter", "paddlex_npu_device_calls", "InferSession.infer calls", ("device", "model")
    ),
    WorkerSeries(
        "device_failures",
        "counter",
        "paddlex_npu_device_call_failures",
        "InferSession.infer calls that raised",
        ("device", "model"),
    ),
    WorkerSeries(
        "device_seconds",
        "histogram",
        "paddlex_npu_device_call_seconds",
        "seconds per InferSession.infer call (copies in, execution, copies out)",
        ("device", "model"),
        DEVICE_BUCKETS,
    ),
    WorkerSeries("busy", "gauge", "paddlex_npu_workers_busy", "workers running a pipeline call", ("device",)),
    WorkerSeries(
        "ready", "gauge", "paddlex_npu_workers_ready", "workers whose pipeline is loaded and warmed up", ("device",)
    ),
    WorkerSeries("starts", "counter", "paddlex_npu_worker_starts", "workers that loaded their pipeline", ("device",)),
    WorkerSeries(
        "device_memory",
        "gauge",
        "paddlex_npu_device_memory_bytes",
        "device memory a worker holds between calls (the simulated device's accounting of ais_bench's allocations; "
        "not set on an NPU, where `npu-smi info` lists it per process)",
        ("device", "worker"),
    ),
    WorkerSeries(
        "device_memory_used",
        "gauge",
        "paddlex_npu_device_memory_used_bytes",
        "device memory in use on the worker's device, every process on it, as ACL reports it (aclrtGetMemInfo: "
        "total - free of HBM, else DDR), read after each request",
        ("device", "worker"),
    ),
    WorkerSeries(
        "device_memory_total",
        "gauge",
        "paddlex_npu_device_memory_total_bytes",
        "device memory of the worker's device available to applications, as ACL reports it (aclrtGetMemInfo)",
        ("device", "worker"),
    ),
)


class _Metrics:
    """The metric objects of one process (created once the multiprocess folder is set)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram, values

        values.ValueClass = values.get_value_class()  # chosen at import: choose again now the folder is set
        self.requests = Counter(
            "paddlex_npu_requests",
            "HTTP requests answered, by path, status and error category",
            ["path", "status", "category"],
            registry=None,
        )
        self.latency = Histogram(
            "paddlex_npu_request_duration_seconds",
            "HTTP request latency, first byte read to last byte sent",
            ["path"],
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.in_flight = Gauge(
            "paddlex_npu_requests_in_flight", "HTTP requests in progress", multiprocess_mode="livesum", registry=None
        )
        kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
        for s in WORKER_SERIES:  # gauges summed over the live worker processes
            extra = {"buckets": s.buckets} if s.kind == "histogram" else {}
            extra.update({"multiprocess_mode": "livesum"} if s.kind == "gauge" else {})
            setattr(self, s.attr, kinds[s.kind](s.name, s.doc, s.labels, registry=None, **extra))
        self.url_fetches = Counter(
            "paddlex_npu_url_fetches", "URL inputs, by outcome (ok, or why refused)", ["outcome"], registry=None
        )
        self.unauthorized = Counter(
            "paddlex_npu_unauthorized", "requests refused 401 (no or a wrong bearer token)", ["scope"], registry=None
        )


_METRICS: Optional[_Metrics] = None
_METRICS_FOLDER: Optional[str] = None  # the folder _METRICS writes to
_METRICS_LOCK = threading.Lock()


def _metrics() -> Optional[_Metrics]:
    """This process's metrics, or None outside a server (no multiprocess folder: nothing is counted)."""
    global _METRICS, _METRICS_FOLDER
    folder = os.environ.get(MULTIPROC_ENV)
    if _METRICS is not None and folder == _METRICS_FOLDER:  # the common case: no file-system call per request
        return _METRICS
    if not folder or not os.path.isdir(folder):
        return None
    with _METRICS_LOCK:
        if _METRICS is None or folder != _METRICS_FOLDER:
            _METRICS, _METRICS_FOLDER = _Metrics(), folder
        return _METRICS


# ---- the server (parent) ---------------------------------------------------------------------------------------


@dataclass
class MetricsStore:
    """The multiprocess folder of one server, and what the server knows that its workers do not."""

    path: Path
    workers: Dict[str, int]  # device -> configured workers
    closed: bool = False


_STORE: Optional[MetricsStore] = None


def start(devices: Sequence[int], workers_per_device: int) -> MetricsStore:
    """A fresh multiprocess folder for this server, set in the environment before the workers start."""
    global _STORE, _METRICS
    try:
        import prometheus_client  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"paddlex-npu serve answers /metrics with prometheus-client, which is not installed ({exc}): "
            "pip install prometheus-client (or the paddlex-npu[serving] extra)"
        ) from exc
    path = Path(tempfile.mkdtemp(prefix="paddlex-npu-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    with _METRICS_LOCK:
        _METRICS = None  # a previous server's objects write to a removed folder
    _STORE = MetricsStore(path, {str(d): workers_per_device for d in devices})
    return _STORE


def stop(store: Optional[MetricsStore] = None) -> None:
    """Remove the server's folder (idempotent)."""
    global _STORE, _METRICS
    store = store or _STORE
    if store is None or store.closed:
        return
    store.closed = True
    if os.environ.get(MULTIPROC_ENV) == str(store.path):
        del os.environ[MULTIPROC_ENV]
    with _METRICS_LOCK:
        _METRICS = None
    shutil.rmtree(store.path, ignore_errors=True)
    if _STORE is store:
        _STORE = None


def request_started() -> None:
    m = _metrics()
    if m is not None:
        m.in_flight.inc()


def request_finished(path: str, status: int, category: str, seconds: float) -> None:
    m = _metrics()
    if m is not None:
        m.in_flight.dec()
        m.requests.labels(path, str(status), category).inc()
        m.latency.labels(path).observe(seconds)


def url_fetched(outcome: str) -> None:
    m = _metrics()
    if m is not None:
        m.url_fetches.labels(outcome).inc()


def unauthorized(scope: str) -> None:
    m = _metrics()
    if m is not None:
        m.unauthorized.labels(scope).inc()


_LIVE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db$")


def _forget_dead_processes(path: Path) -> None:
    """Drop the live gauges of processes that are gone (a worker that died or was replaced)."""
    from prometheus_client import multiprocess

    pids = {int(m.group(1)) for f in glob.glob(str(path / "gauge_live*.db")) if (m := _LIVE_FILE.search(f))}
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, str(path))
        except PermissionError:
            pass


class _ServeCollector:
    """The merged multiprocess metrics, plus the series derived from them and the server's configuration."""

    def __init__(self, store: MetricsStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
        from prometheus_client.multiprocess import MultiProcessCollector

        from ..version import __version__

        _forget_dead_processes(self.store.path)
        families = list(MultiProcessCollector(None, str(self.store.path)).collect())
        yield from families
        by_device: Dict[str, Dict[str, float]] = {}
        in_flight = 0.0
        for family in families:
            for sample in family.samples:
                if sample.name == "paddlex_npu_requests_in_flight":
                    in_flight += sample.value
                elif sample.name in ("paddlex_npu_workers_busy", "paddlex_npu_workers_ready"):
                    key = sample.name.rsplit("_", 1)[1]
                    values = by_device.setdefault(sample.labels.get("device", ""), {})
                    values[key] = values.get(key, 0.0) + sample.value
                elif sample.name == "paddlex_npu_worker_starts_total":
                    values = by_device.setdefault(sample.labels.get("device", ""), {})
                    values["starts"] = values.get("starts", 0.0) + sample.value
        configured = GaugeMetricFamily(
            "paddlex_npu_workers_configured", "worker processes the server runs per device", labels=["device"]
        )
        restarts = CounterMetricFamily(
            "paddlex_npu_worker_restarts", "workers started beyond the configured ones", labels=["device"]
        )
        warm = 1.0
        for device, count in sorted(self.store.workers.items()):
            seen = by_device.get(device, {})
            configured.add_metric([device], count)
            restarts.add_metric([device], max(0.0, seen.get("starts", 0.0) - count))
            warm = warm if seen.get("ready", 0.0) >= count else 0.0
        busy = sum(v.get("busy", 0.0) for v in by_device.values())
        yield InfoMetricFamily("paddlex_npu_build", "the paddlex-npu version serving", {"version": __version__})
        yield configured
        yield restarts
        yield GaugeMetricFamily(
            "paddlex_npu_warmed_up", "1 once every configured worker has loaded and warmed up its pipeline", warm
        )
        yield GaugeMetricFamily(
            "paddlex_npu_requests_queued",
            "requests in flight and not in a worker's pipeline call (decoding, waiting for a worker, encoding)",
            max(0.0, in_flight - busy),
        )


def exposition(accept: str = "") -> Tuple[int, bytes, str]:
    """(status, body, content type) of ``/metrics``: the text format, or OpenMetrics when asked for."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    store = _STORE
    if store is None or store.closed or not store.path.is_dir():
        off = b"metrics are not available: the server is not running or is shutting down\n"
        return REPLIES["not_ready"].status, off, "text/plain"
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ServeCollector(store))
    encoder, content_type = choose_encoder(accept)
    return REPLIES["ok"].status, encoder(registry), content_type


# ---- the workers ----------------------------------------------------------------------------------------------


def _om_runners(root: Any, depth: int = 6) -> List[Any]:
    """The OM runners reachable from a pipeline through attributes, lists and dicts."""
    from ..run.runner import OMRunner

    found, seen, frontier = [], set(), [root]
    for _ in range(depth):
        nxt: List[Any] = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)):
                continue
            seen.add(id(obj))
            if isinstance(obj, OMRunner):
                found.append(obj)
                continue
            if isinstance(obj, dict):
                nxt += list(obj.values())
            elif isinstance(obj, (list, tuple)):
                nxt += list(obj)
            elif hasattr(obj, "__dict__"):
                nxt += list(vars(obj).values())
        frontier = nxt
    return found


def _time_session_calls(runner: Any, m: _Metrics, device: str, spent: List[float]) -> None:
    """Count and time every ``infer`` call of this runner's session (the device calls)."""
    session = runner.session
    original = session.infer
    model = str(runner.name)
    calls, failures = m.device_calls.labels(device, model), m.device_failures.labels(device, model)
    seconds = m.device_seconds.labels(device, model)

    def infer(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        except BaseException:
            failures.inc()
            raise
        finally:
            took = time.perf_counter() - start
            calls.inc()
            seconds.observe(took)
            spent[0] += took

    session.infer = infer


def _device_memory(gauges: Tuple[Any, Any, Any]) -> None:
    """This worker's device memory (where the simulated device accounts it) and its device's memory in use and
    in all, as ACL answers on this thread (:mod:`paddlex_npu.run.acl_memory`), into ``gauges``."""
    from ..run.acl_memory import memory_in_use, process_acl

    own, used, total = gauges
    simulated = sys.modules.get("paddlex_npu.run.simulated")
    if simulated is not None:
        own.set(simulated.stats()["device_bytes"])
    answer = memory_in_use(process_acl())
    if answer is not None:
        used.set(answer[0])
        total.set(answer[1])


def instrument_worker(pipeline: Any, device_id: int) -> Any:
    """In a worker process of a server, once its pipeline is loaded (and warmed up): count this worker ready,
    and time each ``pipeline.predict`` by stage and every device call. Outside a server (no multiprocess
    folder) the pipeline is returned untouched."""
    m = _metrics()
    return pipeline if m is None else instrument_with(pipeline, m, device_id)


def instrument_with(pipeline: Any, m: Any, device_id: int) -> Any:
    """:func:`instrument_worker` into the metric families ``m`` (:class:`_Metrics`, or another sink with the same
    families and ``labels``, such as Ray's metrics in a Serve replica)."""
    from ..paddlex.stages import instrument

    device = str(device_id)
    spent = [0.0]  # device seconds so far, in this process
    for runner in _om_runners(pipeline):
        _time_session_calls(runner, m, device, spent)
    clock = instrument(pipeline)
    original = pipeline.predict
    busy = m.busy.labels(device)
    stage = {name: m.stage.labels(device, name) for name in STAGES}
    worker = str(os.getpid())
    memory = tuple(g.labels(device, worker) for g in (m.device_memory, m.device_memory_used, m.device_memory_total))
    _device_memory(memory)

    def predict(*args: Any, **kwargs: Any) -> Iterator[Any]:
        busy.inc()
        start, before, device_before = time.perf_counter(), clock.totals(), spent[0]
        try:
            yield from original(*args, **kwargs)
        finally:
            busy.dec()
            total = time.perf_counter() - start
            after = clock.totals()
            parts = {k.split("_")[0]: after[k] - before[k] for k in after}  # pre, model, post
            for name, value in parts.items():
                stage[name].observe(value)
            stage["other"].observe(max(0.0, total - sum(parts.values())))
            stage["device"].observe(spent[0] - device_before)
            _device_memory(memory)

    pipeline.predict = predict
    m.starts.labels(device).inc()
    m.ready.labels(device).set(1)
    return pipeline
