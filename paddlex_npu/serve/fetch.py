"""URL inputs of the servers: off unless allowed, and bounded when allowed.

PaddleX's serving schema lets a request's ``file`` be a URL, which PaddleX fetches with no limit (the whole body
in memory, any host). Here a URL is fetched only under a :class:`UrlPolicy`:

- off by default: an empty allow-list refuses every URL (the error names the option that allows them);
- ``http``/``https`` only, no credentials in the URL;
- the host on the allow-list: exact names, ``.suffix`` entries (any name ending so), ``*`` (any name), IP
  addresses or networks (CIDR);
- the host resolved once and *every* address checked: loopback, link-local, private, shared, reserved and
  multicast addresses are refused unless an allow-list entry holds them; the connection goes to the address
  that was checked (no second DNS lookup), with the URL's host in ``Host`` and as TLS SNI (the certificate is
  checked against that name);
- redirects followed up to ``max_redirects``, each target checked again as above before it is requested;
- the body read in chunks and refused once over ``max_bytes`` (a declared ``Content-Length`` over it is refused
  before any byte of the body is read); one total ``timeout`` for all of it, a server dripping bytes included;
- the pixel budgets (:mod:`.images`) checked on what was fetched, before any decode.

Each fetch counts in the metrics by outcome (``paddlex_npu_url_fetches_total``). Refusals are
:class:`UrlRefusedError` (category ``input``: the servers answer 422 with its message).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import ipaddress
import socket
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
OUTCOMES = ("ok", "off", "scheme", "host", "address", "redirects", "status", "too_large", "pixels", "timeout")
OUTCOMES += ("error",)

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
        """A public (global unicast) address, or one an allow-list entry holds."""
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if any(ip in n for n in self.networks if n.version == ip.version):
            return True
        return ip.is_global and not ip.is_multicast


def _ip(text: str) -> Any:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def system_resolver(host: str, port: int) -> List[str]:
    """The addresses ``host`` resolves to (the system's resolver: /etc/hosts, DNS)."""
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


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
    if not policy.host_allowed(host):
        raise UrlRefusedError(
            f"URL host {host!r} is not on this server's URL allow-list ({policy.option}): send the file "
            f"base64-encoded, or add the host to {policy.option}",
            "host",
        )
    literal = _ip(host)
    try:
        addresses = [str(literal)] if literal is not None else list(await asyncio.to_thread(resolve, host, port))
    except OSError as exc:
        raise UrlRefusedError(f"URL host {host!r} does not resolve ({exc})", "error") from None
    if not addresses:
        raise UrlRefusedError(f"URL host {host!r} resolves to no address", "error")
    for address in addresses:
        if not policy.address_allowed(ipaddress.ip_address(address.split("%")[0])):
            raise UrlRefusedError(
                f"URL host {host!r} resolves to {address}, a loopback, private, link-local or reserved address: "
                f"refused (allow its network in {policy.option}, e.g. {address}/32, only if clients may reach it)",
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
    body = bytearray()
    async for chunk in response.aiter_bytes():
        if len(body) + len(chunk) > limit:
            raise UrlRefusedError(
                f"URL {_shown(url)!r} sent over {limit} bytes ({mb}), the most a URL may bring (the server's "
                "--url-max-mb): refused while reading",
                "too_large",
            )
        body += chunk
    return bytes(body)


async def _fetch(url: str, policy: UrlPolicy, resolve: Resolver) -> bytes:
    import httpx

    async with httpx.AsyncClient(verify=policy.verify, trust_env=False, follow_redirects=False) as client:
        for _ in range(policy.max_redirects + 1):
            target = await _check(url, policy, resolve)
            headers = {"Host": target.host_header, "Accept-Encoding": "identity"}
            extensions = {"sni_hostname": target.sni} if target.sni else {}
            request = client.build_request("GET", target.connect_url, headers=headers, extensions=extensions)
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
    return f"{type(exc).__name__}: {exc}"


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


def raw_bytes(file: str, policy: UrlPolicy, pixels: Optional[PixelLimits] = None, **kwargs: Any) -> bytes:
    """A request's ``file``: fetched under ``policy`` when a URL, else base64-decoded (as PaddleX's
    ``get_raw_bytes``, for synchronous callers such as a Triton model)."""
    if is_url(file):
        return asyncio.run(fetch(file, policy, pixels, **kwargs))
    return base64.b64decode(file)


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
