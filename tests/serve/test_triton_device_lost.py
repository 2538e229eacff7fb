"""A device-fatal error ends the Triton model instance after its answer (issue 30.6), the real tritonserver on
loopback on the simulated device with its fault knob (``PADDLEX_NPU_SIM_DEVICE_LOST``: the call fails as
ais_bench's does, "[-1][ACL: general failure] ", and run/ learns the loss from the simulated pyACL's last error).
Triton's Python backend (this nvidia-pytriton's, like upstream's since the restart code left ``python_be.cc``) does
not restart a stub that died: ``triton-serve``'s watchdog reloads the model, and unloads it once its restart budget
is spent (the model's and the server's readiness then fail: Triton answers them 400)."""

from __future__ import annotations

import time

import pytest

from paddlex_npu.triton.repo import TritonOptions, build_triton_repo
from paddlex_npu.triton.watch import stubs_of
from tests.serve.conftest import stop, wait_until
from tests.serve.test_serve_device_lost import _calls_of_one_page
from tests.serve.test_triton_faults import _infer, _ocr, _ready, _server_pid, _status, triton_serve

pytest.importorskip("pytriton", reason="tritonserver comes with nvidia-pytriton (requirements/serving.txt)")
BOUND_S = 240
OCR_READY = "/v2/models/ocr/ready"


def _ocr_stubs(proc) -> set:
    try:
        return {s.pid for s in stubs_of(_server_pid({"proc": proc})).values() if s.model == "ocr"}
    except (OSError, ValueError, IndexError):
        return set()


def _until_lost(port: int, images, texts) -> int:
    """Send the page until an answer is DeviceLostError (bounded); every answer before it is right."""
    for sent in range(1, 9):
        status, (answer,) = _infer(port, "ocr", [_ocr(images)])
        if answer.get("errorCode") == 503:
            assert answer["errorMsg"].startswith("DeviceLostError: "), answer
            assert "acl.rt.get_last_error) is 507015" in answer["errorMsg"], answer  # run/ asked ACL
            return sent
        assert status == 200 and answer["errorCode"] == 0, answer
        assert answer["result"]["ocrResults"][0]["prunedResult"]["rec_texts"] == texts
    raise AssertionError("the device was never lost within 8 pages")


def test_a_lost_device_ends_the_instance_and_the_budget_bounds_it(
    pipeline_yaml, asset_root, images, npu_pipeline, tmp_path, monkeypatch
):
    sim = {"PADDLEX_NPU_SIM_STORE": str(tmp_path / "store"), "PADDLEX_NPU_SIM_LOCKS": str(tmp_path / "locks")}
    calls = _calls_of_one_page(asset_root, images["english"], sim)
    for k, v in {**sim, "PADDLEX_NPU_SIM_DEVICE_LOST": str(2 * calls + 1)}.items():
        monkeypatch.setenv(k, v)  # the server's environment (server_env copies ours)
    texts = list(next(iter(npu_pipeline.predict(str(images["english"]))))["rec_texts"])
    repo = build_triton_repo(pipeline_yaml, tmp_path / "repo", TritonOptions(runtime="simulated"))
    proc, http, log = triton_serve(repo.root, tmp_path, "--restart-limit", "1")
    try:
        why = wait_until(lambda: _ready(http), proc, 300, log)
        assert why is None, why
        first = _ocr_stubs(proc)
        _until_lost(http, images, texts)  # answered, then the instance exits
        end = time.monotonic() + BOUND_S  # the watchdog saw the stub exit and reloaded the model on fresh stubs
        while time.monotonic() < end and "'ocr' reloaded" not in log.read_text(errors="replace"):
            time.sleep(0.2)
        assert _ocr_stubs(proc) - first and _status(http, OCR_READY) == 200, log.read_text()[-3000:]
        _until_lost(http, images, texts)  # the fresh instance answers right, until it is lost too
        assert _status(http, OCR_READY) != 200  # not ready from the loss's answer on (the watchdog unloaded it)
        end = time.monotonic() + BOUND_S  # then the watchdog sees the stub gone and does not reload it
        while time.monotonic() < end and "is spent" not in log.read_text(errors="replace"):
            time.sleep(0.2)
        text = log.read_text(errors="replace")
        assert _status(http, OCR_READY) != 200, text[-3000:]  # the budget (1 reload) is spent: the model unloaded
        assert "restart budget (1 per 600 s, --restart-limit) is spent" in text, text[-3000:]
        assert _status(http, "/v2/health/ready") == 400  # Triton's "not ready" (its readiness endpoints answer 400)
    finally:
        stop(proc)


def _until_ready(port: int, bound: float = BOUND_S) -> bool:
    """Wait, as a load balancer does, until the model answers ready (bounded; Triton's readiness is only polled)."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if _status(port, OCR_READY) == 200:
            return True
        time.sleep(0.1)
    return False


def test_twelve_inputs_across_a_lost_device_cost_at_most_the_one_that_met_it(
    pipeline_yaml, asset_root, images, npu_pipeline, tmp_path, monkeypatch
):
    """Issue 54 item 3: 12 pages, one after the other, each sent once the model answers ready; the instance
    loses its device at its 8th page (at most once in 12: a fresh instance would lose it at its own 8th). The
    page that met the loss is answered 503 DeviceLostError; at that moment the model already answers not ready
    (the instance told the watchdog before answering); it is ready again once reloaded, and every other page is
    answered right: 11 of 12."""
    sim = {"PADDLEX_NPU_SIM_STORE": str(tmp_path / "store"), "PADDLEX_NPU_SIM_LOCKS": str(tmp_path / "locks")}
    calls = _calls_of_one_page(asset_root, images["english"], sim)
    for k, v in {**sim, "PADDLEX_NPU_SIM_DEVICE_LOST": str(7 * calls + 1)}.items():
        monkeypatch.setenv(k, v)
    texts = list(next(iter(npu_pipeline.predict(str(images["english"]))))["rec_texts"])
    repo = build_triton_repo(pipeline_yaml, tmp_path / "repo", TritonOptions(runtime="simulated"))
    proc, http, log = triton_serve(repo.root, tmp_path)
    try:
        why = wait_until(lambda: _ready(http), proc, 300, log)
        assert why is None, why
        first = _ocr_stubs(proc)
        right, lost = 0, []
        for page in range(1, 13):
            assert _until_ready(http), log.read_text(errors="replace")[-3000:]
            status, (answer,) = _infer(http, "ocr", [_ocr(images, logId=f"page-{page}")])
            if answer.get("errorCode") == 503:
                lost.append(page)
                assert answer["errorMsg"].startswith("DeviceLostError: "), answer
                # not ready before the answer came: a client or load balancer reading it sends nothing more there
                assert _status(http, OCR_READY) == 400 and _status(http, "/v2/health/ready") == 400
                continue
            assert status == 200 and answer["errorCode"] == 0 and answer["logId"] == f"page-{page}", answer
            assert answer["result"]["ocrResults"][0]["prunedResult"]["rec_texts"] == texts
            right += 1
        text = log.read_text(errors="replace")
        assert right >= 11 and len(lost) == 1, (right, lost, text[-3000:])
        assert "of model 'ocr' lost its device; unloading 'ocr'" in text and "'ocr' reloaded" in text, text[-3000:]
        assert _ocr_stubs(proc).isdisjoint(first)  # the pages after the loss were answered by a fresh instance
    finally:
        stop(proc)
