"""A C2SP tlog-witness (``modelreg witness``): cosigns a log's checkpoint only when it extends the newest one
the witness accepted for that log (ADR 0011, Witnesses).

``POST /add-checkpoint`` takes ``old <size>``, the consistency proof lines (base64 hashes), a blank line and
the signed checkpoint note. The witness checks the log's signature, that ``old`` is the size it holds, and
the consistency proof from its held checkpoint to the new one; only then does it persist the new checkpoint
(``statefile.write_atomic``: fsync, rename) and answer 200 with its tlog-cosignature/v1 line. Otherwise:
400 malformed, 404 unknown origin, 403 no valid log signature, 409 (``text/x.tlog.size``, the size it holds)
a wrong old size or another root at the held size, 422 a bad proof (a fork). Checking the old size and
persisting the new checkpoint happen under one lock, so they are atomic (two cannot both advance).

:func:`make_server` serves clients concurrently, each connection in its own thread: a slow client cannot
silence the witness. Each connection has a whole-request deadline (the socket is shut when it passes,
however the bytes trickle in) and at most ``max_connections`` are served at once; one more is answered
503 and closed at once.

Example:
    >>> import tempfile, pathlib
    >>> from registry.tlog.merkle import EMPTY_ROOT
    >>> from registry.tlog.checkpoint import Checkpoint, CosignatureSigner, sign_checkpoint
    >>> from registry.tlog.note import Ed25519Signer
    >>> log = Ed25519Signer.generate("example.com/log")
    >>> w = Witness(CosignatureSigner.generate("w1"), {log.name: log.verifier()}, pathlib.Path(tempfile.mkdtemp()))
    >>> body = b"old 0\\n\\n" + sign_checkpoint(Checkpoint(log.name, 0, EMPTY_ROOT), log)
    >>> w.add_checkpoint(body, now=1).status
    200
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import http.server
import logging
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from registry.domain.errors import (
    LogProofError,
    MalformedCheckpointError,
    MalformedNoteError,
    NoteSignatureError,
    UnverifiedNoteError,
)
from registry.statefile import write_atomic
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, CosignatureSigner, cosign, open_checkpoint, parse_checkpoint
from registry.tlog.note import Ed25519Verifier, parse_note

log = logging.getLogger(__name__)

#: The largest add-checkpoint body read (a proof has at most 63 hashes; a checkpoint note is small).
MAX_REQUEST_BYTES = 64 * 1024
MAX_PROOF_HASHES = 63
SIZE_CONTENT_TYPE = "text/x.tlog.size"
#: How long one connection may take, from accept to answer, whatever the pace of its bytes.
REQUEST_DEADLINE_SECONDS = 10.0
#: How many connections are served at once; one more is answered 503.
MAX_CONNECTIONS = 64
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: 13\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many now\n")


@dataclass(frozen=True)
class WitnessAnswer:
    """An add-checkpoint response: HTTP status, content type and body."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


class _Refusal(Exception):
    def __init__(self, status: int, reason: str, content_type: str = "text/plain; charset=utf-8") -> None:
        super().__init__(reason)
        self.answer = WitnessAnswer(status, reason.encode() + b"\n", content_type)


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed add-checkpoint request."""

    old_size: int
    proof: list[bytes]
    checkpoint: bytes


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """The request a body holds.

    Raises:
        MalformedNoteError: no ``old`` line, a size that is not canonical decimal, a proof line that is not
            base64 of 32 bytes, more than 63 of them, or no blank line before the checkpoint.
    """
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise MalformedNoteError("no blank line before the checkpoint")
    lines = head.split(b"\n")
    first = lines[0].decode("ascii", "replace")
    size = first.removeprefix("old ")
    if size == first or not size.isascii() or not size.isdigit() or (size != "0" and size[0] == "0"):
        raise MalformedNoteError("the first line is not 'old <size>'")
    # Bounded before int(): past 4,300 digits int() raises ValueError (the connection dropped, no answer).
    if len(size) > len(str(merkle.MAX_TREE_SIZE)):
        raise MalformedNoteError("the old size is larger than any tree's")
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedNoteError("a proof line is not base64") from None
        if len(h) != merkle.HASH_SIZE:
            raise MalformedNoteError("a proof line is not a 32-byte hash")
        proof.append(h)
    if len(proof) > MAX_PROOF_HASHES:
        raise MalformedNoteError(f"a consistency proof has at most {MAX_PROOF_HASHES} hashes")
    return AddCheckpoint(int(size), proof, note)


def add_checkpoint_body(old_size: int, proof: list[bytes], checkpoint: bytes) -> bytes:
    """The add-checkpoint request body for ``checkpoint`` (a signed note) from ``old_size``."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n").encode() + checkpoint


