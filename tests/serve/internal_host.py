"""A local HTTP(S) server standing in for an internal host (what a server must not fetch unless allowed), recording
every request it sees; and a self-signed certificate made in the test (the ``cryptography`` package)."""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, urlsplit

CHUNK = 1024 * 1024


class InternalHost:
    """``http.server`` on ``address`` (a loopback address), in a thread. Paths:

    - ``/file/<name>``: a file of ``files``;
    - ``/encoded/<name>``: a body of ``encoded`` (name: (Content-Encoding, body)), e.g. :func:`bombs`;
    - ``/big?mb=N&declared=1``: N MB of zeros streamed (``Content-Length`` declared only with ``declared=1``);
    - ``/drip?seconds=N``: one byte a second, for at most N seconds;
    - ``/redirect?to=URL``: 302 to URL.

    ``requests`` lists ``(path, Host header)`` of every request, in order; ``sent`` counts body bytes sent."""

    def __init__(
        self,
        files: Optional[Dict[str, bytes]] = None,
        address: str = "127.0.0.1",
        tls: Optional[Tuple[Path, Path]] = None,
    ) -> None:
        self.files = files or {}
        self.encoded: Dict[str, Tuple[str, bytes]] = {}
        self.requests: List[Tuple[str, str]] = []
        self.sent = 0
        self.stopped = threading.Event()
        self.server = ThreadingHTTPServer((address, 0), _Handler)
        self.server.internal = self  # type: ignore[attr-defined]
        self.server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        host, port = self.server.server_address[:2]
        self.url = f"{'https' if tls else 'http'}://{host}:{port}"
        self.port = port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> InternalHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    """The paths of :class:`InternalHost` (its instance is ``self.server.internal``)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        host = self.server.internal  # type: ignore[attr-defined]
        host.requests.append((self.path, self.headers.get("Host", "")))
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        try:
            if parts.path.startswith("/file/") and parts.path[6:] in host.files:
                self._send(host, host.files[parts.path[6:]])
            elif parts.path.startswith("/encoded/") and parts.path[9:] in host.encoded:
                encoding, body = host.encoded[parts.path[9:]]
                self._send(host, body, {"Content-Encoding": encoding})
            elif parts.path == "/big":
                self._big(host, int(query.get("mb", "1")), query.get("declared") == "1")
            elif parts.path == "/drip":
                self._drip(host, float(query.get("seconds", "30")))
            elif parts.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", query["to"])
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send_error(404)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    def _send(self, host: InternalHost, body: bytes, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        host.sent += len(body)

    def _big(self, host: InternalHost, mb: int, declared: bool) -> None:
        self.send_response(200)
        if declared:
            self.send_header("Content-Length", str(mb * CHUNK))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        zeros = bytes(CHUNK)
        for _ in range(mb):
            if host.stopped.is_set():
                return
            self.wfile.write(zeros)
            host.sent += CHUNK
        self.close_connection = True

    def _drip(self, host: InternalHost, seconds: float) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(int(seconds) + 10))
        self.end_headers()
        end = time.monotonic() + seconds
        while time.monotonic() < end and not host.stopped.wait(1.0):
            self.wfile.write(b"x")
            self.wfile.flush()
            host.sent += 1
        self.close_connection = True


def _zeros(mib: int, compress: Callable[[bytes], bytes], end: Callable[[], bytes]) -> bytes:
    """``mib`` MiB of zeros through a streaming compressor (``compress`` each MiB, then ``end``)."""
    one = bytes(1024 * 1024)
    return b"".join(compress(one) for _ in range(mib)) + end()


@functools.lru_cache(maxsize=None)
def bombs() -> Dict[str, Tuple[str, bytes]]:
    """Compressed "bombs" of zeros, each under 1 KB as sent: ``br`` (1 GiB decoded), ``gzip`` (900 KiB: one gzip
    layer of under 1 KB holds no more), ``gzip-gzip`` (``Content-Encoding: gzip, gzip``, 512 MiB decoded). Made
    once (about 5 s)."""
    import brotli

    brc, gzc = brotli.Compressor(quality=9, lgwin=24), zlib.compressobj(9, zlib.DEFLATED, 31)
    br, inner = _zeros(1024, brc.process, brc.finish), _zeros(512, gzc.compress, gzc.flush)
    outer = zlib.compressobj(9, zlib.DEFLATED, 31)
    gzip_gzip = outer.compress(inner) + outer.flush()
    one = zlib.compressobj(9, zlib.DEFLATED, 31)
    gzip = one.compress(bytes(900 * 1024)) + one.flush()
    found = {"br": ("br", br), "gzip": ("gzip", gzip), "gzip-gzip": ("gzip, gzip", gzip_gzip)}
    assert all(len(body) < 1024 for _, body in found.values()), {k: len(b) for k, (_, b) in found.items()}
    return found


def self_signed(
    folder: Path, names: Sequence[str] = ("localhost",), ips: Sequence[str] = ("127.0.0.1",)
) -> Tuple[Path, Path]:
    """(certificate, key) PEM files of a new self-signed certificate for ``names`` and ``ips`` (its own CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
