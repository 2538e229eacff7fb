"""The bounded fetcher of URL inputs (``serve/fetch.py``) against real local HTTP(S) servers on loopback: off by
default, the allow-list, every resolved address checked, redirects checked again, the byte limit while streaming,
the total timeout, TLS with the name as SNI while connecting to the checked address."""

from __future__ import annotations

import asyncio
import struct
import time
import zlib

import pytest

from paddlex_npu.serve.fetch import UrlPolicy, UrlRefusedError, fetch, fetch_all
from paddlex_npu.serve.images import PixelLimits
from tests.serve.internal_host import InternalHost, bombs, self_signed

PNG = b"\x89PNG\r\n\x1a\n"


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return PNG + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


class Resolver:
    """A resolver hook: names mapped to addresses, each lookup counted."""

    def __init__(self, names):
        self.names, self.calls = dict(names), []

    def __call__(self, host, port):
        self.calls.append(host)
        if host not in self.names:
            raise OSError(f"{host}: no such name")
        return [self.names[host]]


def _get(url, policy, **kwargs):
    return asyncio.run(fetch(url, policy, **kwargs))


def _refused(url, policy, outcome, **kwargs):
    with pytest.raises(UrlRefusedError) as info:
        _get(url, policy, **kwargs)
    assert info.value.outcome == outcome, info.value
    return str(info.value)


@pytest.fixture
def internal():
    with InternalHost({"a.png": b"image bytes"}) as host:
        yield host


def test_off_by_default_fetches_nothing(internal):
    says = _refused(internal.url + "/file/a.png", UrlPolicy(), "off")
    assert "--allow-url-host" in says and internal.requests == []


def test_an_allowed_address_is_fetched(internal):
    assert _get(internal.url + "/file/a.png", UrlPolicy(("127.0.0.1",))) == b"image bytes"
    assert internal.requests == [("/file/a.png", f"127.0.0.1:{internal.port}")]


@pytest.mark.parametrize(
    "allow, url, names, outcome",
    [
        (("images.test",), "{url}/file/a.png", {}, "host"),  # a host not on the list
        (("*",), "{url}/file/a.png", {}, "address"),  # any host, but a loopback address
        (("*",), "http://10.1.2.3/file/a.png", {}, "address"),  # a private address
        (("*",), "http://169.254.169.254/latest/meta-data/", {}, "address"),  # the cloud metadata service
        (("internal.test",), "http://internal.test:{port}/file/a.png", {"internal.test": "127.0.0.1"}, "address"),
        ((".test",), "http://x.internal.test:{port}/file/a.png", {"x.internal.test": "10.0.0.7"}, "address"),
        (("localhost",), "http://localhost:{port}/file/a.png", None, "address"),  # the system's resolver
        (("127.0.0.1",), "ftp://127.0.0.1:{port}/a.png", {}, "scheme"),
        (("127.0.0.1",), "http://user:pw@127.0.0.1:{port}/file/a.png", {}, "scheme"),
        (("*",), "http://[::1/file/a.png", {}, "scheme"),  # malformed: refused, not decoded as base64
    ],
)
def test_refused_before_any_byte_is_fetched(internal, allow, url, names, outcome):
    url = url.format(url=internal.url, port=internal.port)
    kwargs = {"resolve": Resolver(names)} if names is not None else {}
    _refused(url, UrlPolicy(allow, timeout=5), outcome, **kwargs)
    assert internal.requests == []


def test_a_name_is_resolved_once_and_connected_to_by_its_checked_address(internal):
    resolve = Resolver({"images.test": "127.0.0.1"})
    policy = UrlPolicy(("images.test", "127.0.0.1/32"))
    assert _get(f"http://images.test:{internal.port}/file/a.png", policy, resolve=resolve) == b"image bytes"
    assert resolve.calls == ["images.test"]
    assert internal.requests == [("/file/a.png", f"images.test:{internal.port}")]  # the name, not the address


