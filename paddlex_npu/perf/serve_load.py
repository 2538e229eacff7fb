"""Load figures for the servers on the NPU route: ``paddlex-npu serve`` with K workers, PaddleX's own basic serving
(``paddlex --serve`` run through ``paddlex-npu paddlex`` so the route is installed) and the Triton repository of
``paddlex-npu triton-repo`` with and without dynamic batching. Each server is a real process on loopback, started
and stopped here; the load is a closed loop of C client threads, each with its own keep-alive HTTP connection,
sending the same request again as soon as the last one is answered. Returns figures; printing is the CLI's.

Every point runs a warm-up first (excluded; on the simulated device, its recording pass), then is timed for
``seconds``. A request fails when it raises, or the answer is not HTTP 200 with ``errorCode`` 0. On the simulated
device, ``unseen`` counts the replay-store entries added during the timed part (inputs never recorded, computed on
the CPU: they should be 0; dynamic batching makes new batch compositions, so every request of one model carries
the same image).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .. import envs
from ..errors import ConfigError
from ..triton.repo import OCR_MODEL, REC_MODEL, TritonOptions, build_triton_repo, tritonserver_command

Check = Callable[[int, bytes], Optional[str]]  # (status, body) -> None when the answer is a success, else why


@dataclass
class LoadPoint:
    server: str
    model: str  # "ocr" (the pipeline) or "text_recognition"
    concurrency: int
    seconds: float
    requests: int  # answered successfully in the timed part
    failed: int
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    unseen: int = 0  # simulated-device calls on inputs never recorded (replay-store entries added)
    first_failure: str = ""
    server_cpu_ms: float = 0.0  # CPU time of the server's process tree per answered request
    client_cpu_ms: float = 0.0  # CPU time of the load generator (this process) per answered request
    # Triton only, from its statistics over the timed part (0 elsewhere): requests per execution of the model,
    # and per request the time it waited in the scheduler's queue and the time of the execution it was part of
    batch_mean: float = 0.0
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    rounds_requests_per_s: List[float] = field(default_factory=list)  # with rounds: each round's (this: median)
    # on the simulated device, from :func:`device_traffic` (0 elsewhere): text lines answered per second, and the
    # bytes one request moves device to host (what the CTC reduction of ``convert`` cuts)
    lines_per_s: float = 0.0
    bytes_to_host: float = 0.0


@dataclass
class ServeLoadReport:
    runtime: str
    cores: int
    cpu: str
    load_average: Tuple[float, float]  # 1-minute load average before and after the run
    points: List[LoadPoint] = field(default_factory=list)
    # simulated device only: per model of a request, what one request moves and costs (:func:`device_traffic`)
    traffic: Dict[str, Dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class Server:
    """A server process to start: its argv and environment, the URL that answers 200 once it is ready, and how
    to ask it for one model (path, body, check)."""

    name: str
    argv: List[str]
    env: Dict[str, str]
    port: int
    ready_path: str
    kind: str  # "paddlex" (POST /ocr, PaddleX's basic-serving schema) or "triton" (KServe v2 JSON, HPS body)
    models: Tuple[str, ...] = (OCR_MODEL,)
    pid: Optional[int] = None  # set while running


# -- requests -------------------------------------------------------------------------------------------------


def _paddlex_check(status: int, body: bytes) -> Optional[str]:
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    ans = json.loads(body)
    return None if ans.get("errorCode") == 0 else f"errorCode {ans.get('errorCode')}: {ans.get('errorMsg')}"


def _triton_check(status: int, body: bytes) -> Optional[str]:
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    ans = json.loads(json.loads(body)["outputs"][0]["data"][0])
    return None if ans.get("errorCode") == 0 else f"errorCode {ans.get('errorCode')}: {ans.get('errorMsg')}"


def triton_body(payload: Dict[str, Any]) -> bytes:
    """A KServe v2 JSON inference request carrying PaddleX's HPS body: one ``input`` BYTES tensor of shape [1, 1]
    holding the basic-serving JSON request."""
    tensor = {"name": "input", "shape": [1, 1], "datatype": "BYTES", "data": [json.dumps(payload)]}
    return json.dumps({"inputs": [tensor]}).encode()


def request_for(kind: str, model: str, payload: Dict[str, Any]) -> Tuple[str, bytes, Check]:
    """(path, body, check) of one request to a server of ``kind`` for ``model``."""
    if kind == "triton":
        return f"/v2/models/{model}/infer", triton_body(payload), _triton_check
    if model != OCR_MODEL:
        raise ValueError(f"{kind} serving answers the pipeline ({OCR_MODEL}), not {model}")
    return "/ocr", json.dumps(payload).encode(), _paddlex_check


# -- the load -------------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    latencies: List[float] = field(default_factory=list)
    failed: int = 0
    first_failure: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float, why: Optional[str]) -> None:
        with self.lock:
            if why is None:
                self.latencies.append(seconds)
            else:
                self.failed += 1
                self.first_failure = self.first_failure or why


def _client(port: int, path: str, body: bytes, check: Check, deadline: float, tally: _Tally, timeout: float) -> None:
    headers = {"Content-Type": "application/json"}
    conn: Optional[http.client.HTTPConnection] = None
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            why = check(resp.status, resp.read())
        except Exception as exc:  # a failed request, whatever failed: counted, and a new connection
            why = f"{type(exc).__name__}: {exc}"
            if conn:
                conn.close()
            conn = None
        tally.add(time.perf_counter() - t0, why)
    if conn:
        conn.close()


def drive(
    port: int, path: str, body: bytes, check: Check, concurrency: int, seconds: float, timeout: float = 120.0
) -> Tuple[_Tally, float]:
    """``concurrency`` clients sending ``body`` to ``path`` for ``seconds``; (their tally, the wall time until the
    last answer)."""
    tally = _Tally()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    threads = [
        threading.Thread(target=_client, args=(port, path, body, check, deadline, tally, timeout), daemon=True)
        for _ in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally, time.perf_counter() - t0


def store_entries(store: Optional[Path]) -> int:
    """Recorded calls in a replay store (``<model>/<xx>/<digest>`` folders); 0 without a store."""
    if store is None or not store.is_dir():
        return 0
    return sum(1 for p in store.glob("*/*/*") if not p.name.startswith("."))


def tree_cpu_seconds(pid: Optional[int]) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux ``/proc``; 0 elsewhere)."""
    if pid is None:
        return 0.0
    parents: Dict[int, int] = {}
    times: Dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / tick
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, parent in parents.items() if parent == p and c not in tree]
    return sum(times.get(p, 0.0) for p in tree)


