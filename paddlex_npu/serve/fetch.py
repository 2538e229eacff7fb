"""URL inputs of the servers: off unless allowed, and bounded when allowed.

PaddleX's serving schema lets a request's ``file`` be a URL, which PaddleX fetches with no limit (the whole body
in memory, any host). Here a URL is fetched only under a :class:`UrlPolicy`:

- off by default: an empty allow-list refuses every URL (the error names the option that allows them);
- ``http``/``https`` only, no credentials in the URL;
- the host on the allow-list: exact names, ``.suffix`` entries (any name ending so), ``*`` (any name), IP
  addresses or networks (CIDR);
- at most ``MAX_URL_CHARS`` characters, no control characters, nothing httpx refuses (all refused as the
  client's mistake);
- the host resolved once (in a thread pool of its own, within the total timeout) and *every* address checked:
  loopback, link-local, private, shared, reserved and multicast addresses are refused unless an allow-list entry
  holds them; an IPv6 address that carries an IPv4 one (IPv4-mapped or -compatible, SIIT, NAT64 ``64:ff9b::/96``,
  6to4, Teredo) is judged by the IPv4 it carries, and the local-only NAT64 ``64:ff9b:1::/48`` and site-local
  ``fec0::/10`` are refused; the connection goes to the address that was checked (no second DNS lookup), with
  the URL's host in ``Host`` and as TLS SNI (the certificate is checked against that name);
- redirects followed up to ``max_redirects``, each target checked again as above before it is requested;
- ``Accept-Encoding: identity`` asked, and only an unencoded body taken: a reply with a ``Content-Encoding`` is
  refused, never decoded (a compressed "bomb" of a few hundred bytes cannot grow into gigabytes);
- the body read in chunks as sent and refused once over ``max_bytes`` (a declared ``Content-Length`` over it is
  refused before any byte of the body is read), held once; one total ``timeout`` for all of it, a server
  dripping bytes included;
- the pixel budgets (:mod:`.images`) checked on what was fetched, before any decode.

Each fetch counts in the metrics by outcome (``paddlex_npu_url_fetches_total``). Refusals are
:class:`UrlRefusedError` (category ``input``: the servers answer 422 with its message); a refusal names the rule
and the host the client gave, never the addresses it resolves to nor the connection's error.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import functools
import io
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple, Union
from urllib.parse import urljoin, urlsplit

from ..errors import RequestRefusedError, UrlRefusedError
from ..paddlex import serving as paddlex_serving
from . import metrics
from .images import PixelLimits, check_pixels

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # serve's default request body limit; servers pass their own
DEFAULT_TIMEOUT = 20.0
DEFAULT_MAX_REDIRECTS = 3
REDIRECTS = (HTTPStatus.MOVED_PERMANENTLY, HTTPStatus.FOUND, HTTPStatus.SEE_OTHER)  # the upstream's statuses
REDIRECTS += (HTTPStatus.TEMPORARY_REDIRECT, HTTPStatus.PERMANENT_REDIRECT)
MAX_URL_CHARS = 8192  # a longer URL is refused as the client's mistake (httpx's own limit is 65536)
OUTCOMES = ("ok", "off", "scheme", "host", "address", "redirects", "status", "too_large", "pixels", "timeout")
OUTCOMES += ("encoding", "error")
# IPv6 prefixes whose last 32 bits are an IPv4 address: IPv4-compatible (deprecated), SIIT IPv4-translated,
# NAT64's well-known prefix (RFC 6052). IPv4-mapped, 6to4 and Teredo have their ``ipaddress`` properties.
LAST_32_IPV4 = tuple(ipaddress.ip_network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
# Never global, whatever the IPv4 inside: NAT64's local-use prefix (RFC 8215; where the IPv4 sits depends on the
# operator's prefix length) and the deprecated site-local addresses (RFC 3879).
LOCAL_ONLY = tuple(ipaddress.ip_network(n) for n in ("64:ff9b:1::/48", "fec0::/10"))
DNS_THREADS = 4  # lookups run here, not in the event loop's shared pool (one that hangs holds only one of these)

IpNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class UrlPolicy:
    """Which URLs a server fetches and how much. ``allow`` empty: none (the default)."""

    allow: Tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    verify: Union[bool, str] = True  # TLS: the system's CAs, or a CA bundle file
    option: str = "--allow-url-host"  # named in the refusal: how this server allows URLs
    hosts: frozenset = field(init=False, repr=False)
    suffixes: Tuple[str, ...] = field(init=False, repr=False)
    any_host: bool = field(init=False, repr=False)
    networks: Tuple[IpNetwork, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        hosts, suffixes, networks = set(), [], []
        for entry in self.allow:
            text = entry.strip().lower().rstrip(".")
            if not text:
                raise ValueError(f"{self.option}: an empty entry in {list(self.allow)}")
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if text.startswith("."):
                suffixes.append(text)
            elif text != "*":
                hosts.add(text)
            if "/" in text or ":" in text or "@" in text or (text != "*" and "*" in text):
                raise ValueError(
                    f"{self.option} {entry!r}: give a host name (images.example.com), a suffix (.example.com), "
                    "* (any host with public addresses), or an IP address or network (10.0.0.0/8)"
                )
        for name in ("max_bytes", "timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"the URL {name} must be > 0, got {getattr(self, name)}")
        if self.max_redirects < 0:
            raise ValueError(f"the URL max_redirects must be >= 0, got {self.max_redirects}")
        object.__setattr__(self, "hosts", frozenset(hosts))
        object.__setattr__(self, "suffixes", tuple(suffixes))
        object.__setattr__(self, "any_host", "*" in {a.strip() for a in self.allow})
        object.__setattr__(self, "networks", tuple(networks))

    @property
    def enabled(self) -> bool:
        return bool(self.allow)

    def host_allowed(self, host: str) -> bool:
        """Whether the URL's host (a name, or an address literal) is on the allow-list."""
        ip = _ip(host)
        if ip is not None:
            return self.any_host or any(ip in n for n in self.networks if n.version == ip.version)
        return self.any_host or host in self.hosts or any(host.endswith(s) for s in self.suffixes)

    def address_allowed(self, ip: Any) -> bool:
        """A public (global unicast) address, or one an allow-list entry holds; an IPv6 address carrying IPv4
        ones is judged by those (every one of them allowed)."""
        if any(ip in n for n in self.networks if n.version == ip.version):
            return True
        carried = carried_ipv4(ip)
        if carried:
            return all(self.address_allowed(v4) for v4 in carried)
        if any(ip in n for n in LOCAL_ONLY if n.version == ip.version):
            return False
        return ip.is_global and not ip.is_multicast


