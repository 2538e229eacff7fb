"""Connecting the driver to a Ray cluster in bounded time.

``ray.init`` dials the head it resolves (``--address``, ``RAY_ADDRESS``, or the latest local cluster recorded in
Ray's temp folder) and, when that address cannot be reached, retries with Ray's warnings only, for ever. Here the
address is resolved as Ray resolves it (``ray._private.services.canonicalize_bootstrap_address``) and dialled
once with a timeout first: a :class:`ConfigError` names the address, where it came from and the fix.
"""

from __future__ import annotations

import os
import socket
from typing import Optional, Tuple

from ..errors import ConfigError

DEFAULT_CONNECT_TIMEOUT = 20.0


def head_address(address: Optional[str]) -> Optional[Tuple[str, int, str]]:
    """(host, port, where it came from) of the head ``ray.init(address=address)`` would dial; None when it
    would start a Ray of its own."""
    from ray._private.services import canonicalize_bootstrap_address

    given = address
    if address and address.startswith("ray://"):  # Ray Client: the client server's host:port
        address = address[len("ray://") :]
    env = os.environ.get("RAY_ADDRESS")
    try:
        resolved = canonicalize_bootstrap_address(address)
    except (ValueError, ConnectionError) as exc:
        raise ConfigError(f"Ray address {given!r}: {exc} (give --address HOST:PORT of the head)") from None
    if resolved is None:
        return None
    host, _, port = resolved.rpartition(":")
    source = f"--address {given}" if given and given != "auto" else "RAY_ADDRESS" if env else "the latest local Ray"
    return host, int(port), source


def probe_head(address: Optional[str], timeout: float = DEFAULT_CONNECT_TIMEOUT) -> Optional[str]:
    """Dial the head ``address`` resolves to once, within ``timeout`` seconds; its ``host:port`` (None for a
    Ray of its own), or a :class:`ConfigError` saying it cannot be reached and what to do."""
    head = head_address(address)
    if head is None:
        return None
    host, port, source = head
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, socket.timeout) else str(exc) or type(exc).__name__
        raise ConfigError(
            f"cannot reach the Ray head at {host}:{port} (from {source}) within {timeout:g} s: {reason}. Check "
            "that Ray runs there (`ray status` on the head), that this machine can reach that address (a firewall; "
            "or a head that advertises an address only it reaches: ray start --head --node-ip-address=<an address "
            "the driver reaches>), or give --address HOST:PORT"
        ) from None
    return f"{host}:{port}"
