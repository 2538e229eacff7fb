"""A stand-in for an egress proxy on loopback that records what a process tries to reach through it: the first
line of every connection (``CONNECT host:443 HTTP/1.1``, ``GET http://host/... HTTP/1.1``), answered 403 and
closed. A server started with ``HTTP(S)_PROXY``/``ALL_PROXY`` pointing here shows every outbound connection a
library opens on its own (telemetry, downloads, connectivity checks) whose client honours those variables."""

from __future__ import annotations

import socketserver
import threading
from typing import Dict, List

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class ProxyRecorder:
    """A threading TCP server on 127.0.0.1 (a free port); ``seen`` lists the first line of each connection."""

    def __init__(self) -> None:
        self.seen: List[str] = []
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.recorder = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def environment(self) -> Dict[str, str]:
        """The proxy variables pointing here (and no NO_PROXY): what a process under test is started with."""
        env = {name: self.url for name in PROXY_VARIABLES}
        env.update(NO_PROXY="", no_proxy="")
        return env

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ProxyRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(socketserver.StreamRequestHandler):
    timeout = 10

    def handle(self) -> None:
        try:
            line = self.rfile.readline(8192).decode("latin-1").strip()
        except OSError:
            line = ""
        self.server.recorder.seen.append(line or "(a connection that sent no request line)")  # type: ignore[attr-defined]
        try:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass
