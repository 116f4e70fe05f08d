"""``modelreg witness`` (registry/witness.py) as a real process: it cosigns a checkpoint only when it extends
the one it holds, and refuses every fork (two roots at one size, a smaller tree, a bad proof, another key's
signature, an unknown log); what it accepted survives a restart."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, CosignatureVerifier, open_checkpoint, sign_checkpoint
from registry.tlog.note import Ed25519Signer, parse_verifier_key
from registry.witness import MAX_REQUEST_BYTES, add_checkpoint_body
from tests.support.witness import running_witness

ORIGIN = "registry.example/log"


class Log:
    """An in-memory log: leaves, and checkpoints of its prefixes signed by ``key``."""

    def __init__(self, key: Ed25519Signer, leaves: list[bytes]) -> None:
        self.key, self.hashes = key, merkle.MemoryHashes(merkle.leaf_hash(e) for e in leaves)

    def checkpoint(self, size: int) -> bytes:
        return sign_checkpoint(Checkpoint(self.key.name, size, merkle.root_hash(size, self.hashes)), self.key)

    def submission(self, old: int, size: int) -> bytes:
        return add_checkpoint_body(old, merkle.consistency_proof(old, size, self.hashes), self.checkpoint(size))


@pytest.fixture
def log_key() -> Ed25519Signer:
    return Ed25519Signer.generate(ORIGIN)


@pytest.fixture
def log(log_key) -> Log:
    return Log(log_key, [f"event {i}".encode() for i in range(20)])


def cosigned(witness, note: bytes, answer: httpx.Response) -> bytes:
    """The checkpoint with the witness's cosignature line appended (as the registry serves it)."""
    assert answer.status_code == 200, answer.text
    assert answer.text.startswith("— ") and answer.text.endswith("\n") and answer.text.count("\n") == 1
    return note + answer.content


def test_a_witness_cosigns_each_checkpoint_that_extends_the_one_it_holds(tmp_path, log):
    with running_witness(tmp_path / "w", "witness.example/w1", {ORIGIN: log.key.verifier().vkey}) as w:
        verifier = parse_verifier_key(w.vkey, CosignatureVerifier)
        for old, size in ((0, 0), (0, 5), (5, 5), (5, 9), (9, 20)):
            msg = cosigned(w, log.checkpoint(size), w.add_checkpoint(log.submission(old, size)))
            opened = open_checkpoint(msg, ORIGIN, log.key.verifier(), witnesses=[verifier], quorum=1)
            assert opened.checkpoint.size == size


def test_a_witness_refuses_every_checkpoint_that_is_not_an_extension(tmp_path, log):
    forked = Log(log.key, [f"event {i}".encode() for i in range(4)] + [b"rewritten"] +
                 [f"event {i}".encode() for i in range(5, 20)])
    other_key = Ed25519Signer.generate(ORIGIN)
    with running_witness(tmp_path / "w", "witness.example/w1", {ORIGIN: log.key.verifier().vkey}) as w:
        assert w.add_checkpoint(log.submission(0, 9)).status_code == 200
        # Two roots at one size: the rewritten tree of 9 leaves is not the one the witness holds.
        answer = w.add_checkpoint(forked.submission(9, 9))
        assert (answer.status_code, answer.text) == (409, "9\n")
        # A larger tree of the fork, with the fork's own (valid for the fork) proof from size 9.
        assert w.add_checkpoint(forked.submission(9, 20)).status_code == 422
        # A bad proof for the honest tree: one hash changed.
        proof = merkle.consistency_proof(9, 20, log.hashes)
        proof[0] = bytes(32)
        assert w.add_checkpoint(add_checkpoint_body(9, proof, log.checkpoint(20))).status_code == 422
        # A smaller tree after a larger one: from the held size it is backwards; from its own size, a conflict.
        assert w.add_checkpoint(log.submission(3, 3)).status_code == 409
        answer = w.add_checkpoint(log.submission(0, 5))
        assert (answer.status_code, answer.text, answer.headers["content-type"]) == (409, "9\n", "text/x.tlog.size")
        assert w.add_checkpoint(add_checkpoint_body(9, [], log.checkpoint(5))).status_code == 400
        # Another key under the log's name; an unknown log; malformed bodies; too large a body.
        other = Log(other_key, [f"event {i}".encode() for i in range(20)])
        assert w.add_checkpoint(other.submission(9, 20)).status_code == 403
        unknown = Log(Ed25519Signer.generate("other.example/log"), [b"x"])
        assert w.add_checkpoint(unknown.submission(0, 1)).status_code == 404
        for body in (b"", b"old 9\n", b"old 09\n\n" + log.checkpoint(20), b"old 9\nnot-base64\n\n" + log.checkpoint(20),
                     b"old 9\n\nnot a note"):
            assert w.add_checkpoint(body).status_code == 400, body
        assert w.add_checkpoint(b"x" * (MAX_REQUEST_BYTES + 1)).status_code == 413
        # Sizes past int()'s 4,300 digits, in the old line and in the checkpoint: answered 400, not dropped.
        huge = "9" * 5000
        assert w.add_checkpoint(f"old {huge}\n\n".encode() + log.checkpoint(20)).status_code == 400
        note = log.checkpoint(20).replace(b"\n20\n", f"\n{huge}\n".encode(), 1)
        assert w.add_checkpoint(b"old 9\n\n" + note).status_code == 400
        # None of that moved it: the honest extension is still cosigned.
        assert w.add_checkpoint(log.submission(9, 20)).status_code == 200


