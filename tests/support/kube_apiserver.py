"""A stand-in for the Kubernetes API server's pod and namespace list/watch, for ``modelreg cluster watch``'s tests.

No API server can be installed here, so this one answers the few requests the watcher makes as the API server
answers them (the Kubernetes API concepts: "Efficient detection of changes", "Retrieving large results sets in
chunks", "Watch bookmarks"):

- ``GET /api/v1/namespaces?labelSelector=k=v``: a ``NamespaceList`` of the namespaces carrying that label;
- ``GET /api/v1/pods?limit=N[&continue=T]``: a ``PodList`` page, ``metadata.resourceVersion`` and
  ``metadata.continue`` (a token that :meth:`KubeApiServer.expire_continue_tokens` makes answer 410 Gone, as a
  compacted list does);
- ``GET /api/v1/pods?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=S``: a chunked stream
  of one JSON event per line (``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK``), every change after RV, then
  the changes as they happen, closed after S seconds; a RV older than the history kept (:meth:`compact`) is
  answered with an ``ERROR`` event holding a ``Status`` of code 410 (``Expired``: "too old resource version"),
  and :meth:`expire_watches` ends the open watches the same way.

Every request is recorded (:attr:`KubeApiServer.requests`) with its query, and a bearer token is required.
:meth:`inject` writes raw lines into the open watches (malformed events).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "stand-in-service-account-token"


@dataclass
class Request:
    path: str
    query: dict[str, str]


class KubeApiServer:
    """The cluster's state (namespaces, pods, the event history) and the HTTP server answering for it."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.namespaces: dict[str, dict[str, str]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.oldest = 100
        """The oldest resourceVersion a watch may start from (compaction moves it)."""
        self.requests: list[Request] = []
        self.raw: list[bytes] = []
        self.epoch = 0
        """Raised by :meth:`expire_watches`: every open watch ends with a 410 ERROR event."""
        self.continue_epoch = 0
        self.expire_after_pages = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    # --- the cluster ---

    def label_namespace(self, name: str, labels: dict[str, str]) -> None:
        with self.lock:
            self.namespaces[name] = dict(labels)

    def put_pod(self, pod: dict[str, Any], *, silently: bool = False) -> str:
        """Create or change a pod (an ``ADDED`` or ``MODIFIED`` event; ``silently``: none, as if the event were
        lost to compaction); its new resourceVersion."""
        with self.lock:
            pod = copy.deepcopy(pod)
            uid = pod["metadata"]["uid"]
            kind = "MODIFIED" if uid in self.pods else "ADDED"
            self.version += 1
            pod["metadata"]["resourceVersion"] = str(self.version)
            self.pods[uid] = pod
            if not silently:
                self.history.append((self.version, kind, copy.deepcopy(pod)))
            self.lock.notify_all()
            return str(self.version)

    def delete_pod(self, uid: str, *, silently: bool = False) -> None:
        with self.lock:
            pod = self.pods.pop(uid)
            self.version += 1
            pod["metadata"]["resourceVersion"] = str(self.version)
            if not silently:
                self.history.append((self.version, "DELETED", pod))
            self.lock.notify_all()

    def bookmark(self) -> str:
        """Move the resourceVersion on with a ``BOOKMARK`` (as the API server does for changes of other objects)."""
        with self.lock:
            self.version += 1
            self.history.append((self.version, "BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {
                "resourceVersion": str(self.version)}}))
            self.lock.notify_all()
            return str(self.version)

    def compact(self) -> None:
        """Forget the history: a watch from any resourceVersion before now is answered 410."""
        with self.lock:
            self.history.clear()
            self.oldest = self.version
            self.lock.notify_all()

    def expire_watches(self) -> None:
        """End every open watch with a 410 ``ERROR`` event, as the API server does when its watch cache
        no longer holds where a watcher is."""
        with self.lock:
            self.epoch += 1
            self.lock.notify_all()

    def expire_continue_tokens(self, *, after_pages: int = 0) -> None:
        """Make the continue tokens handed out so far answer 410, at once or once ``after_pages`` more pages
        have been served (so that a list is cut in its middle)."""
        with self.lock:
            if after_pages:
                self.expire_after_pages = after_pages
            else:
                self.continue_epoch += 1

    def inject(self, line: bytes) -> None:
        """Write ``line`` (and a newline) into every open watch."""
        with self.lock:
            self.raw.append(line)
            self.lock.notify_all()

    def requests_to(self, path: str, **query: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path == path and all(r.query.get(k) == v for k, v in query.items())]

    # --- serving ---

    @contextmanager
    def running(self) -> Iterator[KubeApiServer]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming this server and a bearer token, as ``kubectl config view --raw`` writes one."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "users": [{"name": "watcher", "user": {"token": TOKEN}}],
            "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "watcher"}}]}))
        return path


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _handler(api: KubeApiServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            split = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            with api.lock:
                api.requests.append(Request(split.path, query))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._json(401, _status(401, "Unauthorized", "Unauthorized"))
            if split.path == "/api/v1/namespaces":
                return self._namespaces(query)
            if split.path == "/api/v1/pods" and query.get("watch") in ("true", "1"):
                return self._watch(query)
            if split.path == "/api/v1/pods":
                return self._list(query)
            return self._json(404, _status(404, "NotFound", "the server could not find the requested resource"))

        def _json(self, code: int, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _namespaces(self, query: dict[str, str]) -> None:
            key, _, value = query.get("labelSelector", "").partition("=")
            with api.lock:
                items = [{"metadata": {"name": n, "labels": labels, "uid": f"ns-{n}", "resourceVersion": "1"},
                          "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
                         for n, labels in sorted(api.namespaces.items()) if not key or labels.get(key) == value]
                version = str(api.version)
            self._json(200, {"kind": "NamespaceList", "apiVersion": "v1", "metadata": {"resourceVersion": version},
                             "items": items})

        def _list(self, query: dict[str, str]) -> None:
            limit = int(query.get("limit", "0") or 0)
            with api.lock:
                token = query.get("continue")
                if token:
                    epoch, start, version = (int(x) for x in token.split("."))
                    if epoch != api.continue_epoch:
                        return self._json(410, _status(410, "Expired", "The provided continue parameter is too old "
                                                       "to display a consistent list result."))
                else:
                    start, version = 0, api.version
                pods = sorted(api.pods.values(), key=lambda p: p["metadata"]["uid"])
                page = pods[start:start + limit] if limit else pods[start:]
                meta: dict[str, Any] = {"resourceVersion": str(version if token else api.version)}
                if limit and start + limit < len(pods):
                    meta["continue"] = f"{api.continue_epoch}.{start + limit}.{version}"
                if api.expire_after_pages:
                    api.expire_after_pages -= 1
                    if not api.expire_after_pages:
                        api.continue_epoch += 1
            self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                             "items": [{k: v for k, v in p.items() if k not in ("apiVersion", "kind")} for p in page]})

        def _watch(self, query: dict[str, str]) -> None:
            since = int(query.get("resourceVersion") or 0)
            deadline = time.monotonic() + int(query.get("timeoutSeconds") or 1800)
            bookmarks = query.get("allowWatchBookmarks") == "true"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            with api.lock:
                epoch, raw_seen = api.epoch, len(api.raw)
                expired = since < api.oldest
            if expired:
                self._event({"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {since} ({api.oldest})")})
                return self._end()
            while time.monotonic() < deadline:
                with api.lock:
                    if api.epoch != epoch:
                        out = [{"type": "ERROR", "object": _status(410, "Expired", "too old resource version: "
                                                                   f"{since} ({api.version})")}]
                        done = True
                    else:
                        out = [{"type": kind, "object": obj} for version, kind, obj in api.history
                               if version > since and (kind != "BOOKMARK" or bookmarks)]
                        done = False
                    raw, raw_seen = api.raw[raw_seen:], len(api.raw)
                    if out and not done:
                        since = int(out[-1]["object"]["metadata"]["resourceVersion"])
                    if not out and not raw:
                        api.lock.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                        continue
                try:
                    for line in raw:
                        self._chunk(line + b"\n")
                    for event in out:
                        self._event(event)
                except OSError:
                    return
                if done:
                    break
            self._end()

        def _event(self, event: dict[str, Any]) -> None:
            self._chunk(json.dumps(event).encode() + b"\n")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _end(self) -> None:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True

    return Handler
