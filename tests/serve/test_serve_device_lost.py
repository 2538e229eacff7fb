"""A device-fatal error ends ``serve``'s worker after its answer (issue 30.6), a real server on loopback on the
simulated device with its fault knob (``PADDLEX_NPU_SIM_DEVICE_LOST``; the device call fails as ais_bench's does,
"[-1][ACL: general failure] ", and run/ learns the loss from the simulated pyACL's ``acl.rt.get_last_error``): the
request that hits it is retried on a fresh worker and answered right (issue 54), and when the restart budget is
spent the request is answered 503 naming the loss and the budget, and ``/ready`` (and ``/health``) turn 503."""

from __future__ import annotations

import os

from paddlex_npu.paddlex.pipelines import pipeline_on_device
from paddlex_npu.run import simulated
from paddlex_npu.samples import assets
from tests.serve.conftest import stop
from tests.serve.test_serve_faults import _get, _ocr_body, _post, _start, _until, _workers

BOUND_S = 120


def _calls_of_one_page(asset_root, image, env) -> int:
    """Device calls of the OCR pipeline on ``image`` (in this process, on the simulated device)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        pipeline = pipeline_on_device(assets.ocr_pipeline_config(asset_root / "om"), 0, "simulated")
        before = simulated.stats()["calls"]
        list(pipeline.predict(str(image)))
        pipeline.close()
        return int(simulated.stats()["calls"] - before)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _device_memory(server, series: str = "paddlex_npu_device_memory_bytes") -> dict:
    """``series`` per worker pid, from ``/metrics``."""
    import http.client
    import re

    c = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=10)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    found = re.findall(rf'^{series}\{{device="0",worker="(\d+)"\}} (\S+)$', text, re.M)
    return {int(pid): float(v) for pid, v in found}


def test_a_lost_device_ends_the_worker_after_its_answer(pipeline_yaml, asset_root, images, tmp_path, monkeypatch):
    sim = {"PADDLEX_NPU_SIM_STORE": str(tmp_path / "store"), "PADDLEX_NPU_SIM_LOCKS": str(tmp_path / "locks")}
    calls = _calls_of_one_page(asset_root, images["english"], sim)
    assert calls >= 2
    for k, v in {**sim, "PADDLEX_NPU_SIM_DEVICE_LOST": str(calls + 1)}.items():
        monkeypatch.setenv(k, v)  # the server's environment (server_env copies ours)
    args = ("--runtime", "simulated", "--workers", "1", "--restart-limit", "1")
    server = _start(pipeline_yaml, tmp_path / "serve.log", *args)
    try:
        body = _ocr_body(images["english"])
        first = _workers(server)
        status, ok, _ = _post(server, body)
        assert status == 200, ok
        texts = ok["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
        memory = _device_memory(server)  # /metrics: each worker's device memory (the simulated device's)
        assert set(memory) == set(first) and all(v > 0 for v in memory.values()), memory
        # the device's memory as ACL answers (acl.rt.get_mem_info), device-wide, of 32 GB: the worker's and this
        # process's (its pipeline, which counted the calls, still holds its sessions on the same simulated device)
        from paddlex_npu.run import simulated

        ours = simulated.stats()["device_bytes"]
        assert ours > 0
        used = _device_memory(server, "paddlex_npu_device_memory_used_bytes")
        assert used == {pid: v + ours for pid, v in memory.items()}, (used, memory, ours)
        assert set(_device_memory(server, "paddlex_npu_device_memory_total_bytes").values()) == {32 * 2.0**30}
        # the second page's first call: the context is lost; the worker exits and its input is retried on a fresh
        # process (issue 54: a lost device costs at most the input that met it, here not even that)
        status, again, _ = _post(server, body)
        assert status == 200 and again["result"]["ocrResults"][0]["prunedResult"]["rec_texts"] == texts, again
        assert _until(lambda: _get(server, "/ready")[0] == 200 and _workers(server) != first, BOUND_S, 0.2)
        status, lost, headers = _post(server, body)  # lost again: the budget (1 restart) is spent, no retry
        assert status == 503 and "lost its device context" in lost["errorMsg"], lost
        assert "acl.rt.get_last_error) is 507015" in lost["errorMsg"], lost
        assert "restart budget" in lost["errorMsg"] and headers.get("retry-after"), (lost, headers)
        assert _until(lambda: _get(server, "/health")[0] == 503, BOUND_S, 0.2)
        status, health = _get(server, "/health")
        assert "restart budget" in health["errorMsg"], health
        assert _get(server, "/ready")[0] == 503
    finally:
        code = stop(server["proc"])
    assert code == 0, server["log"].read_text()[-3000:]
