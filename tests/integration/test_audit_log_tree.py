"""The verifiable audit log in the database (registry/services/tlog.py), on SQLite and PostgreSQL.

Events appended through ``audit.append`` are integrated by ``integrate_audit_log``; what is checked: the
stored tiles and head equal those of an in-memory tree of the events' commitments in id order, at sizes
around tile edges and across batches; a second run changes nothing; an id whose transaction is still open
is never skipped, even when a later id committed first (PostgreSQL); concurrent writers and integrators
leave every event in the tree exactly once; checkpoints are signed only when the tree grew, at the
interval, and never over a tree that does not extend the last checkpoint.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import event, func, select, text, update

from registry import audit
from registry.db.models import AuditEvent, Job, LogHead, LogTile
from registry.db.session import make_engine
from registry.domain.errors import LogProofError, LogTileNotFoundError
from registry.jobs import JobKind
from registry.services import tlog
from registry.tlog import merkle
from registry.tlog.checkpoint import open_checkpoint
from registry.tlog.note import Ed25519Signer
from registry.tlog.tiles import TileHashes, build_tile, entry_bundles_for_size, parse_entry_bundle, tiles_for_size

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)


def append_events(container, count: int, start: int = 0) -> None:
    with container.session_factory() as session:
        for i in range(start, start + count):
            audit.append(session, actor="alice", action="test.event", subject=f"thing/{i}", tenant="acme",
                         details={"n": i})
        session.commit()


def memory_tree(container) -> tuple[merkle.MemoryHashes, list[bytes]]:
    """The tree of every event's commitment in id order, built in memory from the events themselves."""
    with container.session_factory() as session:
        commitments = [audit.event_commitment(e) for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
    return merkle.MemoryHashes(merkle.leaf_hash(c) for c in commitments), commitments


def assert_stored_tree_is(container, size: int) -> None:
    hashes, commitments = memory_tree(container)
    assert hashes.size == size
    with container.session_factory() as session:
        head = session.get(LogHead, tlog.LOG_HEAD_ID)
        assert (head.size, head.root) == (size, merkle.root_hash(size, hashes))
        for tile in tiles_for_size(size):
            assert tlog.read_tile(session, tile) == build_tile(tile, hashes), tile.path
        for bundle in entry_bundles_for_size(size):
            start = bundle.index * 256
            assert (parse_entry_bundle(bundle, tlog.read_tile(session, bundle))
                    == commitments[start:start + bundle.width])


def test_integration_builds_the_tiles_and_head_of_the_events_in_id_order(container):
    assert tlog.integrate_audit_log(container.session_factory) == tlog.Integration(0, 0, merkle.EMPTY_ROOT)
    total = 0
    # Sizes on both sides of tile edges, integrated in batches that end inside tiles.
    for grow in (1, 254, 1, 1, 255, 88):
        append_events(container, grow, total)
        total += grow
        done = tlog.integrate_audit_log(container.session_factory, batch=100)
        assert done.new_size == total
        assert_stored_tree_is(container, total)
    with container.session_factory() as session:
        # Full tiles are stored once, partial ones at their widest: 600 leaves are 2 full level-0 tiles,
        # one of 88, a level-1 tile of 2, and the entries beside them.
        rows = session.execute(select(LogTile.level, LogTile.index, LogTile.width).order_by(LogTile.level,
                                                                                             LogTile.index)).all()
    assert [tuple(r) for r in rows] == [(-1, 0, 256), (-1, 1, 256), (-1, 2, 88), (0, 0, 256), (0, 1, 256),
                                        (0, 2, 88), (1, 0, 2)]


def test_running_it_twice_changes_nothing(container):
    append_events(container, 300)
    first = tlog.integrate_audit_log(container.session_factory)
    with container.session_factory() as session:
        before = session.execute(select(LogTile.level, LogTile.index, LogTile.data)).all()
    again = tlog.integrate_audit_log(container.session_factory)
    assert (again.old_size, again.new_size, again.root) == (300, 300, first.root)
    with container.session_factory() as session:
        assert session.execute(select(LogTile.level, LogTile.index, LogTile.data)).all() == before


def test_tiles_of_a_tree_the_log_has_not_reached_are_not_found(container):
    append_events(container, 10)
    tlog.integrate_audit_log(container.session_factory)
    with container.session_factory() as session:
        assert len(tlog.read_tile_path(session, "tile/0/000.p/10")) == 320
        assert len(tlog.read_tile_path(session, "tile/0/000.p/3")) == 96
        for path in ("tile/0/000.p/11", "tile/0/000", "tile/0/001.p/1", "tile/1/000.p/1", "tile/0/00",
                     "tile/entries/000.p/11", "tile/0/000.p/010"):
            with pytest.raises(LogTileNotFoundError):
                tlog.read_tile_path(session, path)


def test_the_job_is_queued_when_the_chain_is_ahead_of_the_log_and_runs_as_a_worker_job(container):
    from workers.handlers import build_handlers
    from workers.loop import Worker

    with container.session_factory() as session:
        assert tlog.arm_integration(session, now=NOW) is False
    append_events(container, 5)
    for _ in range(2):  # queued once, however often armed
        with container.session_factory() as session:
            assert tlog.arm_integration(session, now=container.clock.now()) is True
    with container.session_factory() as session:
        jobs = session.scalars(select(Job).where(Job.kind == JobKind.INTEGRATE_AUDIT_LOG.value)).all()
        assert len(jobs) == 1
    worker = Worker(container, build_handlers(), "w-1")
    while worker.run_once():
        pass
    with container.session_factory() as session:
        assert tlog.log_size(session) == 5
        assert tlog.latest_checkpoint(session) is not None
        # Caught up and signed: nothing to queue.
        assert tlog.arm_integration(session, now=container.clock.now()) is False


# --- ids committed out of order, concurrent writers (PostgreSQL) ---------------------------------------


def _raw_event(conn, event_id: int, prev_hash: str = audit.GENESIS) -> None:
    at = NOW + dt.timedelta(seconds=event_id)
    h = audit.event_hash(id=event_id, at=at, actor="bob", action="test.raw", subject=f"raw/{event_id}",
                         tenant=None, details={}, prev_hash=prev_hash)
    conn.execute(text("INSERT INTO audit_events (id, at, actor, action, subject, tenant, details, prev_hash, hash) "
                      "VALUES (:id, :at, 'bob', 'test.raw', :subject, NULL, '{}', :prev, :hash)"),
                 {"id": event_id, "at": at, "subject": f"raw/{event_id}", "prev": prev_hash, "hash": h})


@pytest.mark.postgres
def test_an_id_still_in_flight_is_never_skipped_when_a_later_one_commits_first(container, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("two open write transactions need PostgreSQL")
    append_events(container, 3)
    engine = make_engine(database_url)
    slow, fast = engine.connect(), engine.connect()
    try:
        slow.begin()
        _raw_event(slow, 4)  # in flight
        with fast.begin():
            _raw_event(fast, 5)
            fast.execute(text("UPDATE audit_head SET last_event_id = 5"))
        # The writer of id 4 is still open: the integrator does not wait for it, and stops before it.
        assert tlog.integrate_audit_log(container.session_factory).new_size == 3
        slow.commit()
        assert tlog.integrate_audit_log(container.session_factory).new_size == 5
    finally:
        slow.close()
        fast.close()
        engine.dispose()
    assert_stored_tree_is(container, 5)


@pytest.mark.postgres
def test_concurrent_writers_and_integrators_put_every_event_in_the_tree_once(container, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("concurrent writers need PostgreSQL")
    writers, per_writer = 4, 40
    done = threading.Event()
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for i in range(per_writer):
                append_events(container, 1, w * 1000 + i)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    def integrate() -> None:
        try:
            while not done.is_set():
                tlog.integrate_audit_log(container.session_factory, batch=7)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    integrators = [threading.Thread(target=integrate) for _ in range(2)]
    for t in [*threads, *integrators]:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in integrators:
        t.join()
    assert errors == []
    tlog.integrate_audit_log(container.session_factory)
    assert_stored_tree_is(container, writers * per_writer)


# --- checkpoints ---------------------------------------------------------------------------------------


def test_checkpoints_are_signed_when_the_tree_grew_at_the_interval_and_on_demand(container):
    key = Ed25519Signer.generate("registry.example/log")
    sign = lambda now, **kw: tlog.sign_checkpoint_if_due(container.session_factory, key, interval=10, now=now, **kw)  # noqa: E731
    assert sign(NOW) is None  # nothing integrated
    append_events(container, 3)
    tlog.integrate_audit_log(container.session_factory)
    first = sign(NOW)
    opened = open_checkpoint(first.encode(), "registry.example/log", key.verifier())
    hashes, _ = memory_tree(container)
    assert (opened.checkpoint.size, opened.checkpoint.root_hash) == (3, merkle.root_hash(3, hashes))
    assert sign(NOW + dt.timedelta(seconds=60)) is None  # it did not grow
    append_events(container, 2, 3)
    tlog.integrate_audit_log(container.session_factory)
    assert sign(NOW + dt.timedelta(seconds=5)) is None  # too soon
    assert open_checkpoint(sign(NOW + dt.timedelta(seconds=6), on_demand=True).encode(), "registry.example/log",
                           key.verifier()).checkpoint.size == 5
    append_events(container, 1, 5)
    tlog.integrate_audit_log(container.session_factory)
    assert sign(NOW + dt.timedelta(seconds=16)) is not None
    with container.session_factory() as session:
        assert tlog.latest_checkpoint(session).startswith("registry.example/log\n6\n")


def test_a_checkpoint_is_never_signed_over_a_tree_that_does_not_extend_the_last_one(container):
    key = Ed25519Signer.generate("registry.example/log")
    append_events(container, 4)
    tlog.integrate_audit_log(container.session_factory)
    tlog.sign_checkpoint_if_due(container.session_factory, key, interval=10, now=NOW)
    # Someone with the database rewrites leaf 1 and recomputes the tree over it (a fork at size 4).
    forged = merkle.MemoryHashes([merkle.leaf_hash(b"x%d" % i) for i in range(4)])
    append_events(container, 2, 4)
    tlog.integrate_audit_log(container.session_factory)
    with container.session_factory() as session:
        hashes, _ = memory_tree(container)
        for i in range(4):
            hashes._stored[(0, i)] = forged(0, i)
        tile_data = b"".join(hashes(0, i) for i in range(6))
        session.execute(update(LogTile).where(LogTile.level == 0, LogTile.index == 0).values(data=tile_data))
        edge = merkle.CompactRange()
        for i in range(6):
            edge.append(hashes(0, i))
        session.execute(update(LogHead).values(root=edge.root(), edge=b"".join(edge.hashes())))
        session.commit()
    with pytest.raises(LogProofError):
        tlog.sign_checkpoint_if_due(container.session_factory, key, interval=10, now=NOW, on_demand=True)
    with container.session_factory() as session:
        assert tlog.latest_checkpoint(session).startswith("registry.example/log\n4\n")


def test_the_log_keeps_the_origin_of_its_first_checkpoint(container):
    append_events(container, 1)
    tlog.integrate_audit_log(container.session_factory)
    tlog.sign_checkpoint_if_due(container.session_factory, Ed25519Signer.generate("a.example/log"), interval=10,
                                now=NOW)
    append_events(container, 1, 1)
    tlog.integrate_audit_log(container.session_factory)
    from registry.domain.errors import MalformedCheckpointError

    with pytest.raises(MalformedCheckpointError):
        tlog.sign_checkpoint_if_due(container.session_factory, Ed25519Signer.generate("b.example/log"),
                                    interval=10, now=NOW, on_demand=True)


def test_proofs_from_stored_tiles_verify(container):
    append_events(container, 300)
    tlog.integrate_audit_log(container.session_factory)
    hashes, commitments = memory_tree(container)
    with container.session_factory() as session:
        for index, size in [(0, 1), (5, 300), (299, 300), (255, 257)]:
            proof = tlog.inclusion(session, index=index, size=size)
            merkle.verify_inclusion(merkle.leaf_hash(commitments[index]), index, size, proof["hashes"],
                                    merkle.root_hash(size, hashes))
        for first, second in [(1, 300), (256, 300), (100, 257), (300, 300)]:
            proof = tlog.consistency(session, first=first, second=second)
            merkle.verify_consistency(first, second, merkle.root_hash(first, hashes),
                                      merkle.root_hash(second, hashes), proof["hashes"])
    source = TileHashes(300, lambda tile: build_tile(tile, hashes))
    assert merkle.root_hash(300, source) == merkle.root_hash(300, hashes)


def test_a_proof_reads_the_head_and_its_tiles_in_one_statement_and_gives_the_trees_roots(container):
    append_events(container, 300)
    tlog.integrate_audit_log(container.session_factory)
    hashes, commitments = memory_tree(container)
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("SELECT"):  # not SQLite's explicit BEGIN
            statements.append(statement)

    event.listen(container.engine, "before_cursor_execute", record)
    try:
        with container.session_factory() as session:
            for index, size in [(5, 300), (299, 300), (255, 257)]:  # the head's size, and a smaller tree
                statements.clear()
                proof = tlog.inclusion(session, index=index, size=size)
                assert len(statements) == 1, statements
                assert proof["root"] == merkle.root_hash(size, hashes)
                assert proof["leaf_hash"] == merkle.leaf_hash(commitments[index])
                merkle.verify_inclusion(proof["leaf_hash"], index, size, proof["hashes"], proof["root"])
            for first, second in [(100, 300), (256, 257)]:
                statements.clear()
                proof = tlog.consistency(session, first=first, second=second)
                assert len(statements) == 1, statements
                assert (proof["first_root"], proof["second_root"]) == (merkle.root_hash(first, hashes),
                                                                       merkle.root_hash(second, hashes))
    finally:
        event.remove(container.engine, "before_cursor_execute", record)


def test_a_proof_over_a_log_missing_one_of_its_tiles_is_refused_not_computed(container):
    """A damaged log (a tile row gone) answers LogTileNotFoundError; the proof is never made up."""
    from sqlalchemy import delete

    append_events(container, 300)
    tlog.integrate_audit_log(container.session_factory)
    with container.session_factory() as session:
        session.execute(delete(LogTile).where(LogTile.level == 0, LogTile.index == 1))
        session.commit()
        assert tlog.inclusion(session, index=5, size=200)["size"] == 200  # the first tile alone still proves
        with pytest.raises(LogTileNotFoundError):
            tlog.inclusion(session, index=5, size=300)
        with pytest.raises(LogTileNotFoundError):
            tlog.consistency(session, first=100, second=300)


def test_a_proof_read_outside_a_transaction_leaves_the_pooled_connection_transactional(database_url):
    """Proof reads run outside a transaction on PostgreSQL (one round trip); the connection they used goes
    back to the pool as it was: the next session on it still rolls back what it did not commit."""
    from sqlalchemy.orm import sessionmaker

    from registry.db.session import one_statement_session

    engine = make_engine(database_url, pool_size=1, max_overflow=0)  # one connection: the next session gets it
    factory = sessionmaker(engine)
    try:
        with one_statement_session(factory) as session:
            if engine.dialect.name == "postgresql":
                assert session.connection().connection.dbapi_connection.autocommit  # psycopg: no BEGIN sent
            session.execute(select(LogHead.size)).all()
        with factory() as session:
            session.execute(text("UPDATE audit_head SET last_hash = 'not-committed' WHERE id = 1"))
            session.execute(text("INSERT INTO log_head (id, size, root, edge, checkpoint_size) "
                                 "VALUES (99, 0, :b, :b, 0)"), {"b": b""})
        with factory() as session:
            assert session.scalar(select(func.count()).select_from(LogHead).where(LogHead.id == 99)) == 0
    finally:
        engine.dispose()
