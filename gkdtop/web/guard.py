"""Who may talk to `gkdtop serve`: the per-run token, and the Host and Origin a request must carry.

No aiohttp or Textual here, so the rules are plain functions a test can call. Why each check:
- the token: the server's URL is the capability; without it nothing but a 404 answers;
- Host: a page on evil.example whose name is re-pointed at 127.0.0.1 (DNS rebinding) sends
  `Host: evil.example`; only this machine's names and the public URL's are served, on any port
  (an ssh tunnel may forward any local port);
- Origin: a WebSocket is not bound by the same-origin policy, so any page the user visits could
  open one to localhost and press keys; only the page this server served (same scheme, host and
  port as the request's Host) or the public URL's origin may.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


def new_token() -> str:
    """A fresh random token for one run: 32 bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def split_host(host: str) -> tuple[str, int | None]:
    """`name:port`, `[::1]:port` or `name` -> (lower-case name, port); ValueError on garbage."""
    host = host.strip()
    if not host:
        raise ValueError("empty Host")
    parts = urlsplit(f"//{host}")
    name = parts.hostname
    port = parts.port  # ValueError when not a number or out of range
    if not name or parts.path or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"not a host: {host!r}")
    return name.lower().rstrip("."), port


def is_loopback(host: str) -> bool:
    """Whether a bind address or name is this machine only."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_NAME_RE = re.compile(r"(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def bind_address(host: str) -> str:
    """A --host as the server will listen on it: an IP address (`[::]` as `::`) or a host name that resolves;
    ValueError, in words a user can act on, for `0`, `*`, `` and other shorthands the URL could not carry."""
    given = host
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("", "*", "0", "any", "all"):
        raise ValueError(f"{given!r} is not an address: use 0.0.0.0 (every IPv4 interface), :: (every interface) "
                         "or 127.0.0.1 (this machine only)")
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0])) + (f"%{host.split('%', 1)[1]}" if "%" in host else "")
    except ValueError:
        pass
    if re.fullmatch(r"[\d.]+", host) or not _NAME_RE.fullmatch(host):  # `127.1`: a shorthand, not a name
        raise ValueError(f"{given!r} is neither an IP address nor a host name")
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise ValueError(f"{given!r} cannot be resolved to an address") from None
    return host


def machine_names(bind: str) -> set[str]:
    """The names a browser may use for this machine when the server listens beyond loopback."""
    import psutil

    names = {bind.lower(), socket.gethostname().lower(), socket.getfqdn().lower()}
    if bind in ("0.0.0.0", "::", ""):
        for addrs in psutil.net_if_addrs().values():
            for addr in addrs:
                if addr.family in (socket.AF_INET, socket.AF_INET6):
                    names.add(addr.address.split("%", 1)[0].lower())
    names.discard("")
    return names


@dataclass
class Guard:
    """The token and the names and origins this server answers to."""

    token: str
    hostnames: set[str] = field(default_factory=lambda: set(LOOPBACK_NAMES))
    origins: set[str] = field(default_factory=set)  # extra allowed origins: the public URL's

    @classmethod
    def for_server(cls, bind: str, public_url: str | None, token: str | None = None) -> Guard:
        guard = cls(token or new_token())
        if not is_loopback(bind):
            guard.hostnames |= machine_names(bind)
        if public_url:
            parts = urlsplit(public_url)
            guard.hostnames.add((parts.hostname or "").lower())
            guard.origins.add(origin_of(public_url))
        return guard

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def host_problem(self, host: str | None) -> str | None:
        """Why a request's Host header is refused, or None."""
        if not host:
            return "no Host header"
        try:
            name, _port = split_host(host)
        except ValueError:
            return f"Host {host[:80]!r} is not a host name"
        if name not in self.hostnames:
            return f"Host {name[:80]!r} is not a name of this server (see --public-url)"
        return None

    def origin_problem(self, origin: str | None, host: str | None) -> str | None:
        """Why a WebSocket's Origin is refused, or None: it must be this server's own page."""
        if not origin or origin == "null":
            return "no Origin: only the page this server serves may connect"
        if origin in self.origins:
            return None
        if host and origin.lower() in (f"http://{host}".lower(), f"https://{host}".lower()):
            return None
        return f"Origin {origin[:80]!r} is not this server's page"


def origin_of(url: str) -> str:
    """`https://proxy.example/gkdtop/` -> `https://proxy.example` (the port only when not the default)."""
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = f":{parts.port}" if parts.port not in (None, default) else ""
    return f"{parts.scheme}://{(parts.hostname or '').lower()}{port}" if ":" not in (parts.hostname or "") else \
        f"{parts.scheme}://[{parts.hostname}]{port}"


def check_public_url(url: str) -> str:
    """A --public-url as given, or ValueError naming what is wrong with it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected http(s)://HOST[:PORT][/PATH], got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"expected no query, fragment or user in it, got {url!r}")
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise ValueError(f"bad port in {url!r}") from None
    return url.rstrip("/") + "/"