def carried_ipv4(ip: Any) -> Tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (a Teredo one: its server's and its client's); () for none."""
    if ip.version == 4:
        return ()
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    if ip.teredo is not None:
        return tuple(ip.teredo)
    if any(ip in n for n in LAST_32_IPV4):
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    return ()


def _ip(text: str) -> Any:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def system_resolver(host: str, port: int) -> List[str]:
    """The addresses ``host`` resolves to (the system's resolver: /etc/hosts, DNS)."""
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


_DNS: Optional[ThreadPoolExecutor] = None


async def _resolve(resolve: Resolver, host: str, port: int) -> List[str]:
    """``resolve(host, port)`` in the lookups' own threads; the caller's timeout bounds the wait (a lookup that
    outlives it ends in its thread, holding none of the event loop's shared pool)."""
    global _DNS
    if _DNS is None:
        _DNS = ThreadPoolExecutor(DNS_THREADS, thread_name_prefix="paddlex-npu-dns")
    return list(await asyncio.get_running_loop().run_in_executor(_DNS, resolve, host, port))


@dataclass(frozen=True)
class _Target:
    """A checked URL: where to connect (an address) and the name to present (Host, SNI)."""

    url: str
    connect_url: str
    host_header: str
    sni: Optional[str]


def _shown(url: str) -> str:
    return url if len(url) <= 120 else url[:117] + "..."


def _parse(url: str) -> Tuple[Any, str, int]:
    """(the split URL, its ASCII host, its port) of an http(s) URL with a host and no credentials."""
    try:
        if len(url) > MAX_URL_CHARS:
            raise ValueError(f"{len(url)} characters, over the {MAX_URL_CHARS} a URL may have")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            raise ValueError("a control character (tab, line break, ...) in the URL; percent-encode it")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("only http:// and https:// URLs with a host are fetched")
        if parts.username is not None or parts.password is not None:
            raise ValueError("credentials in a URL are not sent; remove them")
        host = parts.hostname.rstrip(".")
        host = host if host.isascii() else host.encode("idna").decode("ascii")
        return parts, host, parts.port or (443 if parts.scheme == "https" else 80)
    except (ValueError, UnicodeError) as exc:
        raise UrlRefusedError(f"URL {_shown(url)!r}: {exc}", "scheme") from None


async def _check(url: str, policy: UrlPolicy, resolve: Resolver) -> _Target:
    """The URL's scheme, host and every address it resolves to, checked; UrlRefusedError otherwise."""
    parts, host, port = _parse(url)
    shown = _shown(host)
    if not policy.host_allowed(host):
        raise UrlRefusedError(
            f"URL host {shown!r} is not on this server's URL allow-list ({policy.option}): send the file "
            f"base64-encoded, or add the host to {policy.option}",
            "host",
        )
    literal = _ip(host)
    try:
        addresses = [str(literal)] if literal is not None else await _resolve(resolve, host, port)
    except (OSError, UnicodeError):
        raise UrlRefusedError(f"URL host {shown!r} does not resolve: check the URL", "error") from None
    if not addresses:
        raise UrlRefusedError(f"URL host {shown!r} resolves to no address: check the URL", "error")
    for address in addresses:
        if not policy.address_allowed(ipaddress.ip_address(address.split("%")[0])):
            raise UrlRefusedError(
                f"URL host {shown!r} is or resolves to an address that is not public (loopback, private, "
                "link-local, reserved, or an IPv6 form carrying such an IPv4 address): refused (allow its network "
                f"in {policy.option} only if clients may reach it)",
                "address",
            )
    ip = ipaddress.ip_address(addresses[0].split("%")[0])
    netloc = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
    default = port == (443 if parts.scheme == "https" else 80)
    host_header = host if default else f"{host}:{port}"
    path = parts.path or "/"
    connect = f"{parts.scheme}://{netloc}{path}" + (f"?{parts.query}" if parts.query else "")
    return _Target(url, connect, host_header, host if parts.scheme == "https" and literal is None else None)


async def _read_limited(response: Any, policy: UrlPolicy, url: str) -> bytes:
    limit = policy.max_bytes
    mb = f"{limit / (1024 * 1024):g} MB"
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise UrlRefusedError(
            f"URL {_shown(url)!r} has {int(declared)} bytes, over the {limit} bytes ({mb}) a URL may bring "
            "(the server's --url-max-mb)",
            "too_large",
        )
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise UrlRefusedError(
            f"URL {_shown(url)!r} answered with Content-Encoding {encoding[:40]!r} though asked for identity: this "
            "server takes only unencoded bodies (images and PDFs are compressed already); serve the file as is",
            "encoding",
        )
    body = io.BytesIO()  # its getvalue() hands over its buffer: the body is held once
    async for chunk in response.aiter_raw():  # as sent: nothing decoded
        if body.tell() + len(chunk) > limit:
            raise UrlRefusedError(
                f"URL {_shown(url)!r} sent over {limit} bytes ({mb}), the most a URL may bring (the server's "
                "--url-max-mb): refused while reading",
                "too_large",
            )
        body.write(chunk)
    return body.getvalue()


@functools.lru_cache(maxsize=8)
def _tls_context(verify: Union[bool, str]) -> Any:
    """The TLS context of ``verify`` (the system's CAs, or a bundle file), made once: loading CAs takes tens of
    milliseconds, which each fetch would otherwise spend on the event loop."""
    import ssl

    import httpx

    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context(verify=verify, trust_env=False)


async def _fetch(url: str, policy: UrlPolicy, resolve: Resolver) -> bytes:
    import httpx

    tls = _tls_context(policy.verify)
    async with httpx.AsyncClient(verify=tls, trust_env=False, follow_redirects=False) as client:
        for _ in range(policy.max_redirects + 1):
            target = await _check(url, policy, resolve)
            headers = {"Host": target.host_header, "Accept-Encoding": "identity"}
            extensions = {"sni_hostname": target.sni} if target.sni else {}
            try:
                request = client.build_request("GET", target.connect_url, headers=headers, extensions=extensions)
            except (httpx.InvalidURL, ValueError, UnicodeError):
                raise UrlRefusedError(f"URL {_shown(url)!r} is not a valid URL: check it", "scheme") from None
            try:
                response = await client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise UrlRefusedError(f"URL {_shown(url)!r} could not be fetched ({_why(exc)})", "error") from None
            try:
                if response.status_code in REDIRECTS and response.headers.get("location"):
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != HTTPStatus.OK:
                    raise UrlRefusedError(
                        f"URL {_shown(url)!r} answered HTTP {response.status_code}, not 200: check the URL", "status"
                    )
                return await _read_limited(response, policy, url)
            except httpx.HTTPError as exc:
                raise UrlRefusedError(f"URL {_shown(url)!r} failed while reading ({_why(exc)})", "error") from None
            finally:
                await response.aclose()
    raise UrlRefusedError(
        f"URL {_shown(url)!r}: more than {policy.max_redirects} redirects (the server's --url-max-redirects)",
        "redirects",
    )


def _why(exc: BaseException) -> str:
    """What went wrong, in general terms: the exception's text (addresses, the server's internals) stays out of
    the client's answer."""
    import ssl

    import httpx

    cause: Optional[BaseException] = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return "TLS failed: the host's certificate is not trusted or not for this host name"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException):
        return "the host did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return "the connection was refused or failed"
    if isinstance(exc, httpx.ProtocolError):
        return "the host's reply is not valid HTTP"
    return "a transport error"


