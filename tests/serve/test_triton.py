"""The real tritonserver (nvidia-pytriton's binary and Python backend) on a repository written by
``paddlex-npu triton-repo``: queried over HTTP and gRPC with tritonclient, answers equal the in-process pipeline's."""

from __future__ import annotations

import base64
import http.client
import json
import signal
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from paddlex_npu.perf.serve_load import triton_body
from paddlex_npu.triton.repo import TritonOptions, build_triton_repo, tritonserver_command
from tests.helpers import REC_DIMS_GEARS, om_package
from tests.serve.conftest import (
    children,
    start_tritonserver,
    stop,
    wait_busy,
    wait_for_tritonserver,
)

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")


def _input(mod, body):
    inp = mod.InferInput("input", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[json.dumps(body).encode()]], dtype=np.object_))
    return inp


def _ask(client, mod, model, body):
    return json.loads(client.infer(model, [_input(mod, body)]).as_numpy("output")[0, 0])


def _ask_once(new_client, body):
    client = new_client()
    try:
        return _ask(client, httpclient, "text_recognition", body)
    finally:
        client.close()


def _b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def triton(pipeline_yaml, tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    repo = build_triton_repo(
        pipeline_yaml, root / "repo", TritonOptions(runtime="reference", max_queue_delay_us=50_000, rec_max_batch=6)
    )
    server = start_tritonserver(repo.root, root)
    proc, log, http, grpc, metrics = server

    def new_http():
        return httpclient.InferenceServerClient(f"127.0.0.1:{http}", network_timeout=120.0)

    client = new_http()
    wait_for_tritonserver(server, client)
    clients = {"http": client, "grpc": grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")}
    try:
        yield {
            **clients,
            "new_http": new_http,
            "repo": repo,
            "proc": proc,
            "log": log,
            "http_port": http,
            "metrics_port": metrics,
        }
    finally:
        for c in clients.values():
            c.close()  # open connections would hold Triton's shutdown for its exit timeout
        assert stop(proc) == 0, log.read_text(errors="replace")[-3000:]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ocr_model_answers_like_the_in_process_pipeline(triton, npu_pipeline, images, protocol):
    mod = httpclient if protocol == "http" else grpcclient
    for key in ("english", "page"):
        ans = _ask(triton[protocol], mod, "ocr", {"file": _b64(images[key]), "fileType": 1, "logId": key})
        assert ans["errorCode"] == 0 and ans["logId"] == key, ans
        (ours,) = ans["result"]["ocrResults"]
        (theirs,) = list(npu_pipeline.predict(str(images[key])))
        got = ours["prunedResult"]
        assert got["rec_texts"] == list(theirs["rec_texts"])
        np.testing.assert_allclose(got["rec_scores"], theirs["rec_scores"], atol=1e-5)
        np.testing.assert_array_equal(got["rec_boxes"], np.asarray(theirs["rec_boxes"]))
        assert ans["result"]["dataInfo"]["type"] == "image"


def test_recognition_model_batches_concurrent_requests(triton, npu_pipeline, images):
    import cv2

    page = cv2.imread(str(images["page"]))
    (theirs,) = list(npu_pipeline.predict(str(images["page"])))
    crops = [page[y0:y1, x0:x1] for x0, y0, x1, y1 in theirs["rec_boxes"]]
    expected = [r["rec_text"] for r in npu_pipeline.text_rec_model.predict(crops)]
    lines = [cv2.imencode(".png", c)[1].tobytes() for c in crops]
    bodies = [{"file": base64.b64encode(b).decode(), "logId": str(i)} for i, b in enumerate(lines * 3)]
    before = triton["http"].get_inference_statistics("text_recognition")["model_stats"][0]
    with ThreadPoolExecutor(len(bodies)) as pool:
        # one client per request: tritonclient's HTTP client is not thread-safe
        answers = list(pool.map(lambda b: _ask_once(triton["new_http"], b), bodies))
    texts = [a["result"]["prunedResult"]["rec_text"] for a in answers]
    assert [a["logId"] for a in answers] == [b["logId"] for b in bodies]
    assert texts == expected * 3 and len(expected) == 4
    deadline = time.monotonic() + 20  # Triton updates its statistics after the responses: wait for them
    while True:
        after = triton["http"].get_inference_statistics("text_recognition")["model_stats"][0]
        inferences = after["inference_count"] - before["inference_count"]
        executions = after["execution_count"] - before["execution_count"]
        if inferences >= len(bodies) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert inferences == len(bodies) and executions < inferences, (inferences, executions)


def test_recognition_answers_convert_results_without_paddlex_deep_copy(npu_pipeline, images):
    """``pruned`` reads a text line's result without PaddleX's deep copy of its image and font: the same JSON."""
    import cv2
    from paddlex.inference.serving.basic_serving._pipeline_apps._common.common import prune_result

    from paddlex_npu.paddlex.serving import plain as _plain
    from paddlex_npu.paddlex.serving import pruned

    (result,) = list(npu_pipeline.text_rec_model.predict([cv2.imread(str(images["english"]))]))
    assert _plain(result) and pruned(result) == prune_result(result.json["res"])
    assert set(pruned(result)) == {"rec_text", "rec_score"} and pruned(result)["rec_text"]


def test_statistics_api_counts_each_request_at_once(triton, images):
    """The load benchmark's figures of Triton (requests per execution, queue and compute time) come from its
    statistics API, which counts a request as it ends (just after its answer: bounded wait), where its
    Prometheus counters refresh every 2 s."""
    from paddlex_npu.perf.serve_load import triton_stats

    before = triton_stats(triton["http_port"], "text_recognition")
    ans = _ask(triton["http"], httpclient, "text_recognition", {"file": _b64(images["english"])})
    assert ans["errorCode"] == 0, ans
    deadline = time.monotonic() + 5
    while (after := triton_stats(triton["http_port"], "text_recognition"))["requests"] == before["requests"]:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert after["requests"] == before["requests"] + 1 and after["executions"] == before["executions"] + 1
    assert after["compute_ms"] > before["compute_ms"] and after["queue_ms"] >= before["queue_ms"]
    assert triton_stats(None, "text_recognition") == {}


@pytest.mark.parametrize(
    "body, status",
    [
        ({"file": base64.b64encode(b"not an image").decode(), "fileType": 1}, 422),
        ({"fileType": 1}, 422),
        ({"file": "", "fileType": 1}, 422),
        ("", 422),
    ],
    ids=["non-image", "missing-field", "empty-file", "empty-body"],
)
def test_bad_requests_answer_4xx_and_the_server_keeps_serving(triton, images, body, status):
    client = triton["grpc"]
    if body == "":
        inp = grpcclient.InferInput("input", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b""]], dtype=np.object_))
        ans = json.loads(client.infer("ocr", [inp]).as_numpy("output")[0, 0])
    else:
        ans = _ask(client, grpcclient, "ocr", body)
    assert ans["errorCode"] == status and ans["errorMsg"], ans
    ok = _ask(client, grpcclient, "ocr", {"file": _b64(images["english"]), "fileType": 1})
    assert ok["errorCode"] == 0