def test_what_a_witness_accepted_survives_its_restart_and_only_success_is_kept(tmp_path, log):
    logs = {ORIGIN: log.key.verifier().vkey}
    with running_witness(tmp_path / "w", "witness.example/w1", logs) as w:
        assert w.add_checkpoint(log.submission(0, 9)).status_code == 200
        assert w.add_checkpoint(log.submission(9, 12)[:-3] + b"bad").status_code in (400, 403)
    state = sorted(p.name for p in (tmp_path / "w" / "state").iterdir())
    assert len(state) == 1 and state[0].endswith(".checkpoint")  # no temporary file left behind
    with running_witness(tmp_path / "w", "witness.example/w1", logs) as w:
        answer = w.add_checkpoint(log.submission(0, 12))
        assert (answer.status_code, answer.text) == (409, "9\n")
        assert w.add_checkpoint(log.submission(9, 12)).status_code == 200


class SlowClient:
    """A connection that sends the start of a request and then one byte whenever 0.3 s pass without an
    answer, so no single read ever times out; it records when the witness shut it."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: witness\r\nX-Slow: ")
        self.answer, self.closed, self.stop = b"", threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        self.sock.settimeout(0.3)
        try:
            while not self.stop.is_set():
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    self.sock.sendall(b"x")
                    continue
                if not data:
                    break
                self.answer += data
        except OSError:
            pass  # reset or broken pipe: shut by the witness
        finally:
            self.closed.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.sock.close()


def _read_all(url: str) -> bytes:
    """Connect, send nothing, and read until the witness closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        return data


def test_a_slow_client_neither_silences_the_witness_nor_holds_it_past_its_deadline(tmp_path, log):
    args = ("--max-connections", "3", "--request-deadline", "3")
    with running_witness(tmp_path / "w", "witness.example/w1", {ORIGIN: log.key.verifier().vkey},
                         extra_args=args) as w:
        slow = [SlowClient(w.url)]
        try:
            # While one client trickles its headers, another gets its cosignature.
            assert w.add_checkpoint(log.submission(0, 9)).status_code == 200
            # However its bytes trickle in, the slow connection is shut at its deadline, unanswered.
            assert slow[0].closed.wait(timeout=60)
            assert slow[0].answer == b""
            # Past the bound on connections, one more is answered 503 at once, not queued behind them.
            slow += [SlowClient(w.url) for _ in range(3)]
            assert _read_all(w.url).startswith(b"HTTP/1.0 503")
            for client in slow:
                assert client.closed.wait(timeout=60)
            # Once they are shut, the witness serves again.
            assert w.add_checkpoint(log.submission(9, 12)).status_code == 200
        finally:
            for client in slow:
                client.close()
