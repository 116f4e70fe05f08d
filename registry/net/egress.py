"""The egress guard: which URLs the registry may call on a user's behalf, and a POST that keeps to it.

A webhook URL is chosen by a tenant admin, not the operator, so it may point anywhere the registry can
reach: the cloud metadata service (169.254.169.254), the database, an admin port on loopback. A URL is
allowed when its scheme is http or https, it carries no credentials, and every address its host resolves
to is a public one, unless the operator's allow-list (``MODELREG_EGRESS_ALLOW``: host names, addresses
or networks in CIDR form) names the host or a network holding the address. IPv4-mapped, 6to4 and Teredo
IPv6 addresses are judged by the IPv4 address inside them.

:func:`post` connects to the very address that was checked (a second DNS answer, a rebinding, is never
asked for), sends the Host and TLS server name of the URL's host, follows no redirect, and bounds the
connect time, the whole exchange and the bytes of the answer it reads. A :class:`Poster` does the same for
a run of POSTs, keeping the connection to a checked address open between them.

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
        # Requests follow answers on a kept-alive connection: no Nagle wait on a small one.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """The TLS form: the certificate is checked against the URL's host, the socket goes to the address."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


class _Watchdog:
    """Runs an action (cutting an exchange) once its deadline passes unless disarmed first; one thread, started
    at the first arming, serves every exchange of a :class:`Poster` (a thread per exchange costs a scheduler
    round trip to start, as much as the exchange itself on a busy machine)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._action: Callable[[], None] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, action: Callable[[], None]) -> None:
        with self._cond:
            self._deadline, self._action = time.monotonic() + seconds, action
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="egress-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        """After this returns the action does not run (it runs under the same lock)."""
        with self._cond:
            self._deadline = self._action = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._deadline = self._action = None
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None or self._action is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                action, self._deadline, self._action = self._action, None, None
                action()


# A kept-alive connection the server closed while it was idle fails the next request at once, before any answer.
_STALE_CONNECTION_ERRORS = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                            ConnectionAbortedError)


class Poster:
    """POSTs to checked targets, keeping the connection open between them (a run of deliveries to one receiver).

    Each exchange has the bounds of :func:`post`. The connection is used again while the next target has the
    same scheme, host, port and checked address and the server kept it open (HTTP/1.1, its answer read to the
    end); otherwise it is closed and a new one made. A request on a kept connection that the server had closed
    meanwhile fails before any answer: it is sent once more on a new connection, within the exchange's time
    bound. Use it as a context manager (leaving closes the connection and ends the watchdog thread that cuts
    an exchange at its time bound), from one thread at a time.
    """

    def __init__(self, *, connect_timeout: float, total_timeout: float, max_response_bytes: int,
                 tls_context: ssl.SSLContext | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.total_timeout = total_timeout
        self.max_response_bytes = max_response_bytes
        self._tls_context = tls_context
        self._conn: http.client.HTTPConnection | None = None
        self._opened_for: tuple[str, str, int, str] | None = None
        self._watchdog = _Watchdog()
        self.connections = 0
        """How many connections it opened (so far)."""

    def __enter__(self) -> Poster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._watchdog.close()

    def close(self) -> None:
        """Close the kept connection (a later POST opens another)."""
        if self._conn is not None:
            self._conn.close()
        self._conn = self._opened_for = None

    def _connection(self, target: Target) -> tuple[http.client.HTTPConnection, bool]:
        """The open connection for ``target`` and True, or a new one (not connected yet) and False."""
        key = (target.scheme, target.host, target.port, target.addresses[0])
        if self._conn is not None and self._opened_for == key and self._conn.sock is not None:
            return self._conn, True
        self.close()
        timeout = min(self.connect_timeout, self.total_timeout)
        if target.scheme == "https":
            self._conn = _PinnedHTTPSConnection(target.host, target.port, key[3], timeout,
                                                self._tls_context or ssl.create_default_context())
        else:
            self._conn = _PinnedHTTPConnection(target.host, target.port, key[3], timeout)
        self._opened_for = key
        return self._conn, False

    def post(self, target: Target, body: bytes, headers: dict[str, str]) -> Answer:
        """POST ``body`` to a checked target, at its first address; never raises for the network's failures."""
        started = time.monotonic()
        conn, kept = self._connection(target)
        answer, stale = self._exchange(conn, target, body, headers, started, self.total_timeout)
        if stale and kept:
            self.close()
            conn, _ = self._connection(target)
            answer, _ = self._exchange(conn, target, body, headers, started,
                                       max(0.05, self.total_timeout - (time.monotonic() - started)))
        return answer

    def _exchange(self, conn: http.client.HTTPConnection, target: Target, body: bytes, headers: dict[str, str],
                  started: float, budget: float) -> tuple[Answer, bool]:
        """One request and its answer within ``budget`` seconds; and whether it failed as a stale connection
        does. The connection is closed after it unless the server keeps it open and its answer was read whole."""
        cut = threading.Event()
        keep = False

        def _cut() -> None:
            cut.set()
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        self._watchdog.arm(budget, _cut)
        try:
            if conn.sock is None:
                conn.connect()
                self.connections += 1
            remaining = max(0.05, budget - (time.monotonic() - started))
            conn.sock.settimeout(remaining)
            conn.request("POST", target.path, body=body, headers={**headers, "Content-Length": str(len(body))})
            response = conn.getresponse()
            data = bytearray()
            while len(data) <= self.max_response_bytes:
                chunk = response.read(min(65536, self.max_response_bytes + 1 - len(data)))
                if not chunk:
                    break
                data += chunk
            status = response.status
            if cut.is_set():
                raise TimeoutError("the exchange took too long")
            if len(data) > self.max_response_bytes:
                return Answer(status, bytes(data[:self.max_response_bytes]),
                              f"answer over {self.max_response_bytes} bytes (cut)", time.monotonic() - started), False
            keep = response.isclosed() and not response.will_close
            return Answer(status, bytes(data), None, time.monotonic() - started), False
        except (OSError, http.client.HTTPException, ValueError) as exc:
            error = f"timed out after {self.total_timeout:g}s" if cut.is_set() else f"{type(exc).__name__}: {exc}"
            stale = not cut.is_set() and isinstance(exc, _STALE_CONNECTION_ERRORS)
            return Answer(None, b"", error[:500], time.monotonic() - started), stale
        finally:
            self._watchdog.disarm()
            if not keep:
                conn.close()


def post(target: Target, body: bytes, headers: dict[str, str], *, connect_timeout: float, total_timeout: float,
         max_response_bytes: int, tls_context: ssl.SSLContext | None = None) -> Answer:
    """POST ``body`` to a checked target, at its first address, on a connection of its own (closed after);
    never raises for the network's failures.

    The exchange is cut at ``total_timeout`` whatever the server does (a slow drip of headers included),
    at most ``max_response_bytes`` of the answer are read, and a redirect is an answer like any other.
    """
    with Poster(connect_timeout=connect_timeout, total_timeout=total_timeout, max_response_bytes=max_response_bytes,
                tls_context=tls_context) as poster:
        return poster.post(target, body, headers)