def test_repository_layout(triton, asset_root, pipeline_yaml, tmp_path):
    config = (triton["repo"].root / "ocr" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "dynamic_batching" in config and "model_warmup" in config
    assert 'name: "npu0" count: 1 kind: KIND_CPU' in config and "latest: { num_versions: 1 }" in config
    # preferred batch sizes from the OM's batch gears; two devices; a second run adds version 2
    import yaml

    cfg = yaml.safe_load(pipeline_yaml.read_text())
    cfg["SubModules"]["TextRecognition"]["model_dir"] = str(
        om_package(asset_root, "PP-OCRv4_mobile_rec", tmp_path / "om", REC_DIMS_GEARS)
    )
    path = tmp_path / "ocr.yaml"
    path.write_text(yaml.safe_dump(cfg))
    options = TritonOptions(devices=(0, 1), instances=2, keep_versions=2)
    first = build_triton_repo(path, tmp_path / "repo", options)
    second = build_triton_repo(path, tmp_path / "repo", options)
    rec = (tmp_path / "repo" / "text_recognition" / "config.pbtxt").read_text()
    assert "preferred_batch_size: [ 6 ]" in rec and "max_batch_size: 6" in rec
    assert 'name: "npu1" count: 2' in rec and "num_versions: 2" in rec
    assert [m.version for m in first.models] == [1, 1] and [m.version for m in second.models] == [2, 2]


def test_recognition_batch_on_a_dymshape_om(asset_root, tmp_path):
    """max_batch_size of the recognition model on a dymshape OM: 16 when its batch is unbounded, the top of its
    batch range below that; the YAML's batch_size without a manifest."""
    import json
    import shutil

    from paddlex_npu.om.manifest import MANIFEST_NAME
    from paddlex_npu.triton.repo import DYMSHAPE_REC_MAX_BATCH, rec_batch_limit

    package = asset_root / "om" / "PP-OCRv4_mobile_rec"
    assert rec_batch_limit(package, 6) == DYMSHAPE_REC_MAX_BATCH == 16
    bounded = tmp_path / "bounded"
    bounded.mkdir()
    manifest = json.loads((package / MANIFEST_NAME).read_text())
    manifest["inputs"][0]["range"] = [[1, 8], [3, 3], [48, 48], [8, 3200]]
    (bounded / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert rec_batch_limit(bounded, 6) == 8
    shutil.copytree(package, tmp_path / "plain", ignore=shutil.ignore_patterns(MANIFEST_NAME))
    assert rec_batch_limit(tmp_path / "plain", 6) == 6


def test_pixel_check_reads_a_png_size_from_its_header(images):
    """The pixel guard reads a PNG's size from its IHDR chunk, the same size Pillow reads."""
    from PIL import Image

    from paddlex_npu.serve.images import _image_sizes

    raw = images["english"].read_bytes()
    assert raw[:4] == b"\x89PNG" and _image_sizes(raw, 1) == [Image.open(images["english"]).size]


def _post(port: int, path: str, body: bytes, ctype: str = "application/json", timeout: float = 120):
    """(HTTP status, answer) of a raw POST to Triton's HTTP endpoint. The answer is its JSON, or, when Triton
    answers in its binary tensor format (``Inference-Header-Content-Length``), the JSON of the one BYTES output
    element (PaddleX's HPS answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": ctype})
        resp = conn.getresponse()
        raw = resp.read()
        header = resp.getheader("Inference-Header-Content-Length")
        if header is None:
            return resp.status, json.loads(raw or b"null")
        (size,) = struct.unpack("<I", raw[int(header) : int(header) + 4])
        return resp.status, {"hps": json.loads(raw[int(header) + 4 : int(header) + 4 + size])}
    finally:
        conn.close()


def _ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/v2/health/ready")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _hps_answer(answer) -> dict:
    return answer["hps"] if "hps" in answer else json.loads(answer["outputs"][0]["data"][0])


_NOT_AN_IMAGE = base64.b64encode(b"not an image").decode()


@pytest.mark.parametrize(
    "model, payload, says",
    [
        ("ocr", {"file": _NOT_AN_IMAGE, "fileType": 1}, "Invalid input file"),
        ("ocr", {"fileType": 1}, "file"),
        ("ocr", "", "empty request"),
        ("text_recognition", {"file": _NOT_AN_IMAGE}, "Invalid input file"),
        ("text_recognition", {"logId": "x"}, '"file"'),
        ("text_recognition", "{not json", "JSON request"),
    ],
    ids=["ocr-non-image", "ocr-missing-field", "ocr-empty-body", "rec-non-image", "rec-missing-field", "rec-not-json"],
)
def test_bad_requests_over_http_answer_422_in_the_body(triton, images, model, payload, says):
    """PaddleX's HPS format over Triton's HTTP endpoint: the HTTP request is fine (200), the answer carries the
    status and message, as PaddleX's HPS models answer; the server keeps serving."""
    if isinstance(payload, str):
        tensor = {"name": "input", "shape": [1, 1], "datatype": "BYTES", "data": [payload]}
        body = json.dumps({"inputs": [tensor]}).encode()
    else:
        body = triton_body(payload)
    status, answer = _post(triton["http_port"], f"/v2/models/{model}/infer", body)
    assert status == 200, answer
    ans = _hps_answer(answer)
    assert ans["errorCode"] == 422 and says in ans["errorMsg"], ans
    ok = _ask(triton["http"], httpclient, "ocr", {"file": _b64(images["english"]), "fileType": 1})
    assert ok["errorCode"] == 0


@pytest.mark.parametrize(
    "body, ctype",
    [
        (b"{not json", "application/json"),
        (json.dumps({"outputs": []}).encode(), "application/json"),
        (b"\x89PNG\r\n\x1a\n raw image bytes", "image/png"),
    ],
    ids=["not-json", "missing-inputs", "raw-image-body"],
)
def test_malformed_http_requests_get_an_error_and_the_server_keeps_serving(triton, images, body, ctype):
    """A body that is no KServe v2 request never reaches the model: Triton's own parser answers with an
    ``error`` message (this tritonserver answers its parse errors 500, newer ones 400)."""
    status, answer = _post(triton["http_port"], "/v2/models/ocr/infer", body, ctype)
    assert status in (400, 500) and answer["error"], (status, answer)
    ok = _ask(triton["http"], httpclient, "ocr", {"file": _b64(images["english"]), "fileType": 1})
    assert ok["errorCode"] == 0


def test_empty_http_body_and_content_type(triton, images):
    """An empty HTTP body is a request with no input tensor: the model answers 422 (in Triton's binary format).
    Triton reads the body by its own protocol whatever the ``Content-Type`` says (a binary body is announced by
    ``Inference-Header-Content-Length``), so a valid request sent as ``text/plain`` is served."""
    status, answer = _post(triton["http_port"], "/v2/models/ocr/infer", b"")
    assert status == 200 and answer["hps"]["errorCode"] == 422, answer
    assert "empty request" in answer["hps"]["errorMsg"]
    body = triton_body({"file": _b64(images["english"]), "fileType": 1})
    status, answer = _post(triton["http_port"], "/v2/models/ocr/infer", body, "text/plain")
    assert status == 200 and _hps_answer(answer)["errorCode"] == 0, answer


# Triton's own series on its metrics port that docs/monitoring.md names (counters, and cumulative microseconds)
NV_SERIES = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
)


def _nv_metrics(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return {  # by family name: the parser names a counter's sample <name>_total
        (family.name, s.labels.get("model"), s.labels.get("version")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if family.name.startswith("nv_inference_") and s.name in (family.name, family.name + "_total")
    }


def test_metrics_port_serves_the_nv_inference_series(triton, images):
    """Triton's metrics port (loopback here) answers in the Prometheus text format; a request moves the OCR
    model's success count by one (Triton refreshes its metrics every 2 s: bounded wait)."""
    version = str(next(m.version for m in triton["repo"].models if m.name == "ocr"))
    key = ("nv_inference_request_success", "ocr", version)
    before, deadline = _nv_metrics(triton["metrics_port"]), time.monotonic() + 12
    while time.monotonic() < deadline:  # an earlier test's request may be counted at the next 2 s refresh
        time.sleep(2.5)
        before, settled = _nv_metrics(triton["metrics_port"]), before
        if before.get(key) == settled.get(key):
            break
    for name in NV_SERIES:
        assert (name, "ocr", version) in before, (name, sorted({k[0] for k in before}))
    ans = _ask(triton["http"], httpclient, "ocr", {"file": _b64(images["english"]), "fileType": 1})
    assert ans["errorCode"] == 0, ans
    deadline = time.monotonic() + 20
    while (after := _nv_metrics(triton["metrics_port"]))[key] < before[key] + 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert after[key] == before[key] + 1
    assert after[("nv_inference_compute_infer_duration_us", "ocr", version)] > 0


def test_a_url_input_is_refused_by_default_and_nothing_is_fetched(triton, internal):
    """No triton-repo --allow-url-host: a `file` URL is answered 422 naming the option, the internal host sees no
    request, and the repository holds no URL parameters (the URL limits when allowed: test_triton_guard.py)."""
    ans = _ask(triton["grpc"], grpcclient, "ocr", {"file": internal["secret"].url + "/file/english.png", "fileType": 1})
    assert ans["errorCode"] == 422 and "triton-repo --allow-url-host" in ans["errorMsg"], ans
    assert internal["secret"].requests == []
    assert "url_allow" not in (triton["repo"].root / "ocr" / "config.pbtxt").read_text()


def test_shutdown_answers_requests_in_flight(triton, images):
    """Last (it stops the module's server): SIGTERM with requests in flight; each is answered, a request once
    the server is no longer ready is refused (the connection is reset), and tritonserver exits cleanly."""
    for name in ("http", "grpc"):
        triton[name].close()  # an idle keep-alive connection would hold the shutdown until its exit timeout
    body = triton_body({"file": _b64(images["page"]), "fileType": 1, "logId": "in-flight"})
    port, answers = triton["http_port"], []

    def ask() -> None:
        answers.append(_post(port, "/v2/models/ocr/infer", body))

    stubs = children(triton["proc"].pid)  # the model instances (Python backend stubs)
    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    wait_busy(stubs)  # a model instance computes a page: they are in flight at the signal
    triton["proc"].send_signal(signal.SIGTERM)
    end = time.monotonic() + 10
    while _ready(port) and time.monotonic() < end:  # the server says it is going away before it refuses work
        time.sleep(0.05)
    try:
        late = _post(port, "/v2/models/ocr/infer", body, timeout=30)
    except OSError as exc:  # the port is closed already
        late = (None, str(exc))
    for t in threads:
        t.join(120)
    assert len(answers) == 3 and all(s == 200 and _hps_answer(a)["errorCode"] == 0 for s, a in answers), answers
    assert late[0] != 200, late
    assert triton["proc"].wait(60) == 0, triton["log"].read_text(errors="replace")[-3000:]


def test_default_workdir_is_a_cache_folder_shared_and_never_beside_the_repository(tmp_path, monkeypatch):
    from paddlex_npu.triton.repo import default_workdir

    monkeypatch.setenv("PADDLEX_NPU_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "deploy" / "repo"
    (repo / "ocr").mkdir(parents=True)
    (repo / "ocr" / "config.pbtxt").write_text('name: "ocr"\n')
    argv, _ = tritonserver_command(repo)
    work = default_workdir()
    assert work.parent == tmp_path / "cache" / "tritonserver" and work.name.startswith("py3.")
    assert f"--backend-directory={work / 'backends'}" in argv and f"--model-repository={repo}" in argv
    stub = work / "backends" / "python" / "triton_python_backend_stub"
    assert stub.is_file() and sorted(p.name for p in (tmp_path / "deploy").iterdir()) == ["repo"]
    inode = stub.stat().st_ino
    tritonserver_command(repo)  # a second server: the same files, not rewritten (one may be running them)
    assert stub.stat().st_ino == inode and not list(stub.parent.glob(".*.tmp"))
