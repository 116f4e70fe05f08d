"""Batched audit appends (``registry.audit.append_many``): one head lock and one insert for N events, chained
exactly as N single appends, on SQLite and PostgreSQL; batches and single appends from parallel transactions
form one chain; on PostgreSQL a batch is announced once, and the watcher still wakes for every event in it."""

import asyncio
import threading
import time

import psycopg
import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import select

from registry import audit, watch
from registry.db.models import AuditEvent, AuditHead
from registry.db.session import begin_write


def _entries(n: int, prefix: str = "e") -> list[audit.Entry]:
    return [audit.Entry(actor=f"user{i % 3}", action="version.submitted", subject=f"acme/{prefix}@{i}",
                        tenant="acme" if i % 2 else None, details={"i": i, "nested": {"a": [1, 2]}})
            for i in range(n)]


def test_a_batch_chains_on_from_the_head_and_verifies(session):
    first = audit.append(session, actor="alice", action="tenant.created", subject="tenant/acme")
    batch = audit.append_many(session, _entries(5))
    last = audit.append(session, actor="bob", action="tenant.created", subject="tenant/other")
    session.commit()

    assert [e.id for e in batch] == [2, 3, 4, 5, 6] and (first.id, last.id) == (1, 7)
    assert batch[0].prev_hash == first.hash and last.prev_hash == batch[-1].hash
    assert all(b.prev_hash == a.hash for a, b in zip(batch, batch[1:]))
    rows = session.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
    assert [(r.id, r.subject, r.details, r.hash) for r in rows[1:6]] == \
        [(e.id, f"acme/e@{i}", {"i": i, "nested": {"a": [1, 2]}}, e.hash) for i, e in enumerate(batch)]
    head = session.get(AuditHead, 1)
    assert (head.last_event_id, head.last_hash) == (7, last.hash)
    assert audit.verify(session).events == 7


def test_each_event_of_a_batch_hashes_as_one_appended_alone(session):
    """Its hash covers its own fields and the one before it: what ``verify`` recomputes for each."""
    batch = audit.append_many(session, _entries(3))
    session.commit()
    for event in batch:
        assert event.hash == audit.event_hash(id=event.id, at=event.at, actor=event.actor, action=event.action,
                                              subject=event.subject, tenant=event.tenant, details=event.details,
                                              prev_hash=event.prev_hash)
    assert audit.verify(session).head_hash == batch[-1].hash


def test_a_batch_is_one_insert(session):
    statements: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    engine = session.get_bind()
    sa_event.listen(engine, "before_cursor_execute", seen)
    try:
        audit.append_many(session, _entries(200))
        session.commit()
    finally:
        sa_event.remove(engine, "before_cursor_execute", seen)
    assert sum(s.lstrip().upper().startswith("INSERT INTO AUDIT_EVENTS") for s in statements) == 1
    assert len(statements) <= 6, statements
    assert audit.verify(session).events == 200


def test_an_empty_batch_appends_nothing(session):
    assert audit.append_many(session, []) == []
    session.commit()
    assert audit.verify(session).events == 0
    assert session.get(AuditHead, 1) is None


def test_batches_and_single_appends_in_parallel_form_one_chain(container):
    """Writers in parallel transactions, some appending batches and some one event at a time, the very first
    event included, append to one chain with contiguous ids."""
    writers, per_writer, batch = 6, 5, 7
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            start.wait()
            for i in range(per_writer):
                with container.session_factory() as s:
                    begin_write(s)
                    if n % 2:
                        audit.append_many(s, _entries(batch, prefix=f"w{n}-{i}"))
                    else:
                        audit.append(s, actor=f"writer{n}", action="test.appended", subject=f"w{n}/{i}")
                    s.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with container.session_factory() as s:
        expected = (writers // 2) * per_writer * batch + (writers - writers // 2) * per_writer
        assert audit.verify(s).events == expected
        # A batch is never interleaved with another transaction's events.
        subjects = s.scalars(select(AuditEvent.subject).order_by(AuditEvent.id)).all()
        runs = [sub.split("@")[0] for sub in subjects if sub.startswith("acme/")]
        for k in range(0, len(runs), batch):
            assert len(set(runs[k:k + batch])) == 1, runs[k:k + batch]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_batch_is_announced_once_with_its_last_id(session, database_url):
    dsn = session.get_bind().url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {audit.NOTIFY_CHANNEL}")
        batch = audit.append_many(session, _entries(4))
        session.commit()
        payloads = [n.payload for n in listener.notifies(timeout=2.0)]
    assert payloads == [str(batch[-1].id)]


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_watcher_wakes_a_waiter_on_the_first_event_of_a_batch(container):
    """The notification names the last event; the watcher reads every event past its head, so a waiter keyed
    on any event of the batch wakes (its safety poll is far past the wait: only the notification answers)."""
    watcher = watch.EventWatcher(container.engine, safety_poll_seconds=120)

    async def scenario() -> None:
        await watcher.start()
        try:
            waiting = asyncio.create_task(watcher.wait({"acme/e@0"}, watcher.head, timeout=30))
            while watcher.waiting < 1:
                await asyncio.sleep(0.01)

            def write() -> None:
                with container.session_factory() as s:
                    begin_write(s)
                    audit.append_many(s, _entries(3))
                    s.commit()

            await asyncio.to_thread(write)
            written = time.monotonic()
            assert await waiting == "news"
            assert time.monotonic() - written < 10
            assert watcher.head == 3
        finally:
            await watcher.stop()

    asyncio.run(scenario())