def _sniff_type(raw: bytes) -> str:
    return "PDF" if raw[:5] == b"%PDF-" else "IMAGE"


async def fetch(
    url: str,
    policy: UrlPolicy,
    pixels: Optional[PixelLimits] = None,
    max_num_imgs: Optional[int] = None,
    resolve: Optional[Resolver] = None,
    count: Optional[Callable[[str], None]] = None,
) -> bytes:
    """The body of ``url`` under ``policy`` (UrlRefusedError otherwise), its pixels checked against ``pixels``
    (PaddleX's ImageTooLargeError); its outcome counted by ``count`` (default: serve's metrics)."""
    count = count or metrics.url_fetched
    if not policy.enabled:
        count("off")
        raise UrlRefusedError(
            f"file is a URL, and this server fetches no URLs: send the file base64-encoded, or allow URL hosts with "
            f"{policy.option} HOST (see docs/threat-model.md)",
            "off",
        )
    try:
        async with asyncio.timeout(policy.timeout):
            raw = await _fetch(url, policy, resolve or system_resolver)
    except TimeoutError:
        count("timeout")
        raise UrlRefusedError(
            f"URL {_shown(url)!r} was not fetched within {policy.timeout:g} s (the server's --url-timeout)", "timeout"
        ) from None
    except UrlRefusedError as exc:
        count(exc.outcome)
        raise
    if pixels is not None:
        try:
            check_pixels(raw, _sniff_type(raw), max_num_imgs, pixels)
        except Exception:
            count("pixels")
            raise
    count("ok")
    return raw