def test_a_redirect_to_an_internal_address_is_refused_before_it_is_requested(internal):
    with InternalHost(address="127.0.0.2") as front:
        policy = UrlPolicy(("*", "127.0.0.2/32"))  # any host with a public address, and this one
        url = f"{front.url}/redirect?to={internal.url}/file/a.png"
        _refused(url, policy, "address")
        _refused(url, UrlPolicy(("127.0.0.2",)), "host")
        assert len(front.requests) == 2 and internal.requests == []
        # allowed targets are followed, up to the limit
        hop = f"{front.url}/redirect?to={front.url}/redirect?to=/file/x"
        _refused(hop, UrlPolicy(("127.0.0.2",), max_redirects=1), "redirects")
        front.files["x"] = b"here"
        assert _get(hop, UrlPolicy(("127.0.0.2",), max_redirects=2)) == b"here"


def test_bodies_over_the_limit_are_refused_while_streaming(internal):
    policy = UrlPolicy(("127.0.0.1",), max_bytes=2 * 1024 * 1024, timeout=30)
    says = _refused(internal.url + "/big?mb=512&declared=1", policy, "too_large")
    assert "536870912 bytes" in says and "--url-max-mb" in says
    # refused on the declared length (the host wrote only what the sockets' buffers took)
    assert internal.sent < 16 * 1024 * 1024
    says = _refused(internal.url + "/big?mb=512", policy, "too_large")  # no length: counted while reading
    assert "refused while reading" in says and internal.sent < 32 * 1024 * 1024
    assert _get(internal.url + "/big?mb=2", policy) == bytes(2 * 1024 * 1024)  # at the limit: fetched


def test_a_drip_ends_at_the_total_timeout(internal):
    start = time.monotonic()
    says = _refused(internal.url + "/drip?seconds=30", UrlPolicy(("127.0.0.1",), timeout=2), "timeout")
    took = time.monotonic() - start
    assert 1.9 < took < 3.5, took
    assert "2 s" in says and "--url-timeout" in says


def test_pixels_of_what_was_fetched_are_checked(internal):
    internal.files["huge.png"] = _png_header(30000, 30000)
    limits = PixelLimits(4_000_000, 8_000_000)
    with pytest.raises(Exception, match="exceeds maximum allowed 4000000") as info:
        _get(internal.url + "/file/huge.png", UrlPolicy(("127.0.0.1",)), pixels=limits)
    assert type(info.value).__name__ == "ImageTooLargeError"
    internal.files["small.png"] = _png_header(100, 100)
    assert _get(internal.url + "/file/small.png", UrlPolicy(("127.0.0.1",)), pixels=limits)[:8] == PNG


def test_https_presents_the_name_and_checks_the_certificate_against_it(tmp_path):
    cert, key = self_signed(tmp_path, names=("images.test",), ips=())
    with InternalHost({"a.png": b"over tls"}, tls=(cert, key)) as host:
        resolve = Resolver({"images.test": "127.0.0.1", "other.test": "127.0.0.1"})
        policy = UrlPolicy(("images.test", "other.test", "127.0.0.1"), verify=str(cert), timeout=10)
        assert _get(f"https://images.test:{host.port}/file/a.png", policy, resolve=resolve) == b"over tls"
        assert host.requests == [("/file/a.png", f"images.test:{host.port}")]
        says = _refused(f"https://other.test:{host.port}/file/a.png", policy, "error", resolve=resolve)
        assert "certificate" in says.lower() or "hostname" in says.lower(), says


@pytest.mark.parametrize("entry", ["", "example.com:8080", "a*.example.com", "http://x"])
def test_bad_allow_entries_are_refused_naming_the_option(entry):
    with pytest.raises(ValueError, match="--allow-url-host"):
        UrlPolicy((entry,))


