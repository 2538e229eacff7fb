"""Triton's dynamic batcher queue is bounded (``triton-repo --max-queue-size``, ``--queue-timeout-ms``): the
written config parses as Triton's own ModelConfig with a REJECT queue policy, and a real tritonserver whose queue
holds one request refuses the overflow at once while it answers the rest with the real texts."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.triton.repo import TritonOptions, build_triton_repo
from tests.helpers import PAGE, norm
from tests.serve.conftest import pipeline_yaml, start_tritonserver, stop, wait_for_tritonserver  # noqa: F401

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
httpclient = pytest.importorskip("tritonclient.http")
model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")


def _config(repo, name: str):
    from google.protobuf import text_format

    text = (repo.root / name / "config.pbtxt").read_text(encoding="utf-8")
    return text_format.Parse(text, model_config_pb2.ModelConfig())  # Triton's schema: unknown fields refused


def test_the_queue_policy_is_triton_s(pipeline_yaml, tmp_path):  # noqa: F811
    repo = build_triton_repo(pipeline_yaml, tmp_path / "repo", TritonOptions(max_queue_size=3, queue_timeout_us=5000))
    policy = _config(repo, "ocr").dynamic_batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (3, 5000)
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT and not policy.allow_timeout_override
    with pytest.raises(ConfigError, match="--max-queue-size 0 .* give 1 or more"):
        build_triton_repo(pipeline_yaml, tmp_path / "bad", TritonOptions(max_queue_size=0))


def _infer(port: int, body: dict) -> tuple:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=300.0)
    inp = httpclient.InferInput("input", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[json.dumps(body).encode()]], dtype=np.object_))
    start = time.monotonic()
    try:
        out = client.infer("ocr", [inp])
        return "ok", json.loads(out.as_numpy("output")[0, 0]), time.monotonic() - start
    except Exception as exc:  # noqa: BLE001 - the refusal is what is measured
        return "refused", str(exc), time.monotonic() - start
    finally:
        client.close()


def test_an_overloaded_model_refuses_at_once(pipeline_yaml, tmp_path, images):  # noqa: F811
    options = TritonOptions(runtime="reference", max_queue_size=1, warmup=False, max_queue_delay_us=1000)
    repo = build_triton_repo(pipeline_yaml, tmp_path / "repo", options)
    server = start_tritonserver(repo.root, tmp_path)
    proc, log, http = server.proc, server.log, server.http
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        wait_for_tritonserver(server, client)
        client.close()
        body = {"file": base64.b64encode(images["page"].read_bytes()).decode(), "fileType": 1}
        with ThreadPoolExecutor(8) as pool:  # one instance, a batch of 4, a queue of 1: 8 at once overflow it
            results = list(pool.map(lambda _: _infer(http, body), range(8)))
    finally:
        assert stop(proc) == 0, log.read_text(errors="replace")[-3000:]
    served = [r for r in results if r[0] == "ok"]
    refused = [r for r in results if r[0] == "refused"]
    assert served and refused, results
    assert all("Exceeds maximum queue size" in r[1] for r in refused), refused
    for _, answer, _ in served:
        assert norm(answer["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]) == norm(PAGE)
    assert max(r[2] for r in refused) < min(r[2] for r in served), results  # refused before any answer came
