"""Which requests the panel's actions refuse as cross-origin: upstream ComfyUI's own rule
(``server.py``, ``create_origin_only_middleware`` and ``is_loopback``, ComfyUI 0.30.0), so that
restarting a worker or releasing its models is never looser than queueing a prompt.

ComfyUI applies that rule as a middleware to every route of its app, ours included, unless it
was started with ``--enable-cors-header``; the actions apply it again themselves, so they stay
same-origin under that flag too (docs/adr/0026). The rule, as upstream has it:

- ``Sec-Fetch-Site: cross-site`` is refused;
- with both ``Host`` and ``Origin``, and a ``Host`` that is a loopback name or address, the two
  must name the same host (and port, unless either leaves the port out); an empty side, or a
  non-loopback ``Host`` (behind a reverse proxy, on a LAN address), is not judged.

Pure apart from ``is_loopback``, which resolves a name (upstream asks ``getaddrinfo``).
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Callable, Mapping


def is_loopback(host: str | None) -> bool:
    """Upstream's ``is_loopback``: an address literal is judged as it is; a name is loopback
    when its addresses, IPv4 first, start loopback (upstream stops at the first address that is
    not and answers what it had seen until then)."""
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    loopback = False
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            found = socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)
        except socket.gaierror:
            continue
        for *_, sockaddr in found:
            if not ipaddress.ip_address(sockaddr[0]).is_loopback:
                return loopback
            loopback = True
    return loopback


def refusal(
    headers: Mapping[str, str], loopback: Callable[[str | None], bool] = is_loopback
) -> str | None:
    """Why a request with these headers is refused as cross-origin; None when it is not.
    ``headers`` must look names up case-insensitively, as aiohttp's do."""
    if headers.get("Sec-Fetch-Site") == "cross-site":
        return "Sec-Fetch-Site: cross-site"
    host = headers.get("Host")
    origin = headers.get("Origin")
    if host is None or origin is None:
        return None
    host_domain: str | None = host.lower()
    parsed = urllib.parse.urlparse(origin)
    origin_domain: str | None = parsed.netloc.lower()
    host_parsed = urllib.parse.urlsplit("//" + host.lower())
    try:
        origin_port, host_port = parsed.port, host_parsed.port
    except ValueError:  # a port that is not a number: upstream's middleware fails the request
        return f"malformed Host {host!r} or Origin {origin!r}"
    if origin_port is None:  # upstream: compare without ports when either side has none
        host_domain = host_parsed.hostname
    if host_port is None:
        origin_domain = parsed.hostname
    if not host_domain or not origin_domain or not loopback(host_parsed.hostname):
        return None
    if host_domain != origin_domain:
        return f"Origin {origin!r} is not this server ({host!r})"
    return None
