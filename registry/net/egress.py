"""The egress guard: which URLs the registry may call on a user's behalf, and a POST that keeps to it.

A webhook URL is chosen by a tenant admin, not the operator, so it may point anywhere the registry can
reach: the cloud metadata service (169.254.169.254), the database, an admin port on loopback. A URL is
allowed when its scheme is http or https, it carries no credentials, and every address its host resolves
to is a public one, unless the operator's allow-list (``MODELREG_EGRESS_ALLOW``: host names, addresses
or networks in CIDR form) names the host or a network holding the address. IPv4-mapped, 6to4 and Teredo
IPv6 addresses are judged by the IPv4 address inside them.

:func:`post` connects to the very address that was checked (a second DNS answer, a rebinding, is never
asked for), sends the Host and TLS server name of the URL's host, follows no redirect, and bounds the
connect time, the whole exchange and the bytes of the answer it reads.

Example:
    >>> policy = EgressPolicy.from_entries(["127.0.0.1/32"])
    >>> policy.check("http://127.0.0.1:9000/hook").addresses
    ('127.0.0.1',)
    >>> EgressPolicy().check("http://169.254.169.254/latest/meta-data")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    registry.domain.errors.EgressRefusedError: ...
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urlsplit

from registry.domain.errors import EgressRefusedError, InvalidInputError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

MAX_URL_LENGTH = 2048
_DEFAULT_PORTS = {"http": 80, "https": 443}


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (TCP), as the system resolver answers."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise EgressRefusedError(f"cannot resolve host {host!r}: {exc}", host=host, reason="unresolvable") from None
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
    return None


def forbidden_reason(address: Address) -> str | None:
    """Why ``address`` is no place for the registry to call without the operator's leave (None: public)."""
    inner = _embedded_ipv4(address)
    if inner is not None:
        reason = forbidden_reason(inner)
        return f"{reason} (inside {address})" if reason else None
    for reason, flag in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                         ("private", address.is_private), ("multicast", address.is_multicast),
                         ("unspecified", address.is_unspecified), ("reserved", address.is_reserved)):
        if flag:
            return reason
    # Shared address space (100.64.0.0/10), documentation and benchmarking ranges and the like.
    return None if address.is_global else "not global"


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: where to connect (``addresses``, each allowed) and what to ask for."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's allow-list and the resolver the check asks.

    Attributes:
        hosts: host names (lower case) allowed whatever they resolve to.
        networks: networks whose addresses are allowed though private, loopback or link-local.
        resolver: host, port -> addresses (tests pass their own; default the system's).
    """

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_entries(cls, entries: Iterable[str], resolver: Resolver = system_resolver) -> EgressPolicy:
        """Parse allow-list entries: an address or network (``10.0.0.0/8``, ``::1``), else a host name.

        Raises:
            InvalidInputError: an empty entry.
        """
        hosts: set[str] = set()
        networks: list[Network] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                raise InvalidInputError("an empty egress allow-list entry", field="egress_allow")
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks), resolver)

    def _allowed_address(self, address: Address) -> bool:
        inner = _embedded_ipv4(address)
        return any(address in net or (inner is not None and inner in net) for net in self.networks)

    def check(self, url: str) -> Target:
        """Check ``url`` and resolve its host once.

        Raises:
            EgressRefusedError: a scheme other than http(s), credentials in the URL, no host, a bad
                port, a host that does not resolve, or an address the allow-list does not permit.
        """
        if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
            raise EgressRefusedError(f"a URL is at most {MAX_URL_LENGTH} characters", reason="too-long")
        if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
            raise EgressRefusedError("a URL has no spaces or control characters", reason="malformed")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise EgressRefusedError(f"only http and https URLs are allowed, not {parts.scheme!r}",
                                     url=url, reason="scheme")
        if parts.username is not None or parts.password is not None:
            raise EgressRefusedError("a URL may not carry credentials (user:password@)", reason="credentials")
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise EgressRefusedError(f"URL {url!r} names no host", url=url, reason="malformed")
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            raise EgressRefusedError(f"URL {url!r} has an invalid port", url=url, reason="malformed") from None
        host_allowed = host.lower() in self.hosts
        try:
            literal: Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        found = [str(literal)] if literal is not None else self.resolver(host, port)
        if not found:
            raise EgressRefusedError(f"host {host!r} resolves to no address", host=host, reason="unresolvable")
        for text in found:
            address = ipaddress.ip_address(text)
            reason = forbidden_reason(address)
            if reason and not host_allowed and not self._allowed_address(address):
                if literal is not None:
                    raise EgressRefusedError(
                        f"{url!r} names {address}, a {reason} address; the operator may allow it "
                        f"with MODELREG_EGRESS_ALLOW", url=url, host=host, address=str(address), reason=reason)
                # A name's answer stays ours: whoever chose the URL learns no internal address (or its kind)
                # from the refusal, so the guard is no oracle that maps the operator's DNS.
                raise EgressRefusedError(
                    f"{url!r} resolves to an address that is not a public address; the operator may allow "
                    f"the host with MODELREG_EGRESS_ALLOW", url=url, host=host, reason="not-public")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(url=url, scheme=scheme, host=host, port=port, path=path, addresses=tuple(found))


@dataclass(frozen=True, slots=True)
class Answer:
    """What a guarded POST got back: the status (None when it failed before one) or the error."""

    status: int | None
    body: bytes
    error: str | None
    duration: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to one checked address, with the URL's host in the Host header."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """The TLS form: the certificate is checked against the URL's host, the socket goes to the address."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def post(target: Target, body: bytes, headers: dict[str, str], *, connect_timeout: float, total_timeout: float,
         max_response_bytes: int, tls_context: ssl.SSLContext | None = None) -> Answer:
    """POST ``body`` to a checked target, at its first address; never raises for the network's failures.

    The exchange is cut at ``total_timeout`` whatever the server does (a slow drip of headers included),
    at most ``max_response_bytes`` of the answer are read, and a redirect is an answer like any other.
    """
    started = time.monotonic()
    address = target.addresses[0]
    timeout = min(connect_timeout, total_timeout)
    if target.scheme == "https":
        conn: http.client.HTTPConnection = _PinnedHTTPSConnection(
            target.host, target.port, address, timeout, tls_context or ssl.create_default_context())
    else:
        conn = _PinnedHTTPConnection(target.host, target.port, address, timeout)
    cut = threading.Event()

    def _cut() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(total_timeout, _cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        remaining = max(0.05, total_timeout - (time.monotonic() - started))
        conn.sock.settimeout(remaining)
        conn.request("POST", target.path, body=body, headers={**headers, "Content-Length": str(len(body))})
        response = conn.getresponse()
        data = bytearray()
        while len(data) <= max_response_bytes:
            chunk = response.read(min(65536, max_response_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
        status = response.status
        if cut.is_set():
            raise TimeoutError("the exchange took too long")
        if len(data) > max_response_bytes:
            return Answer(status, bytes(data[:max_response_bytes]), f"answer over {max_response_bytes} bytes (cut)",
                          time.monotonic() - started)
        return Answer(status, bytes(data), None, time.monotonic() - started)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        error = f"timed out after {total_timeout:g}s" if cut.is_set() else f"{type(exc).__name__}: {exc}"
        return Answer(None, b"", error[:500], time.monotonic() - started)
    finally:
        watchdog.cancel()
        conn.close()
