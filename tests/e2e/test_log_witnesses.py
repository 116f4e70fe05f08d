"""The registry and its log's witnesses (registry/services/witnesses.py) on SQLite and PostgreSQL, with real
``modelreg witness`` processes on loopback and ``/log/checkpoint`` served by uvicorn.

What is checked: the worker's integration job submits each new checkpoint to the witnesses, which cosign it,
and ``/log/checkpoint`` serves those cosignatures so a 2-of-2 check passes; a registry whose database is
rewritten (an event changed, the tree recomputed and signed again) gets no cosignature from a witness that
saw the old tree, so the k-of-n check fails (the fork is refused); a hostile witness answering garbage, a
cosignature over another checkpoint or too much is never stored.
"""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import delete, select, update

from api.app import create_app
from registry import audit
from registry.db.models import AuditEvent, LogCosignature, LogHead, LogTile
from registry.domain.errors import UnverifiedNoteError
from registry.services import tlog, witnesses
from registry.settings import LogWitness
from registry.tlog.checkpoint import (
    Checkpoint,
    CosignatureSigner,
    CosignatureVerifier,
    cosign,
    open_checkpoint,
    sign_checkpoint,
)
from registry.tlog.note import Ed25519Signer, parse_verifier_key
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain
from tests.support.server import free_port
from tests.support.witness import running_witness

ORIGIN = "registry.example/log"


@pytest.fixture
def log_key(tmp_path) -> Ed25519Signer:
    key = Ed25519Signer.generate(ORIGIN)
    (tmp_path / "log-key").write_text(key.skey + "\n")
    return key


@pytest.fixture
def two_witnesses(tmp_path, log_key):
    logs = {ORIGIN: log_key.verifier().vkey}
    with running_witness(tmp_path / "w1", "witness.example/one", logs) as one, \
            running_witness(tmp_path / "w2", "witness.example/two", logs) as two:
        yield [one, two]


@pytest.fixture
def settings(settings, tmp_path, log_key, two_witnesses):
    return settings.model_copy(update={
        "log_key_file": tmp_path / "log-key", "log_checkpoint_interval": 0.0, "log_witness_quorum": 2,
        "log_witnesses": [LogWitness(verifier_key=w.vkey, url=w.url) for w in two_witnesses]})


def append_events(container, count: int) -> None:
    with container.session_factory() as session:
        for i in range(count):
            audit.append(session, actor="alice", action="test.event", subject=f"thing/{i}", tenant="acme")
        session.commit()


def run_integration(container) -> None:
    with container.session_factory() as session:
        tlog.arm_integration(session, now=container.clock.now())
    drain(container)


def served(container) -> bytes:
    with serve_in_thread(create_app(container)) as url:
        r = httpx.get(url + "/log/checkpoint", timeout=10)
    assert r.status_code == 200, r.text
    return r.content


def witness_verifiers(container) -> list[CosignatureVerifier]:
    return [parse_verifier_key(w.verifier_key, CosignatureVerifier) for w in container.settings.log_witnesses]


def test_the_worker_collects_cosignatures_and_the_log_serves_them(container, log_key):
    for count, size in ((5, 5), (300, 305)):
        append_events(container, count)
        run_integration(container)
        opened = open_checkpoint(served(container), ORIGIN, log_key.verifier(),
                                 witnesses=witness_verifiers(container), quorum=2)
        assert opened.checkpoint.size == size
    with container.session_factory() as session:
        rows = session.execute(select(LogCosignature.checkpoint_size)).scalars().all()
    assert sorted(rows) == [5, 5, 305, 305]
    # Nothing new to cosign: no request stores anything again.
    assert witnesses.submit_checkpoint(container.session_factory, container.settings.log_witnesses,
                                       now=container.clock.now()) == 0


def test_a_rewritten_log_gets_no_cosignature_so_a_quorum_check_refuses_it(container, log_key):
    append_events(container, 10)
    run_integration(container)
    honest = open_checkpoint(served(container), ORIGIN, log_key.verifier(), witnesses=witness_verifiers(container),
                             quorum=2).checkpoint
    # The registry's operator rewrites history: an event changed, the tree and checkpoint recomputed with
    # the log key, the cosignatures it had forgotten; then the log grows on the fork.
    with container.session_factory() as session:
        session.execute(update(AuditEvent).where(AuditEvent.id == 3).values(details={"rewritten": True}))
        for table in (LogTile, LogHead, LogCosignature):
            session.execute(delete(table))
        session.commit()
    append_events(container, 4)
    run_integration(container)
    msg = served(container)
    forked = open_checkpoint(msg, ORIGIN, log_key.verifier()).checkpoint
    assert forked.size == honest.size + 4
    with container.session_factory() as session:
        assert session.scalars(select(LogCosignature)).all() == []
    for quorum in (1, 2):
        with pytest.raises(UnverifiedNoteError):
            open_checkpoint(msg, ORIGIN, log_key.verifier(), witnesses=witness_verifiers(container), quorum=quorum)
    # Collecting again (as a release would) does not change that.
    again = witnesses.collect_cosignatures(container.session_factory, container.settings, timeout=5)
    assert again.encode() == msg


@contextmanager
def hostile_witness(answers: list[tuple[int, bytes]]):
    """A witness that answers each add-checkpoint with the next (status, body) of ``answers``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = answers.pop(0) if answers else (500, b"")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_hostile_witness_answer_is_never_stored(container, log_key):
    append_events(container, 3)
    run_integration(container)
    key = CosignatureSigner.generate("witness.example/hostile")
    other_key = CosignatureSigner.generate("witness.example/hostile")
    with container.session_factory() as session:
        note = tlog.latest_checkpoint(session)
        root = session.get(LogHead, tlog.LOG_HEAD_ID).root
    another = sign_checkpoint(Checkpoint(ORIGIN, 2, root), log_key)
    answers = [
        (200, b"garbage\n"),
        (200, b"\xff\xfe\x00 not utf-8\n"),
        # A valid cosignature by the witness's key, over another checkpoint.
        (200, cosign(another, ORIGIN, log_key.verifier(), key, 1).line().encode()),
        # A valid cosignature over this checkpoint, by another key under the witness's name.
        (200, cosign(note.encode(), ORIGIN, log_key.verifier(), other_key, 1).line().encode()),
        (200, b"x" * 100_000),
        (409, b"not a size\n"),
    ]
    witness = [LogWitness(verifier_key=key.verifier().vkey, url=None)]
    with hostile_witness(answers) as url:
        witness[0].url = url
        for _ in range(6):
            assert witnesses.submit_checkpoint(container.session_factory, witness, now=container.clock.now(),
                                               timeout=5) == 0
        with container.session_factory() as session:
            assert session.scalars(select(LogCosignature).where(LogCosignature.witness_key == key.verifier().vkey)
                                   ).all() == []
            before = tlog.served_checkpoint(session)
            assert open_checkpoint(before.encode(), ORIGIN, log_key.verifier(), witnesses=witness_verifiers(container),
                                   quorum=2).note.unverified == ()
        # The one valid answer is kept.
        answers.append((200, b"noise\n" + cosign(note.encode(), ORIGIN, log_key.verifier(), key, 7).line().encode()))
        assert witnesses.submit_checkpoint(container.session_factory, witness, now=container.clock.now()) == 1
    msg = served(container)
    open_checkpoint(msg, ORIGIN, log_key.verifier(), witnesses=[key.verifier()], quorum=1)