@pytest.mark.parametrize("name", ["br", "gzip", "gzip-gzip"])
def test_an_encoded_reply_is_refused_undecoded(internal, name):
    internal.encoded[name] = bombs()[name]
    start = time.monotonic()
    says = _refused(f"{internal.url}/encoded/{name}", UrlPolicy(("127.0.0.1",), max_bytes=1024 * 1024), "encoding")
    assert "Content-Encoding" in says and "identity" in says
    assert time.monotonic() - start < 2  # nothing decoded (1 GiB of br would take seconds)


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::127.0.0.1",  # IPv4-compatible (deprecated)
        "::ffff:0:10.0.0.1",  # SIIT IPv4-translated
        "64:ff9b::10.0.0.1",  # NAT64, well-known prefix
        "64:ff9b::a9fe:a9fe",  # NAT64 to the metadata service (169.254.169.254)
        "64:ff9b:1::a00:1",  # NAT64, local-use prefix
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "fec0::1",  # site-local
    ],
)
def test_ipv6_forms_carrying_internal_ipv4_are_refused_under_any_host(address):
    _refused(f"http://[{address}]/a.png", UrlPolicy(("*",), timeout=5), "address")
    resolve = Resolver({"images.test": address})  # the same address from DNS
    says = _refused("http://images.test/a.png", UrlPolicy(("*",), timeout=5), "address", resolve=resolve)
    assert "images.test" in says and address not in says


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("64:ff9b::8.8.8.8", True),  # NAT64 of a public address
        ("::ffff:8.8.8.8", True),
        ("2002:808:808::1", True),  # 6to4 of a public address
        ("2606:4700::1111", True),  # plain global IPv6
        ("::ffff:10.0.0.1", False),
    ],
)
def test_ipv6_forms_are_judged_by_the_ipv4_they_carry(address, allowed):
    import ipaddress

    assert UrlPolicy(("*",)).address_allowed(ipaddress.ip_address(address)) is allowed
    # an allow-list network of the IPv4 allows its NAT64 form too
    assert UrlPolicy(("10.0.0.0/8",)).address_allowed(ipaddress.ip_address("64:ff9b::10.0.0.1"))


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/" + "a" * 70_000, "http://127.0.0.1/a\x01b", "http://127.0.0.1/a\tb", "http://127.0.0.1/\x7f"],
)
def test_malformed_urls_are_refused_as_the_clients_mistake(url):
    says = _refused(url, UrlPolicy(("127.0.0.1",), timeout=5), "scheme")
    assert len(says) < 400  # the URL is shortened in the answer


def test_refusals_name_the_rule_and_host_not_the_addresses_or_the_connect_error():
    resolve = Resolver({"db.internal.test": "10.20.30.40"})
    says = _refused("http://db.internal.test/x", UrlPolicy(("*",), timeout=5), "address", resolve=resolve)
    assert "db.internal.test" in says and "10.20.30.40" not in says
    # a closed port: the refusal says the connection failed, not the OS error (with its address and port)
    from tests.serve.conftest import free_ports

    (port,) = free_ports(1)
    says = _refused(f"http://127.0.0.1:{port}/x", UrlPolicy(("127.0.0.1",), timeout=5), "error")
    assert "connection was refused or failed" in says and "Errno" not in says and "111" not in says


def test_a_batch_of_urls_is_fetched_at_once_within_one_timeout(internal):
    urls = [f"{internal.url}/drip?seconds=30&n={i}" for i in range(3)] + [internal.url + "/file/a.png"]
    start = time.monotonic()
    got = fetch_all(urls, UrlPolicy(("127.0.0.1",), timeout=2))
    took = time.monotonic() - start
    assert took < 3.5, took  # one timeout for the batch, not three after one another
    assert got[internal.url + "/file/a.png"] == b"image bytes"
    assert all(isinstance(got[u], UrlRefusedError) and got[u].outcome == "timeout" for u in urls[:3])
