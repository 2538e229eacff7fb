"""A Triton model instance whose device is lost (issue 54 item 3), in process: ``execute`` of the real
``paddlex_npu.triton.model`` with Triton's ``triton_python_backend_utils`` stood in (tensors, responses, response
senders), and the real watchdog of ``triton-serve`` listening on its Unix socket with a loopback HTTP stand-in of
Triton's model control API. The instance tells the watchdog (which unloads the model) before it sends its answer,
sends it through the response sender and exits at once; a request after the loss never reaches the predictor."""

from __future__ import annotations

import http.server
import json
import threading
import types
from typing import Any, Dict, List

import numpy as np
import pytest

from paddlex_npu.errors import DeviceLostError
from paddlex_npu.serve.replies import ok_body
from paddlex_npu.triton import model
from paddlex_npu.triton.watch import StubWatchdog, listen


class _Exited(BaseException):
    """``os._exit`` of the stub, stood in: ends ``execute`` where the process would end."""


class _Tensor:
    def __init__(self, name: str, data: Any) -> None:
        self.name, self.data = name, data

    def as_numpy(self) -> Any:
        return self.data


class _Request:
    def __init__(self, bodies: List[dict], events: List[Any]) -> None:
        data = np.array([[json.dumps(b).encode()] for b in bodies], dtype=np.object_)
        self.tensor, self.events = _Tensor("input", data), events

    def get_response_sender(self) -> Any:
        events = self.events

        class Sender:
            def send(self, response: Any, flags: int = 0) -> None:
                (tensor,) = response.output_tensors
                answers = [json.loads(x) for x in tensor.data.reshape(-1)]
                events.append(("sent", flags, answers))

        return Sender()


def _backend_utils(events: List[Any]) -> types.ModuleType:
    pb = types.ModuleType("triton_python_backend_utils")
    pb.get_input_tensor_by_name = lambda request, name: request.tensor
    pb.Tensor = _Tensor
    pb.InferenceResponse = lambda output_tensors: types.SimpleNamespace(output_tensors=output_tensors)
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    pb.Logger = types.SimpleNamespace(log_error=lambda text: events.append(("log", text)))
    return pb


class _Lossy(model._Model):
    """The shared plumbing of the models (``execute``) over a predictor whose device is lost at its second call."""

    def __init__(self) -> None:
        self.model_name, self.instance, self.device_id, self.calls = "ocr", "npu0_0", 0, 0

    def answer(self, bodies: List[bytes]) -> List[Dict[str, Any]]:
        self.calls += 1
        if self.calls == 2:
            return [model._route_failure(DeviceLostError("[-1][ACL: general failure] "), None) for _ in bodies]
        return [ok_body({"n": self.calls}, json.loads(body).get("logId")) for body in bodies]


@pytest.fixture
def triton_control(events):
    """A loopback stand-in of Triton's model control API: records each POST among ``events``, answers 200."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            events.append(("POST", self.path))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def events() -> List[Any]:
    return []


@pytest.fixture
def stub(events, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "triton_python_backend_utils", _backend_utils(events))

    def exit_(code: int) -> None:
        events.append(("exit", code))
        raise _Exited(code)

    monkeypatch.setattr(model.os, "_exit", exit_)
    model._LOST.clear()
    yield _Lossy()
    model._LOST.clear()


def test_the_model_is_not_ready_before_the_loss_is_answered_and_the_instance_exits_at_once(
    stub, events, triton_control, monkeypatch
):
    said: List[str] = []
    listener, path = listen()
    watchdog = StubWatchdog(1, triton_control, said.append, interval=0.05, listener=listener)
    monkeypatch.setenv(model.envs.TRITON_WATCHDOG.name, path)
    watchdog._serve_thread = threading.Thread(target=watchdog._serve, daemon=True)
    watchdog._serve_thread.start()
    try:
        first = stub.execute([_Request([{"logId": "a"}], events)])
        assert [json.loads(x) for x in first[0].output_tensors[0].data.reshape(-1)][0]["errorCode"] == 0
        with pytest.raises(_Exited):
            stub.execute([_Request([{"logId": "b"}, {"logId": "c"}], events), _Request([{"logId": "d"}], events)])
    finally:
        watchdog._stop.set()
        watchdog._serve_thread.join(5)
        listener.close()
    kinds = [e[0] for e in events if e[0] != "log"]
    # the watchdog unloaded the model (its readiness fails) before any answer went out; then the answers; then exit
    assert kinds == ["POST", "sent", "sent", "exit"], events
    assert events[[e[0] for e in events].index("POST")] == ("POST", "/v2/repository/models/ocr/unload")
    sent = [e for e in events if e[0] == "sent"]
    assert [e[1] for e in sent] == [1, 1]  # TRITONSERVER_RESPONSE_COMPLETE_FINAL: each request's only response
    answers = [a for e in sent for a in e[2]]
    assert [a["errorCode"] for a in answers] == [503, 503, 503]
    assert all(a["errorMsg"].startswith("DeviceLostError: ") for a in answers)
    assert ("exit", model.DEVICE_LOST_EXIT) in events
    assert any("lost its device; unloading 'ocr'" in s for s in said), said
    assert watchdog._down == {"ocr"}  # loaded again by the watchdog's reload, which forgets it then


def test_a_request_after_the_loss_never_reaches_the_device(stub, events):
    """Without a watchdog (plain tritonserver): the answers still go out and the stub exits at once; a request
    that reaches the instance afterwards (had it lived) is refused without running."""
    stub.execute([_Request([{"logId": "a"}], events)])
    with pytest.raises(_Exited):
        stub.execute([_Request([{"logId": "b"}], events)])
    assert [e[0] for e in events if e[0] != "log"] == ["sent", "exit"]
    assert any("no triton-serve watchdog answered" in e[1] for e in events if e[0] == "log")
    with pytest.raises(_Exited):
        stub.execute([_Request([{"logId": "late"}], events)])
    assert stub.calls == 2  # the late request was not predicted
    (late,) = events[-2][2]
    assert late["errorCode"] == 503 and late["logId"] == "late", late
    assert "send the request again once /v2/models/<model>/ready answers 200" in late["errorMsg"]
