"""A stand-in for the registry's verifiable log (``/v1/keys``' log key and ``/log/...``), served by a real HTTP
server on loopback from a tree the test builds and may falsify.

It serves ``checkpoint`` (whatever bytes the test put in ``checkpoint``), tiles of ``hashes`` (any tree: the
honest one, or a forked one), and ``proof/consistency`` from ``proof_hashes`` when the test sets it (a lie),
else from ``hashes``. :func:`signed_checkpoint` signs a tree's head, so a test makes a forked, truncated or
wrongly signed log in one line each.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from registry.domain.errors import InvalidTileError
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, sign_checkpoint
from registry.tlog.note import Ed25519Signer
from registry.tlog.tiles import EntryBundle, build_tile, parse_tile_path


def signed_checkpoint(key: Ed25519Signer, hashes: merkle.MemoryHashes, size: int | None = None) -> bytes:
    size = hashes.size if size is None else size
    return sign_checkpoint(Checkpoint(key.name, size, merkle.root_hash(size, hashes)), key)


class LogStandin:
    def __init__(self, key: Ed25519Signer, hashes: merkle.MemoryHashes) -> None:
        self.key = key
        self.hashes = hashes
        self.checkpoint = signed_checkpoint(key, hashes)
        self.proof_hashes: list[bytes] | None = None
        self.requests: list[str] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                url = urlsplit(self.path)
                standin.requests.append(url.path)
                status, body, media = standin.answer(url.path, parse_qs(url.query))
                self.send_response(status)
                self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        if path == "/v1/keys":
            return _json({"keys": [], "log": {"origin": self.key.name, "verifier_key": self.key.verifier().vkey}})
        if path == "/log/checkpoint":
            return 200, self.checkpoint, "text/plain; charset=utf-8"
        if path == "/log/proof/consistency":
            first, second = int(query["first"][0]), int(query["second"][0])
            hashes = self.proof_hashes
            if hashes is None:
                hashes = merkle.consistency_proof(first, second, self.hashes)
            return _json({"first": first, "second": second, "hashes": [base64.b64encode(h).decode() for h in hashes]})
        if path.startswith("/log/tile/"):
            try:
                tile = parse_tile_path(path.removeprefix("/log/"))
                if isinstance(tile, EntryBundle):
                    raise InvalidTileError("no entries here")
                return 200, build_tile(tile, self.hashes), "application/octet-stream"
            except (InvalidTileError, KeyError):
                return _json({"type": "about:blank", "title": "Not Found", "status": 404, "detail": path}, 404)
        return _json({"type": "about:blank", "title": "Not Found", "status": 404, "detail": path}, 404)

    def __enter__(self) -> "LogStandin":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _json(body: Any, status: int = 200) -> tuple[int, bytes, str]:
    media = "application/json" if status < 400 else "application/problem+json"
    return status, json.dumps(body).encode(), media
