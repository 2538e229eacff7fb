"""What a URL input can still cost ``paddlex-npu serve`` (issue 44), on the real server of test_serve_guard.py
(URLs from 127.0.0.2 allowed, 8 MB, 3 s; tokens; HTTPS): compressed "bombs" of under 1 KB (br, gzip, stacked
``gzip, gzip``) are refused undecoded, with the server's memory bounded and ``/health`` answered meanwhile; an
over-long URL or one with a control character is the client's mistake (422), not a 500."""

from __future__ import annotations

import threading
import time

import pytest

from tests.http_client import call
from tests.serve.conftest import rss_peak
from tests.serve.internal_host import bombs
from tests.serve.test_serve_guard import _ocr_url, guarded  # noqa: F401  (the module's server)

LIMIT = 8 * 1024 * 1024  # guarded's --max-body-mb (its URL limit)
SLACK = 16 * 1024 * 1024  # what one request may cost beyond the bytes it brings (parsing, buffers)


def _health_while(server, work):
    """``work()``'s answer, and the slowest ``/health`` answer seen while it ran (asked every 20 ms)."""
    done, slowest = threading.Event(), [0.0]

    def probe():
        while not done.is_set():
            start = time.monotonic()
            status, _ = call(server["url"] + "/health", context=server["context"], timeout=10)
            slowest[0] = max(slowest[0], time.monotonic() - start)
            assert status == 200
            done.wait(0.02)

    call(server["url"] + "/health", context=server["context"], timeout=10)  # warm: the server's first answer
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        return work(), slowest
    finally:
        done.set()
        thread.join(15)


@pytest.mark.parametrize("name", ["br", "gzip", "gzip-gzip"])
def test_a_compressed_bomb_is_refused_undecoded_and_health_answers(guarded, internal, name):  # noqa: F811
    allowed, pid = internal["allowed"], guarded["proc"].pid
    allowed.encoded[name] = bombs()[name]
    before = rss_peak(pid)
    (status, ans), slowest = _health_while(guarded, lambda: _ocr_url(guarded, f"{allowed.url}/encoded/{name}"))
    assert status == 422 and "Content-Encoding" in ans["errorMsg"], ans
    assert rss_peak(pid) - before < LIMIT + SLACK
    assert slowest[0] < 0.5, slowest


@pytest.mark.parametrize(
    "url", ["http://127.0.0.2/" + "a" * 70_000, "http://127.0.0.2/a\x01b", "http://127.0.0.2/a\nHost: x"]
)
def test_a_malformed_url_is_the_clients_mistake(guarded, url):  # noqa: F811
    status, ans = _ocr_url(guarded, url)
    assert status == 422 and "URL" in ans["errorMsg"] and len(ans["errorMsg"]) < 1000, (status, ans)