def is_url(text: Any) -> bool:
    """Whether a ``file`` field is a URL rather than base64: PaddleX's quick test (``http://`` or ``https://``),
    without its parse (a malformed URL is refused by the fetch, not decoded as base64)."""
    return isinstance(text, str) and text.startswith(("http://", "https://"))


Fetched = Dict[str, Union[bytes, BaseException]]


def raw_bytes(
    file: str, policy: UrlPolicy, pixels: Optional[PixelLimits] = None, fetched: Optional[Fetched] = None, **kwargs: Any
) -> bytes:
    """A request's ``file``: fetched under ``policy`` when a URL (or taken from ``fetched``, :func:`fetch_all`'s
    answer: its bytes, or its refusal raised), else base64-decoded (as PaddleX's ``get_raw_bytes``, for
    synchronous callers such as a Triton model)."""
    if is_url(file):
        if fetched is not None and file in fetched:
            got = fetched[file]
            if isinstance(got, BaseException):
                raise got
            return got
        return asyncio.run(fetch(file, policy, pixels, **kwargs))
    return base64.b64decode(file)


def fetch_all(urls: Sequence[str], policy: UrlPolicy, pixels: Optional[PixelLimits] = None, **kwargs: Any) -> Fetched:
    """Each distinct URL of ``urls`` fetched at once (a Triton batch's), so the whole batch takes at most one
    ``policy.timeout``: its bytes, or the exception its fetch raised."""
    distinct = list(dict.fromkeys(urls))

    async def every() -> List[Any]:
        return await asyncio.gather(*(fetch(u, policy, pixels, **kwargs) for u in distinct), return_exceptions=True)

    return dict(zip(distinct, asyncio.run(every()))) if distinct else {}


