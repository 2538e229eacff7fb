"""A server's settings, in two parts: what the app needs to answer a request (:class:`AppSettings`: limits, URL
policy, tokens, admission), which serve, Ray Serve's replicas and the tests share, and what the process needs
(:class:`ServerSettings`: where it listens, its workers and devices, restarts, the drain, TLS), which only
``paddlex-npu serve`` has. :class:`ServeOptions` is the pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import auth, fetch
from .images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_QUEUE = 64  # requests waiting for a worker, beyond those running; 503 + Retry-After above
DEFAULT_REQUEST_TIMEOUT = 120.0  # seconds a worker may spend on one request; 504 above, and the worker replaced


@dataclass(frozen=True)
class AppSettings:
    """What every request meets: body and pixel limits, URL inputs, bearer tokens, the admission bound."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    max_queue: int = DEFAULT_MAX_QUEUE
    urls: fetch.UrlPolicy = field(default_factory=fetch.UrlPolicy)  # URL inputs: refused unless hosts are allowed
    tokens: auth.AccessTokens = field(default_factory=auth.AccessTokens)  # none needed unless given


@dataclass(frozen=True)
class ServerSettings:
    """What the process does: listen, start and restart workers, drain at SIGTERM, TLS."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    devices: tuple = (0,)
    runtime: Optional[str] = None
    request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT
    restart_limit: Optional[int] = None  # worker restarts per restart_window (default 2 per worker)
    restart_window: float = 600.0
    shutdown_grace: float = 0.0  # seconds answering 503 after SIGTERM before the port closes
    drain_timeout: float = 60.0  # longest wait for requests in flight at shutdown
    tls_certfile: Optional[str] = None  # HTTPS with uvicorn's ssl options
    tls_keyfile: Optional[str] = None


@dataclass(frozen=True)
class ServeOptions:
    app: AppSettings = field(default_factory=AppSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
