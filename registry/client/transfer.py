"""Ranged reads of a transport URL straight into the caller's memory.

A node spends its CPU on three things per byte: receiving it, hashing it and writing it. httpx parses
each response body in Python, 64 KiB at a time, and hands out new ``bytes`` objects; for a multi-gigabyte
model that costs as much CPU as the hashing. :class:`RangeReader` sends the same ranged ``GET`` with the
standard library's ``http.client`` and reads the body with ``readinto`` into a buffer the caller owns: one
copy from the socket and no Python per chunk. Connections are kept alive per thread and per origin.

It is used only where httpx would have gone straight to the server: ``http``/``https`` URLs with no proxy
configured for them in the environment (httpx honours ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``;
those requests stay on httpx). TLS uses the context httpx would build, so the trusted certificates
(``SSL_CERT_FILE``, ``SSL_CERT_DIR``, certifi) are the same.

The checks are the same on both paths (:func:`check_range_answer`): a ``206`` for exactly the range and
the blob's declared total, or a ``200`` carrying the whole blob for a range that starts at 0; nothing
past the range is ever read.

Example (no network: which URLs take this path):
    >>> RangeReader(timeout=5).usable("http://127.0.0.1:9000/bucket/key?X-Amz-Signature=x")
    True
    >>> RangeReader(timeout=5).usable("ftp://example.invalid/blob")
    False
"""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.request
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from registry.client.errors import NetworkError, TransportError
from registry.client.http import tls_context
from registry.domain.errors import SizeMismatchError

USER_AGENT = "modelreg-client/0.1"
MAX_ERROR_BODY = 64 << 10


def redact(url: str) -> str:
    """A transport URL without its query (the presigned signature is a credential)."""
    return url.split("?", 1)[0]


def check_range_answer(where: str, status: int, headers: Mapping[str, str], start: int, end: int,
                       total: int) -> None:
    """Refuse an answer to ``Range: bytes=start-(end-1)`` that is not those bytes of a ``total``-byte blob.

    ``headers`` is looked up with lower-case names.

    Raises:
        NetworkError: an error status.
        TransportError: the range was ignored or answered with other bytes.
        SizeMismatchError: the server holds a blob of another size.
    """
    if status >= 400:
        raise NetworkError(f"{where} answered HTTP {status}", status=status)
    length = headers.get("content-length")
    if status == 200:
        # A server that ignores Range sends the whole blob: usable only for a range that starts at 0.
        if start != 0 or (length is not None and length != str(total)):
            raise TransportError(f"{where} ignored the byte range (HTTP 200)")
        return
    if status != 206:
        raise TransportError(f"{where} answered HTTP {status} to a range request")
    content_range = headers.get("content-range", "")
    expected = f"bytes {start}-{end - 1}/"
    if not content_range.startswith(expected):
        raise TransportError(f"{where} sent range {content_range!r}, not {expected}...")
    actual = content_range[len(expected):]
    if actual != str(total):
        raise SizeMismatchError(where, expected=total, actual=int(actual) if actual.isdigit() else -1)
    if length is not None and length != str(end - start):
        raise TransportError(f"{where} announced {length} bytes for a range of {end - start}")


class RangeReader:
    """Ranged ``GET``s over ``http.client``, each read into a caller's buffer; one per :class:`RegistryApi`."""

    def __init__(self, *, timeout: float) -> None:
        self.timeout = timeout
        self._local = threading.local()

    def usable(self, url: str) -> bool:
        """Whether ``url`` goes straight to its server (``http``/``https``, no proxy for it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        proxies = urllib.request.getproxies_environment()
        if not (proxies.get(parts.scheme) or proxies.get("all")):
            return True
        return bool(urllib.request.proxy_bypass_environment(parts.hostname, proxies))

    def read_into(self, url: str, start: int, end: int, total: int, into: memoryview,
                  advance: Callable[[int], None]) -> None:
        """Fill ``into`` (``end - start`` bytes) with bytes ``[start, end)``; ``advance(n)`` as they land.

        Raises:
            NetworkError: unreachable, an error status, or the stream ended early (what arrived was advanced).
            TransportError, SizeMismatchError: see :func:`check_range_answer`.
        """
        parts = urlsplit(url)
        origin = (parts.scheme, parts.hostname or "", parts.port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity", "User-Agent": USER_AGENT}
        where = redact(url)
        response = self._send(origin, target, headers, where)
        keep = False
        try:
            check_range_answer(where, response.status, {k.lower(): v for k, v in response.getheaders()},
                               start, end, total)
            wanted, got = end - start, 0
            while got < wanted:
                try:
                    n = response.readinto(into[got:wanted])
                except (OSError, http.client.HTTPException) as exc:
                    raise NetworkError(f"cannot read {where}: {exc}") from exc
                if not n:
                    raise NetworkError(f"the stream of {where} ended {wanted - got} bytes early")
                got += n
                advance(n)
            # A 206 read to its end leaves the connection ready for the next range; anything else is dropped.
            keep = response.status == 206 and response.isclosed()
        except NetworkError as exc:
            if exc.details.get("status", 0) >= 400:
                response.read(MAX_ERROR_BODY)
                keep = response.isclosed()
            raise
        finally:
            if not keep:
                self._drop(origin)

    def close(self) -> None:
        """Close this thread's connections (the others close with their threads)."""
        for connection in getattr(self._local, "connections", {}).values():
            connection.close()
        self._local.connections = {}

    def _send(self, origin: tuple[str, str, int | None], target: str, headers: dict[str, str],
              where: str) -> http.client.HTTPResponse:
        # A kept-alive connection the server has since closed fails on first use: one fresh retry.
        for fresh in (False, True):
            reused = not fresh and origin in self._connections()
            connection = self._connection(origin)
            try:
                connection.request("GET", target, headers=headers)
                return connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._drop(origin)
                if not reused:
                    raise NetworkError(f"cannot read {where}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _connections(self) -> dict[tuple[str, str, int | None], http.client.HTTPConnection]:
        connections = getattr(self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
        return connections

    def _connection(self, origin: tuple[str, str, int | None]) -> http.client.HTTPConnection:
        connections = self._connections()
        connection = connections.get(origin)
        if connection is None:
            scheme, host, port = origin
            if scheme == "https":
                connection = http.client.HTTPSConnection(host, port, timeout=self.timeout,
                                                         context=self._ssl_context())
            else:
                connection = http.client.HTTPConnection(host, port, timeout=self.timeout)
            connections[origin] = connection
        return connection

    def _drop(self, origin: tuple[str, str, int | None]) -> None:
        connection = self._connections().pop(origin, None)
        if connection is not None:
            connection.close()

    def _ssl_context(self) -> ssl.SSLContext:
        return tls_context()
