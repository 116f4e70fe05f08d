"""The audit log's hash chain (``registry.audit``): it verifies, names an edited, deleted or reordered row,
and concurrent appends form one chain, on SQLite and PostgreSQL."""

import threading

import pytest
from sqlalchemy import delete, select, update

from registry import audit
from registry.db.models import AuditEvent
from registry.db.session import begin_write
from registry.domain.errors import AuditChainError


def _append_n(session, n):
    for i in range(n):
        audit.append(session, actor=f"user{i % 3}", action="version.submitted", subject=f"acme/m@{i}",
                     tenant="acme", details={"i": i, "nested": {"a": [1, 2]}})
    session.commit()


def test_chain_verifies(session):
    _append_n(session, 10)
    report = audit.verify(session)
    assert report.events == 10


def test_empty_chain_verifies(session):
    assert audit.verify(session).events == 0


@pytest.mark.parametrize(
    "column,value",
    [("actor", "mallory"), ("details", {"i": 4, "nested": {"a": [1, 2]}, "x": 1}), ("subject", "acme/m@99")],
)
def test_edited_row_is_named(session, column, value):
    _append_n(session, 8)
    session.execute(update(AuditEvent).where(AuditEvent.id == 5).values({column: value}))
    session.commit()
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    assert err.value.details["event_id"] == 5 and err.value.details["problem"] == "altered"


def test_deleted_row_is_named(session):
    _append_n(session, 8)
    session.execute(delete(AuditEvent).where(AuditEvent.id == 3))
    session.commit()
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    assert err.value.details["event_id"] == 3 and err.value.details["problem"] == "missing"


def test_deleted_newest_rows_are_detected(session):
    _append_n(session, 8)
    session.execute(delete(AuditEvent).where(AuditEvent.id >= 7))
    session.commit()
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    assert err.value.details["event_id"] == 7 and err.value.details["problem"] == "truncated"


def test_reordered_rows_are_detected(session):
    _append_n(session, 6)
    rows = {e.id: e for e in session.scalars(select(AuditEvent)).all()}
    a, b = rows[3], rows[4]
    swap = {c: (getattr(a, c), getattr(b, c))
            for c in ("at", "actor", "action", "subject", "details", "prev_hash", "hash")}
    for c, (va, vb) in swap.items():
        setattr(a, c, vb)
        setattr(b, c, va)
    session.commit()
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    assert err.value.details["event_id"] == 3


def test_rehashed_edit_still_breaks_the_next_link(session):
    """An attacker who edits a row and recomputes its hash still breaks the link to the next event."""
    _append_n(session, 5)
    ev = session.get(AuditEvent, 2)
    ev.actor = "mallory"
    ev.hash = audit.event_hash(id=ev.id, at=ev.at, actor=ev.actor, action=ev.action, subject=ev.subject,
                               tenant=ev.tenant, details=ev.details, prev_hash=ev.prev_hash)
    session.commit()
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    assert err.value.details["event_id"] == 3 and err.value.details["problem"] == "broken-link"


def test_concurrent_appends_form_one_chain(container):
    """Writers in parallel transactions, the very first event included, append to one chain."""
    writers, per_writer = 6, 10
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            start.wait()
            for i in range(per_writer):
                with container.session_factory() as s:
                    begin_write(s)
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
        assert audit.verify(s).events == writers * per_writer