def measure(
    server: Server,
    model: str,
    payload: Dict[str, Any],
    concurrency: int,
    seconds: float,
    warmup_seconds: float,
    store: Optional[Path] = None,
) -> LoadPoint:
    """One point: warm-up (excluded), then ``seconds`` timed at ``concurrency``."""
    path, body, check = request_for(server.kind, model, payload)
    if warmup_seconds > 0:
        drive(server.port, path, body, check, concurrency, warmup_seconds)
    triton0 = triton_stats(server.port if server.kind == "triton" else None, model)
    before, server_cpu, client_cpu = store_entries(store), tree_cpu_seconds(server.pid), time.process_time()
    tally, wall = drive(server.port, path, body, check, concurrency, seconds)
    server_cpu, client_cpu = tree_cpu_seconds(server.pid) - server_cpu, time.process_time() - client_cpu
    triton = _settled(server.port if server.kind == "triton" else None, model, triton0, len(tally.latencies))
    requests = triton.get("requests", 0.0)
    lat = tally.latencies or [float("nan")]
    p50, p95 = (float(np.percentile(lat, q)) * 1000.0 for q in (50, 95))
    done = len(tally.latencies)
    per_request = 1000.0 / max(done, 1)
    return LoadPoint(
        server.name,
        model,
        concurrency,
        wall,
        done,
        tally.failed,
        done / wall,
        p50,
        p95,
        store_entries(store) - before,
        tally.first_failure,
        server_cpu * per_request,
        client_cpu * per_request,
        requests / triton["executions"] if triton.get("executions") else 0.0,
        triton.get("queue_ms", 0.0) / requests if requests else 0.0,
        triton.get("compute_ms", 0.0) / requests if requests else 0.0,
    )


