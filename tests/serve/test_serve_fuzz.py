"""An API fuzz test of ``paddlex-npu serve``: schemathesis generates requests from the server's own OpenAPI
schema (``/openapi.json``, PaddleX's), valid and invalid, against a real server on loopback. Bounded: at most
``MAX_EXAMPLES`` per operation, each answered within ``REQUEST_TIMEOUT_S``. No answer may be a 5xx; afterwards
the server is alive and answers a real request right."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest

from tests.serve.test_serve_faults import _start

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402  (after the importorskip)

MAX_EXAMPLES = 40
REQUEST_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def fuzzed_server(pipeline_yaml, tmp_path_factory):
    from tests.serve.conftest import stop

    s = _start(pipeline_yaml, tmp_path_factory.mktemp("fuzz") / "serve.log", "--max-body-mb", "2")
    s["url"] = f"http://127.0.0.1:{s['port']}"
    try:
        yield s
    finally:
        stop(s["proc"])


def _operations(url: str) -> list:
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def test_no_request_from_the_schema_gets_a_5xx(fuzzed_server):
    """Every operation of the schema (``POST /ocr``, ``GET /health``), up to MAX_EXAMPLES generated cases each."""
    url = fuzzed_server["url"]
    operations = _operations(url)
    assert any(op.path == "/ocr" for op in operations), [op.path for op in operations]
    seen: list = []
    for op in operations:

        @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(case=op.as_strategy())
        def run(case) -> None:
            body = case.body
            if isinstance(body, dict) and isinstance(body.get("file"), str) and "://" in body["file"]:
                body["file"] = "bm90IGFuIGltYWdl"  # never a URL: PaddleX would fetch it (no traffic off loopback)
            response = case.call(base_url=url, timeout=REQUEST_TIMEOUT_S)
            seen.append(response.status_code)
            shown = (
                {k: (v[:80] if isinstance(v, str) else v) for k, v in body.items()} if isinstance(body, dict) else body
            )
            assert response.status_code < 500, (case.method, case.path, shown, response.text[:500])

        run()
    assert len(seen) >= MAX_EXAMPLES // 2 and any(400 <= s < 500 for s in seen), seen


def test_the_server_is_alive_and_right_after_the_fuzzing(fuzzed_server, images, npu_pipeline):
    body = {"file": base64.b64encode(images["english"].read_bytes()).decode(), "fileType": 1}
    req = urllib.request.Request(
        fuzzed_server["url"] + "/ocr", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        got = json.loads(r.read())["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
    (theirs,) = list(npu_pipeline.predict(str(images["english"])))
    assert got == list(theirs["rec_texts"])
    with urllib.request.urlopen(fuzzed_server["url"] + "/ready", timeout=5) as r:
        assert r.status == 200
