"""Access control of ``paddlex-npu serve`` (and Ray Serve's replicas): bearer tokens, off unless tokens are given.

- API tokens (``--token-file``, ``$PADDLEX_NPU_API_TOKENS``) for every path but the probes: ``/ocr`` and the rest;
- metrics tokens (``--metrics-token-file``, ``$PADDLEX_NPU_METRICS_TOKENS``) for ``/metrics``, so that a scraper
  can read the metrics without the right to run OCR; ``/metrics`` takes an API token too, and is open only when no
  token of either kind is set;
- ``/health`` and ``/ready`` always open (a cluster's probes carry no token).

A request without a token, or with a wrong one, gets 401 with ``WWW-Authenticate: Bearer`` and no detail, and
counts in ``paddlex_npu_unauthorized_total{scope}``. Tokens are compared in constant time
(:func:`hmac.compare_digest`, against every configured token). A token file holds one token per line (blank
lines and ``#`` comments skipped); a variable holds tokens separated by commas or whitespace.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .. import envs
from ..errors import RequestRefusedError
from . import metrics, replies

OPEN_PATHS = ("/health", "/ready")
METRICS_PATH = "/metrics"
MIN_TOKEN_CHARS = 16


def _checked(tokens: Sequence[str], origin: str) -> Tuple[str, ...]:
    for token in tokens:
        if len(token) < MIN_TOKEN_CHARS or not token.isprintable():
            raise ValueError(
                f"a token of {origin} has {len(token)} characters: give tokens of at least {MIN_TOKEN_CHARS} "
                "printable characters (e.g. `openssl rand -hex 32`)"
            )
    return tuple(tokens)


def read_tokens(file: Optional[str], variable: envs.EnvVar) -> Tuple[str, ...]:
    """The tokens of ``file`` (one per line) and of the environment variable ``variable``."""
    tokens: list = []
    if file:
        path = Path(file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"token file {file} cannot be read ({exc})") from None
        lines = [line.strip() for line in text.splitlines()]
        tokens += _checked([t for t in lines if t and not t.startswith("#")], f"the token file {file}")
        if not tokens:
            raise ValueError(f"token file {file} holds no token: one token per line")
    value = variable.get()
    if value:
        tokens += _checked(value.replace(",", " ").split(), f"${variable.name}")
    return tuple(tokens)


@dataclass(frozen=True)
class AccessTokens:
    """The tokens a server accepts: ``api`` for every path but the probes, ``metrics`` for ``/metrics`` only."""

    api: Tuple[str, ...] = ()
    metrics: Tuple[str, ...] = ()

    @classmethod
    def load(cls, api_file: Optional[str] = None, metrics_file: Optional[str] = None) -> AccessTokens:
        return cls(read_tokens(api_file, envs.API_TOKENS), read_tokens(metrics_file, envs.METRICS_TOKENS))

    @property
    def enabled(self) -> bool:
        return bool(self.api or self.metrics)

    def accepted(self, path: str) -> Tuple[str, ...]:
        """The tokens that open ``path``; empty: the path is open."""
        if path in OPEN_PATHS:
            return ()
        if path == METRICS_PATH:
            return self.metrics + self.api
        return self.api


def _matches(presented: bytes, tokens: Sequence[str]) -> bool:
    """Whether ``presented`` is one of ``tokens``, comparing with every one in constant time."""
    found = False
    for token in tokens:
        found |= hmac.compare_digest(presented, token.encode())
    return found


def bearer(headers: Sequence[Tuple[bytes, bytes]]) -> bytes:
    """The token of the request's ``Authorization: Bearer <token>`` header, or b""."""
    for key, value in headers:
        if key.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip()
    return b""


class BearerAuth:
    """ASGI middleware, outermost: a path that needs a token answers 401 unless the request carries one."""

    def __init__(self, app: Any, tokens: AccessTokens) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        accepted = self.tokens.accepted(scope.get("path", ""))
        if not accepted or _matches(bearer(scope.get("headers") or []), accepted):
            return await self.app(scope, receive, send)
        metrics.unauthorized("metrics" if scope.get("path") == METRICS_PATH else "api")
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        await replies.send(send, scope, replies.answer(RequestRefusedError("Unauthorized", "unauthorized")))


def wrap(app: Any, tokens: Optional[AccessTokens]) -> Any:
    """``app`` behind :class:`BearerAuth` when ``tokens`` has any token, else ``app`` itself."""
    return BearerAuth(app, tokens) if tokens is not None and tokens.enabled else app
