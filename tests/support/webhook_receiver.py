"""A real HTTP webhook receiver on 127.0.0.1, in a thread: it records every request and answers as told.

It speaks HTTP/1.1 and keeps a connection open between requests (as receivers behind any common server do);
``stop`` closes those connections too, so a stopped receiver is down for a kept-alive client as well.

Example:
    >>> with Receiver() as hook:  # doctest: +SKIP
    ...     hook.status = 503      # down (answers 503), or hook.stop() to refuse connections
    ...     hook.requests[0].body
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    path: str
    host: str
    answered: int


class Receiver:
    """Records POSTs; ``status`` is what it answers, ``delay`` how long it waits first, ``hold`` an event it
    waits for first (at most ``HOLD_SECONDS``, within a delivery's time bound), ``location`` a redirect target
    (with a 3xx status), ``answers`` the status of the Nth request (from 1) where it is not ``status``; with
    ``drop_kept`` it closes each connection after one answer without saying so (no
    ``Connection: close``), as a server closing idle kept-alive connections does."""

    HOLD_SECONDS = 8.0

    def __init__(self, port: int = 0) -> None:
        self.status = 204
        self.delay = 0.0
        self.hold: threading.Event | None = None
        self.location: str | None = None
        self.drop_kept = False
        self.answers: dict[int, int] = {}
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self.connections = 0
        """How many connections it accepted."""
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with receiver._lock:
                    receiver._connections.add(self.connection)
                    receiver.connections += 1

            def finish(self) -> None:
                with receiver._lock:
                    receiver._connections.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    status = receiver.answers.get(len(receiver.requests) + 1, receiver.status)
                    receiver.requests.append(Received({k.lower(): v for k, v in self.headers.items()}, body,
                                                      self.path, self.headers.get("Host", ""), status))
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.hold is not None:
                    receiver.hold.wait(receiver.HOLD_SECONDS)
                self.send_response(status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if receiver.drop_kept:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Refuse connections from now on and close the open ones (the port stays this receiver's for ``start``)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            open_now, self._connections = list(self._connections), set()
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def ids(self, *, accepted: bool = False) -> list[str]:
        """The ``webhook-id`` of every request (only those answered 2xx, with ``accepted``), in arrival order."""
        with self._lock:
            return [r.headers["webhook-id"] for r in self.requests if not accepted or 200 <= r.answered < 300]

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