def _settled(port: Optional[int], model: str, before: Dict[str, float], answered: int) -> Dict[str, float]:
    """Triton's statistics since ``before``, once they count the ``answered`` requests (Triton records a request
    just after its answer; at most 2 s)."""
    deadline = time.monotonic() + 2.0
    while True:
        delta = {k: v - before.get(k, 0.0) for k, v in triton_stats(port, model).items()}
        if not delta or delta["requests"] >= answered or time.monotonic() > deadline:
            return delta
        time.sleep(0.01)


def triton_stats(port: Optional[int], model: str) -> Dict[str, float]:
    """Triton's statistics of ``model`` (summed over versions), from its statistics API
    (``GET /v2/models/<model>/stats``, which counts each request as it ends, where its Prometheus counters
    refresh every 2 s):
    ``requests`` (successful inferences), ``executions``, ``queue_ms`` and ``compute_ms`` (summed over requests);
    empty without a port or when the server does not answer."""
    if port is None:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=5) as r:
            stats = json.loads(r.read())
    except (OSError, ValueError):
        return {}
    out = dict.fromkeys(("requests", "executions", "queue_ms", "compute_ms"), 0.0)
    for m in stats.get("model_stats", []):
        inference = m.get("inference_stats", {})
        out["requests"] += inference.get("success", {}).get("count", 0)
        out["executions"] += m.get("execution_count", 0)
        out["queue_ms"] += inference.get("queue", {}).get("ns", 0) / 1e6
        out["compute_ms"] += inference.get("compute_infer", {}).get("ns", 0) / 1e6
    return out


# -- the servers ----------------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running(server: Server, log: Path, timeout: float = 300.0) -> Iterator[Server]:
    """Start ``server``, wait until it is ready, stop it (SIGTERM, then SIGKILL after 60 s) on leaving."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(server.argv, env=server.env, stdout=out, stderr=subprocess.STDOUT)
    server.pid = proc.pid
    try:
        end = time.monotonic() + timeout
        while not _ready(server.port, server.ready_path):
            if proc.poll() is not None or time.monotonic() > end:
                why = f"exited with {proc.returncode}" if proc.poll() is not None else f"not ready in {timeout:.0f} s"
                raise RuntimeError(f"{server.name}: {why}: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        yield server
    finally:
        server.pid = None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def serve_server(pipeline_yaml: Path, workers: int, env: Dict[str, str]) -> Server:
    """``paddlex-npu serve`` with ``workers`` processes on npu:0 (``env``: the whole environment)."""
    port = free_port()
    argv = [sys.executable, "-m", "paddlex_npu.cli", "serve", str(pipeline_yaml), "--port", str(port)]
    return Server(f"serve K={workers}", argv + ["--workers", str(workers)], env, port, "/ready", "paddlex")


def paddlex_server(pipeline_yaml: Path, env: Dict[str, str]) -> Server:
    """PaddleX's own basic serving (one process, calls serialised through one worker thread) on the route."""
    port = free_port()
    hpi = repr({"backend": "om", "device_type": "npu", "device_id": 0})
    argv = [sys.executable, "-m", "paddlex_npu.cli", "paddlex", "--serve", "--pipeline", str(pipeline_yaml)]
    argv += ["--device", "npu:0", "--use_hpip", "--hpi_config", hpi, "--host", "127.0.0.1", "--port", str(port)]
    return Server("PaddleX basic serving", argv, env, port, "/health", "paddlex")


