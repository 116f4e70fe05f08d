"""A stand-in for the registry's manifest and trust-root endpoints (being built in parallel), in front of a
real registry: a real HTTP server on loopback that

- answers ``GET /v1/trust-root[/{n}]`` and ``GET /v1/models/{tenant}/{name}/manifest?ref=`` by the contract
  (ETag and If-None-Match, 304, RFC 9457 problems, 503 with Retry-After while ``unavailable`` counts down),
  from what the test set in ``roots`` and ``manifests``,
  and the log's consistency proofs from ``log_consistency``;
- answers ``GET /v1/events`` from ``events`` (CloudEvents the test appends; the cursor is their count), so
  a node program following revocations reads a stream as it would from the registry;
- proxies ``GET /v1/blobs/...`` (the real presigned URLs, Range included) to the real registry, logging each
  request (``blob_gets``), optionally cutting a response short to simulate an interrupted download, and
  optionally calling the test back before each one (``before_blob``).

Releases are signed by the test with ``registry.signing.release.sign_release``; the bytes are the registry's.
When the real endpoint lands, tests point the client at the registry itself instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx


class Standin:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.roots: dict[int, dict[str, Any]] = {}
        self.raw_roots: dict[int, bytes] = {}
        """Roots served byte for byte as given (another serialization of a root is other bytes)."""
        self.manifests: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.problems: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = {}
        self.unavailable: dict[tuple[str, str, str], int] = {}
        """How many of the next requests for a manifest are answered 503 with ``Retry-After: 0`` (the
        registry's log not yet covering the release), each counted down."""
        self.events: list[dict[str, Any]] = []
        """Catalogue events served by ``GET /v1/events`` (event i has the cursor i + 1)."""
        self.blob_gets: list[dict[str, Any]] = []
        self.manifest_gets: list[dict[str, Any]] = []
        self.cut_after: int | None = None
        """When set, every blob response stops after this many bytes (the connection is closed)."""
        self.before_blob: Callable[[str, str | None], None] | None = None
        """When set, called with each blob GET's path and Range before it is answered (another process on
        the node acting between two parts of a download)."""
        self.log_consistency: Callable[[int, int], Any] | None = None
        """When set, answers ``GET /log/proof/consistency?first=&second=`` (the JSON body), logged in
        ``consistency_gets``."""
        self.consistency_gets: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._cut: socket.socket | None = None

    def __enter__(self) -> "Standin":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._cut is not None:
            with contextlib.suppress(OSError):
                self._cut.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept()
            self._cut.close()

    def cut_network(self) -> None:
        """Stop answering: every connection to this port is reset from now on. The port stays held (a
        closed port could be taken by another test's server, SeaweedFS say, which would answer instead)."""
        port = self.server.server_address[1]
        self.server.shutdown()
        self.server.server_close()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        self._cut = listener

        def reset_all() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return  # closed by __exit__
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

        threading.Thread(target=reset_all, daemon=True).start()

    def transport_url(self, presigned: str) -> str:
        """A presigned blob URL of the registry, through this proxy."""
        return self.url + presigned[presigned.index("/v1/blobs/"):]

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: Any, content_type: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _problem(self, status: int, code: str, detail: str) -> None:
                self._json(status, {"type": f"https://modelreg.dev/problems/{code}", "title": code,
                                    "status": status, "detail": detail}, "application/problem+json")

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if url.path.startswith("/v1/blobs/"):
                    return self._blob()
                if url.path == "/log/proof/consistency" and standin.log_consistency is not None:
                    query = parse_qs(url.query)
                    first, second = int(query["first"][0]), int(query["second"][0])
                    standin.consistency_gets.append((first, second))
                    return self._json(200, standin.log_consistency(first, second))
                if url.path == "/v1/events":
                    after = parse_qs(url.query).get("after", ["0"])[0]
                    after = int(after) if after.isdigit() and len(after) < 10 else 0
                    with standin.lock:
                        page = standin.events[after:]
                        cursor = max(after, len(standin.events))
                    return self._json(200, {"events": page, "cursor": cursor})
                if parts[:2] == ["v1", "trust-root"]:
                    version = max(standin.roots) if len(parts) == 2 and standin.roots else (
                        int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None)
                    if version in standin.raw_roots:
                        data = standin.raw_roots[version]
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return None
                    if version not in standin.roots:
                        return self._problem(404, "not-found", "no such trust root")
                    return self._json(200, standin.roots[version])
                if len(parts) == 5 and parts[:2] == ["v1", "models"] and parts[4] == "manifest":
                    ref = parse_qs(url.query).get("ref", [""])[0]
                    key = (parts[2], parts[3], ref)
                    with standin.lock:
                        standin.manifest_gets.append({"key": key, "auth": self.headers.get("Authorization")})
                    with standin.lock:
                        pending = standin.unavailable.get(key, 0)
                        if pending:
                            standin.unavailable[key] = pending - 1
                    if pending:
                        return self._json(503, {"type": "https://modelreg.dev/problems/release-not-logged-yet",
                                                "title": "ReleaseNotLoggedError", "status": 503,
                                                "detail": "the audit log does not cover it yet"},
                                          "application/problem+json", headers={"Retry-After": "0"})
                    if key in standin.problems:
                        status, problem = standin.problems[key]
                        return self._problem(status, problem["code"], problem["detail"])
                    if key not in standin.manifests:
                        return self._problem(404, "alias-not-found", "no such model or ref")
                    body = standin.manifests[key]
                    etag = '"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32] + '"'
                    if self.headers.get("If-None-Match") == etag:
                        self.send_response(304)
                        self.send_header("ETag", etag)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return None
                    return self._json(200, body, headers={"ETag": etag})
                return self._problem(404, "not-found", url.path)

            def _blob(self) -> None:
                headers = {"Range": self.headers["Range"]} if self.headers.get("Range") else {}
                with standin.lock:
                    standin.blob_gets.append({"path": self.path.split("?")[0], "range": headers.get("Range"),
                                              "auth": self.headers.get("Authorization")})
                if standin.before_blob is not None:
                    standin.before_blob(self.path.split("?")[0], headers.get("Range"))
                with httpx.stream("GET", standin.upstream + self.path, headers=headers, timeout=60) as upstream:
                    self.send_response(upstream.status_code)
                    for name in ("Content-Type", "Content-Length", "Content-Range", "Accept-Ranges", "ETag"):
                        if name in upstream.headers:
                            self.send_header(name, upstream.headers[name])
                    cut = standin.cut_after
                    if cut is not None:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    sent = 0
                    for chunk in upstream.iter_raw(64 << 10):
                        if cut is not None and sent + len(chunk) > cut:
                            self.wfile.write(chunk[:cut - sent])
                            self.wfile.flush()
                            self.close_connection = True
                            return
                        self.wfile.write(chunk)
                        sent += len(chunk)

        return Handler
