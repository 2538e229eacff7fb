"""The tests' one HTTP client for the servers under test (serve, Ray Serve; Triton's binary answers and the
keep-alive connections of the fault tests aside): one request on loopback, answered as (status, body), an HTTP
error status included."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional, Tuple, Union


def call(
    url: str,
    body: Optional[bytes] = None,
    *,
    token: Optional[str] = None,
    context: Optional[ssl.SSLContext] = None,
    ctype: str = "application/json",
    timeout: float = 120,
) -> Tuple[int, Any]:
    """GET ``url``, or POST ``body`` to it, with a bearer ``token`` and a TLS ``context`` when given: (status, the
    JSON answer, or its text when it is none: /metrics, a proxy's plain 404)."""
    headers = {"Content-Type": ctype}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, _decoded(r.read())
    except urllib.error.HTTPError as e:
        return e.code, _decoded(e.read())


def ocr_body(image: Union[Path, bytes, str], **extra: Any) -> bytes:
    """PaddleX's /ocr request body: an image file's or bytes' base64, or a URL string as it is."""
    if isinstance(image, Path):
        image = image.read_bytes()
    file = base64.b64encode(image).decode() if isinstance(image, bytes) else image
    return json.dumps({"file": file, "fileType": 1, **extra}).encode()


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