@contextlib.contextmanager
def _environ(env: Dict[str, str]) -> Iterator[None]:
    """``env`` added to this process's environment for the block, the old values back after it."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prime_recognition(model_folder: Path, line: Path, env: Dict[str, str]) -> int:
    """On the simulated device, record the recognition model's outputs for ``line`` at every batch size up to
    its ``max_batch_size`` before the server runs (``env``: the run's store), so that no batch Triton forms is
    computed on the CPU in the middle of a timed point. Returns the batch sizes primed."""
    from ..paddlex import serving as paddlex_serving
    from ..triton.model import recognition_predictor, recognition_spec

    with _environ(env):
        spec = recognition_spec(model_folder)
        predictor = recognition_predictor(spec, 0, env.get(envs.RUNTIME.name))
        try:  # decoded as a request's image is
            image = paddlex_serving.serving_utils().image_bytes_to_array(Path(line).read_bytes())
            batch = int(spec.get("batch_size", 1))
            for n in range(1, batch + 1):
                list(predictor.predict([image] * n))
            return batch
        finally:
            close = getattr(predictor, "close", None)
            if close:
                close()


TRAFFIC_KEYS = ("bytes_to_device", "bytes_to_host", "copy_ms", "device_ms", "calls")


def device_traffic(pipeline_yaml: Path, page: Path, line: Path, env: Dict[str, str]) -> Dict[str, Dict[str, float]]:
    """On the simulated device (``env``: the run's runtime and store), what one request moves and costs, measured
    in this process on the servers' pipeline: for the pipeline on ``page`` (:data:`OCR_MODEL`) and its recognition
    model on ``line`` (:data:`REC_MODEL`), the bytes host to device and device to host, the copy and device ms
    (copies included), the device calls, summed over the models, and the text lines answered (``lines``). The
    second of two runs is counted (the first records the outputs in the store, which the servers then replay)."""
    from ..paddlex.pipelines import create_on_device
    from ..run import simulated

    def counted(run: Callable[[], Any], lines: Callable[[Any], int]) -> Dict[str, float]:
        run()
        before = simulated.model_stats()
        result = run()
        after = simulated.model_stats()
        moved = dict.fromkeys(TRAFFIC_KEYS, 0.0)
        names = {"bytes_to_device": "bytes_in", "bytes_to_host": "bytes_out", "copy_ms": "transfer_ms"}
        for model, m in after.items():
            for key in TRAFFIC_KEYS:
                name = names.get(key, key)
                moved[key] += m.get(name, 0.0) - before.get(model, {}).get(name, 0.0)
        return {**moved, "lines": float(lines(result))}

    with _environ(env):
        pipeline = create_on_device(str(pipeline_yaml), 0)
        try:
            return {
                OCR_MODEL: counted(lambda: next(iter(pipeline.predict(str(page)))), lambda r: len(r["rec_texts"])),
                REC_MODEL: counted(lambda: next(iter(pipeline.text_rec_model.predict(str(line)))), lambda r: 1),
            }
        finally:
            close = getattr(pipeline, "close", None)
            if callable(close):
                close()


def triton_server(
    pipeline_yaml: Path, workdir: Path, options: TritonOptions, env: Dict[str, str], line: Optional[Path] = None
) -> Server:
    """A repository for ``options`` written under ``workdir`` and the tritonserver command on it (``env``: added
    to the command's own environment, which puts this venv first on ``PATH`` for the Python backend); with
    ``line`` on the simulated device, its recognition batches primed (:func:`prime_recognition`)."""
    batching = "dynamic batching" if options.dynamic_batching else "no batching"
    name = f"Triton, {batching}, {options.instances} instance(s)"
    repo = build_triton_repo(pipeline_yaml, workdir / "repo", options)
    if line is not None and env.get(envs.RUNTIME.name) == "simulated":
        prime_recognition(next(m.folder for m in repo.models if m.name == REC_MODEL), line, env)
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    argv, triton_env = tritonserver_command(
        repo.root, workdir / "work", http_port, grpc_port, metrics_port, host="127.0.0.1"
    )
    triton_env.update(env)
    return Server(name, argv, triton_env, http_port, "/v2/health/ready", "triton", (REC_MODEL, OCR_MODEL))


def ocr_packages(root: Path, out: Path, det: str, rec: str, reduce: bool = True, device_normalise: bool = True) -> Path:
    """A folder ``out`` of OM packages for the OCR pipeline from the bundled model folders of ``root``
    (:func:`~..samples.assets.build_model_folders`), both converted by ``convert`` (no ATC): ``det`` and ``rec``
    taking 8-bit pixels normalised on the device, or with ``device_normalise=False`` float32 as bundled (``convert
    --no-device-normalise``); ``rec`` with its CTC output reduced on the device, or with ``reduce=False`` not
    (``convert --no-reduce``)."""
    from ..build.convert import convert

    out = Path(out)
    if out.exists() and any(out.iterdir()):  # never replace what is there: it may be the user's
        raise ConfigError(f"{out} is not empty: the OCR packages go into a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    if device_normalise:
        convert(Path(root) / "om" / det, out / det, "Ascend310P3", "dymshape", run=False)
    else:
        shutil.copytree(Path(root) / "om" / det, out / det)
    convert(
        Path(root) / "om" / rec,
        out / rec,
        "Ascend310P3",
        "dymshape",
        run=False,
        reduce=reduce,
        device_normalise=device_normalise,
    )
    return out


# -- the plan -------------------------------------------------------------------------------------------------


@dataclass
class LoadPlan:
    concurrency: Sequence[int] = (1, 4, 16)
    seconds: float = 15.0  # timed part of each point
    warmup_seconds: float = 3.0  # before each point, excluded (the simulated device records here)
    soak_seconds: float = 0.0  # > 0: the highest concurrency of the target cases runs this long instead
    serve_workers: Sequence[int] = (1, 2)
    paddlex_basic: bool = True
    triton_batching: Sequence[bool] = (True, False)
    triton_instances: int = 1
    max_queue_delay_us: int = 2000
    runtime: str = "simulated"
    rounds: int = 1  # > 1: every server started at once, the points timed in that many interleaved rounds

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {self.rounds}")


def _servers(
    plan: LoadPlan, pipeline_yaml: Path, workdir: Path, extra: Dict[str, str], line: Optional[Path] = None
) -> List[Tuple[Server, set]]:
    """The servers of the plan, each with the models whose top concurrency is a soak (the issue's targets:
    recognition with dynamic batching, ``serve`` with the most workers)."""
    env = {**os.environ, **extra}
    out: List[Tuple[Server, set]] = []
    for batching in plan.triton_batching:
        options = TritonOptions(
            instances=plan.triton_instances, dynamic_batching=batching, max_queue_delay_us=plan.max_queue_delay_us
        )
        folder = workdir / ("triton-batching" if batching else "triton-no-batching")
        server = triton_server(pipeline_yaml, folder, options, extra, line)
        out.append((server, {REC_MODEL} if batching else set()))
    for k in plan.serve_workers:
        out.append((serve_server(pipeline_yaml, k, env), {OCR_MODEL} if k == max(plan.serve_workers) else set()))
    if plan.paddlex_basic:
        out.append((paddlex_server(pipeline_yaml, env), set()))
    return out


def run_serve_load(
    pipeline_yaml: Path,
    page: Path,
    line: Path,
    plan: Optional[LoadPlan] = None,
    workdir: Optional[Path] = None,
    store: Optional[Path] = None,
    on_point: Optional[Callable[[LoadPoint], None]] = None,
) -> ServeLoadReport:
    """Every server of ``plan`` in turn, on ``pipeline_yaml`` (an OCR pipeline): the OCR pipeline on ``page``
    and, on Triton, the recognition model on ``line`` (one text line), at each concurrency. With
    ``plan.rounds`` > 1 all servers run at once and every point is timed in that many interleaved rounds (server
    after server, then again), each reporting its median round: a slow spell of a shared machine then falls on
    every server alike.

    The simulated device gets a lock folder of its own (other runs on this machine would share npu:0) and the
    replay store ``store`` (default: a new folder under ``workdir``, so ``unseen`` counts this run's misses)."""
    import base64

    from .benchmark import _cpu_name

    plan = plan or LoadPlan()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="paddlex-npu-serve-load-"))
    store = Path(store or workdir / "sim-store")
    extra = {
        envs.RUNTIME.name: plan.runtime,
        envs.SIM_STORE.name: str(store),
        envs.SIM_LOCKS.name: str(workdir / "sim-locks"),
        "PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK": "True",
    }
    payloads = {
        OCR_MODEL: {"file": base64.b64encode(Path(page).read_bytes()).decode(), "fileType": 1, "visualize": False},
        REC_MODEL: {"file": base64.b64encode(Path(line).read_bytes()).decode()},
    }
    load0 = os.getloadavg()[0]
    report = ServeLoadReport(plan.runtime, os.cpu_count() or 1, _cpu_name(), (load0, load0))
    top = max(plan.concurrency)
    if plan.runtime == "simulated":
        report.traffic = device_traffic(Path(pipeline_yaml), Path(page), Path(line), extra)
    servers = _servers(plan, Path(pipeline_yaml), workdir, extra, Path(line))
    rounds: Dict[Tuple[str, str, int], List[LoadPoint]] = {}
    with contextlib.ExitStack() as stack:  # with rounds, every server runs at once (idle but for its turn)
        for r in range(plan.rounds):
            for i, (server, soaked) in enumerate(servers):
                if r == 0:
                    if plan.rounds == 1 and i > 0:  # one round: one server at a time, as few processes as can be
                        stack.close()
                    stack.enter_context(running(server, workdir / f"server{i}.log"))
                for model in server.models:
                    for c in plan.concurrency:
                        soak = plan.soak_seconds > 0 and c == top and model in soaked
                        seconds = plan.soak_seconds if soak else plan.seconds
                        point = measure(server, model, payloads[model], c, seconds, plan.warmup_seconds, store)
                        rounds.setdefault((server.name, model, c), []).append(point)
                        if on_point:
                            on_point(point)
    report.points = _median_points(rounds, report.traffic)
    report.load_average = (load0, os.getloadavg()[0])
    return report


def _median_points(
    rounds: Dict[Tuple[str, str, int], List[LoadPoint]], traffic: Dict[str, Dict[str, float]]
) -> List[LoadPoint]:
    """Each point's median round, with its lines/s and bytes to the host from the device ``traffic``."""
    from .benchmark import median_round

    out = []
    for points in rounds.values():
        median = median_round(points, lambda p: p.requests_per_s)
        median.rounds_requests_per_s = [p.requests_per_s for p in points]
        moved = traffic.get(median.model, {})
        median.lines_per_s = median.requests_per_s * moved.get("lines", 0.0)
        median.bytes_to_host = moved.get("bytes_to_host", 0.0)
        out.append(median)
    return out


def parse_servers(spec: str) -> Dict[str, Any]:
    """``triton-batching,triton-no-batching,serve-1,serve-2,paddlex`` -> the :class:`LoadPlan` fields."""
    fields: Dict[str, Any] = {"serve_workers": [], "paddlex_basic": False, "triton_batching": []}
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        if token in ("triton-batching", "triton-no-batching"):
            fields["triton_batching"].append(token == "triton-batching")
        elif token.startswith("serve-") and token[6:].isdigit() and int(token[6:]) > 0:
            fields["serve_workers"].append(int(token[6:]))
        elif token == "paddlex":
            fields["paddlex_basic"] = True
        else:
            raise ValueError(f"unknown server {token!r}: triton-batching, triton-no-batching, serve-K, paddlex")
    return fields


def _top(report: ServeLoadReport, server: str, model: str) -> Optional[LoadPoint]:
    points = [p for p in report.points if p.server.startswith(server) and p.model == model]
    return max(points, key=lambda p: p.concurrency, default=None)


def targets(report: ServeLoadReport) -> Dict[str, Optional[float]]:
    """The issue's ratios at the highest concurrency (None when a side was not run): recognition on Triton with
    dynamic batching over without (target >= 2), ``serve`` with the most workers over PaddleX's basic serving on
    the OCR pipeline (target >= 1.6), ``serve`` with one worker over it (target >= 1); and the failed requests
    over the whole run (target 0)."""

    def ratio(a: Optional[LoadPoint], b: Optional[LoadPoint]) -> Optional[float]:
        return a.requests_per_s / b.requests_per_s if a and b and b.requests_per_s > 0 else None

    serves = [p for p in report.points if p.server.startswith("serve K=")]
    best_k = max((int(p.server.split("=")[1]) for p in serves), default=None)
    batched, unbatched = _top(report, "Triton, dynamic", REC_MODEL), _top(report, "Triton, no", REC_MODEL)
    return {
        "batching_speedup_rec": ratio(batched, unbatched),
        "serve_over_paddlex_ocr": ratio(
            _top(report, f"serve K={best_k}", OCR_MODEL) if best_k else None, _top(report, "PaddleX", OCR_MODEL)
        ),
        "serve_k1_over_paddlex_ocr": ratio(_top(report, "serve K=1", OCR_MODEL), _top(report, "PaddleX", OCR_MODEL)),
        "failed": float(sum(p.failed for p in report.points)),
    }