# ---- Triton: the policy as a model's parameters ------------------------------------------------------------------


def url_parameters(policy: UrlPolicy) -> Dict[str, str]:
    """``policy`` as a Triton model's ``parameters`` (none when URL inputs are off)."""
    if not policy.enabled:
        return {}
    return {
        "url_allow": ",".join(policy.allow),
        "url_max_bytes": str(policy.max_bytes),
        "url_timeout": f"{policy.timeout:g}",
        "url_max_redirects": str(policy.max_redirects),
    }


def policy_from_parameters(params: Dict[str, str], option: str) -> UrlPolicy:
    """The policy :func:`url_parameters` wrote (URL inputs off when the parameters are absent)."""
    allow = tuple(a for a in (params.get("url_allow") or "").split(",") if a)
    return UrlPolicy(
        allow,
        max_bytes=int(params.get("url_max_bytes") or DEFAULT_MAX_BYTES),
        timeout=float(params.get("url_timeout") or DEFAULT_TIMEOUT),
        max_redirects=int(params.get("url_max_redirects") or DEFAULT_MAX_REDIRECTS),
        option=option,
    )


# ---- serve: PaddleX's app --------------------------------------------------------------------------------------

_FETCHED: contextvars.ContextVar = contextvars.ContextVar("paddlex_npu_fetched", default=None)


def install(policy: UrlPolicy, pixels: Optional[PixelLimits] = None) -> Callable[[Any], Any]:
    """In a server process running PaddleX's app: PaddleX's own fetchers (``get_raw_bytes``/
    ``get_raw_bytes_async``) give the bytes fetched for this request, or fetch under ``policy``. Returns the hook
    the app's adapter runs around each endpoint (:func:`paddlex_npu.paddlex.serving.adapt_app`): a request whose
    ``file`` is a URL is fetched under ``policy`` before PaddleX's endpoint runs (a refusal answered by its reply
    row with its reason)."""
    too_large = paddlex_serving.serving_utils().ImageTooLargeError

    async def get_raw_bytes_async(file: str, session: Any = None) -> bytes:
        fetched: Optional[Dict[str, bytes]] = _FETCHED.get()
        if fetched is not None and file in fetched:
            return fetched[file]
        if is_url(file):
            return await fetch(file, policy, pixels)
        return base64.b64decode(file)

    def get_raw_bytes(file: str) -> bytes:
        return raw_bytes(file, policy, pixels)

    if policy.enabled:  # httpx imported and the CAs loaded now, not on the event loop by the first URL request
        _tls_context(policy.verify)
    paddlex_serving.install_fetchers(get_raw_bytes_async, get_raw_bytes)

    @contextlib.asynccontextmanager
    async def fetched_first(request: Any) -> AsyncIterator[None]:
        file = getattr(request, "file", None)
        if not is_url(file):
            yield
            return
        try:
            raw = await fetch(file, policy, pixels)
        except too_large as exc:  # PaddleX's pixel bound (a UrlRefusedError is answered as it is)
            raise RequestRefusedError(str(exc)) from None
        token = _FETCHED.set({file: raw})
        try:
            yield
        finally:
            _FETCHED.reset(token)

    return fetched_first


def uninstall() -> List[str]:
    """Restore PaddleX's fetchers (at the end of the app's lifespan); a note for each one replaced meanwhile."""
    return paddlex_serving.uninstall_fetchers()