class Witness:
    """A witness of the logs ``logs`` (origin to the log's verifier), its state one file per origin."""

    def __init__(self, signer: CosignatureSigner, logs: Mapping[str, Ed25519Verifier], state_dir: Path) -> None:
        self.signer = signer
        self.logs = dict(logs)
        self.state_dir = state_dir
        self._lock = threading.Lock()

    def _state_path(self, origin: str) -> Path:
        return self.state_dir / f"{hashlib.sha256(origin.encode()).hexdigest()}.checkpoint"

    def held(self, origin: str) -> Checkpoint | None:
        """The newest checkpoint of ``origin`` this witness cosigned, or None (it starts from size 0)."""
        path = self._state_path(origin)
        if not path.exists():
            return None
        return open_checkpoint(path.read_bytes(), origin, self.logs[origin]).checkpoint

    def add_checkpoint(self, body: bytes, *, now: int | None = None) -> WitnessAnswer:
        """Answer one add-checkpoint request (see the module docstring)."""
        try:
            with self._lock:
                return self._add(body, int(time.time()) if now is None else now)
        except _Refusal as refusal:
            return refusal.answer

    def _add(self, body: bytes, now: int) -> WitnessAnswer:
        try:
            request = parse_add_checkpoint(body)
            text = parse_note(request.checkpoint).text
            origin = parse_checkpoint(text).origin
        except (MalformedNoteError, MalformedCheckpointError, UnicodeDecodeError) as err:
            raise _Refusal(400, f"malformed request: {err}") from None
        log = self.logs.get(origin)
        if log is None:
            raise _Refusal(404, "unknown log origin")
        try:
            new = open_checkpoint(request.checkpoint, origin, log).checkpoint
        except (UnverifiedNoteError, NoteSignatureError) as err:
            raise _Refusal(403, f"the log's signature does not verify: {err}") from None
        except (MalformedNoteError, MalformedCheckpointError) as err:
            raise _Refusal(400, f"malformed checkpoint: {err}") from None
        if request.old_size > new.size:
            raise _Refusal(400, "old size is larger than the checkpoint's")
        held = self.held(origin)
        held_size, held_root = (held.size, held.root_hash) if held else (0, merkle.EMPTY_ROOT)
        if request.old_size != held_size:
            raise _Refusal(409, str(held_size), SIZE_CONTENT_TYPE)
        if new.size == held_size and new.root_hash != held_root:
            raise _Refusal(409, str(held_size), SIZE_CONTENT_TYPE)  # two roots at one size (the spec's 409)
        try:
            merkle.verify_consistency(held_size, new.size, held_root, new.root_hash, request.proof)
        except LogProofError as err:
            raise _Refusal(422, f"not consistent with the checkpoint this witness holds: {err}") from None
        signature = cosign(request.checkpoint, origin, log, self.signer, now)
        # Persisted before answering: a cosignature is never given for a checkpoint that is not held.
        write_atomic(self._state_path(origin), request.checkpoint, mode=0o644)
        return WitnessAnswer(200, signature.line().encode())


class _WitnessHTTPServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` at once, each shut at its deadline."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler], *,
                 max_connections: int, deadline: float) -> None:
        super().__init__(address, handler)
        self.deadline = deadline
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(_BUSY)  # a few bytes into a fresh socket's buffer: does not block
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # The per-read timeout alone lets a client that sends a byte now and then hold a thread for ever:
        # at the deadline the socket is shut, which ends any read or write on it.
        timer = threading.Timer(self.deadline, _shut, args=(request,))
        timer.daemon = True
        timer.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            timer.cancel()
            self._slots.release()

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # A client that went away or ran past its deadline is routine; anything else is worth a trace.
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("connection from %s ended early", client_address[0])
        else:
            log.warning("request from %s failed", client_address[0], exc_info=True)


def _shut(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # closed already


def make_server(witness: Witness, host: str, port: int, *, max_connections: int = MAX_CONNECTIONS,
                deadline: float = REQUEST_DEADLINE_SECONDS) -> http.server.HTTPServer:
    """An HTTP server answering ``POST /add-checkpoint`` for ``witness`` and ``GET /healthz``: connections
    are served concurrently, at most ``max_connections`` at once, each within ``deadline`` seconds."""

    class _AddCheckpointHandler(http.server.BaseHTTPRequestHandler):
        timeout = deadline  # no read waits longer than the whole request may take

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._answer(WitnessAnswer(200, b"ok\n") if self.path == "/healthz" else WitnessAnswer(404, b"not found\n"))

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/add-checkpoint":
                return self._answer(WitnessAnswer(404, b"not found\n"))
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._answer(WitnessAnswer(411, b"a Content-Length is required\n"))
            if not 0 <= length <= MAX_REQUEST_BYTES:
                return self._answer(WitnessAnswer(413, b"request too large\n"))
            body = self.rfile.read(length)
            if len(body) < length:
                return  # the client went away, or its deadline passed: nobody to answer
            self._answer(witness.add_checkpoint(body))

        def _answer(self, answer: WitnessAnswer) -> None:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
            pass

    return _WitnessHTTPServer((host, port), _AddCheckpointHandler, max_connections=max_connections,
                              deadline=deadline)
