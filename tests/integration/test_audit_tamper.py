"""Tampering with any stored field of any audit row, at any position, is named by ``verify``.

The cases are generated from the tables' columns: a column added to ``audit_events`` or
``audit_head`` without an entry in ``EVENT_ALTERATIONS`` / ``HEAD_ALTERATIONS`` fails
``test_every_column_has_an_alteration`` (and its generated case fails), so a field left out of the
hash cannot slip in unnoticed. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable

import pytest
from sqlalchemy import delete, select, update

from registry import audit
from registry.db.models import AuditEvent, AuditHead
from registry.domain.errors import AuditChainError

EVENTS = 5
POSITIONS = {"first": 1, "middle": 3, "newest": EVENTS}


def _flip(hex_value: str) -> str:
    return ("1" if hex_value[0] == "0" else "0") + hex_value[1:]


# How to alter each stored field of an event so that the row still fits its column.
EVENT_ALTERATIONS: dict[str, Callable[[Any], Any]] = {
    "id": lambda v: v + 1000,
    "at": lambda v: v + dt.timedelta(microseconds=1),
    "actor": lambda v: v + "x",
    "action": lambda v: v + "x",
    "subject": lambda v: v + "x",
    "tenant": lambda v: "other",
    "details": lambda v: {**v, "tampered": True},
    "prev_hash": _flip,
    "hash": _flip,
}

HEAD_ALTERATIONS: dict[str, Callable[[Any], Any]] = {
    "id": lambda v: v + 1,
    "last_event_id": lambda v: v - 1,
    "last_hash": _flip,
}

EVENT_COLUMNS = [c.name for c in AuditEvent.__table__.columns]
HEAD_COLUMNS = [c.name for c in AuditHead.__table__.columns]


def _fill(session) -> None:
    for i in range(EVENTS):
        # Every event carries every field, tenant included, so each alteration changes a real value.
        audit.append(session, actor=f"user{i}", action="version.submitted", subject=f"acme/m@{i}",
                     tenant="acme", details={"i": i, "nested": {"a": [1, 2]}})
    session.commit()
    assert audit.verify(session).events == EVENTS


def _named(session) -> AuditChainError:
    with pytest.raises(AuditChainError) as err:
        audit.verify(session)
    return err.value


def test_every_column_has_an_alteration():
    assert set(EVENT_COLUMNS) == set(EVENT_ALTERATIONS), "give each audit_events column an alteration"
    assert set(HEAD_COLUMNS) == set(HEAD_ALTERATIONS), "give each audit_head column an alteration"


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("column", EVENT_COLUMNS)
def test_an_altered_field_is_named(session, column, position):
    if column not in EVENT_ALTERATIONS:
        pytest.fail(f"audit_events.{column} has no tamper case: add it to EVENT_ALTERATIONS")
    _fill(session)
    event_id = POSITIONS[position]
    table = AuditEvent.__table__
    old = session.execute(select(table.c[column]).where(table.c.id == event_id)).scalar_one()
    session.execute(update(table).where(table.c.id == event_id).values({column: EVENT_ALTERATIONS[column](old)}))
    session.commit()
    assert _named(session).details["event_id"] == event_id


@pytest.mark.parametrize("column", HEAD_COLUMNS)
def test_an_altered_head_is_named(session, column):
    if column not in HEAD_ALTERATIONS:
        pytest.fail(f"audit_head.{column} has no tamper case: add it to HEAD_ALTERATIONS")
    _fill(session)
    table = AuditHead.__table__
    old = session.execute(select(table.c[column])).scalar_one()
    session.execute(update(table).values({column: HEAD_ALTERATIONS[column](old)}))
    session.commit()
    err = _named(session)
    assert err.details["problem"] == "truncated" and err.details["event_id"] == EVENTS + 1


@pytest.mark.parametrize("position", POSITIONS)
def test_a_deleted_event_is_named(session, position):
    _fill(session)
    event_id = POSITIONS[position]
    session.execute(delete(AuditEvent).where(AuditEvent.id == event_id))
    session.commit()
    err = _named(session)
    assert err.details["event_id"] == event_id
    assert err.details["problem"] == ("truncated" if position == "newest" else "missing")


@pytest.mark.parametrize("pair", [(1, 2), (2, 4), (EVENTS - 1, EVENTS)], ids=["first", "middle", "newest"])
def test_swapped_events_are_named(session, pair):
    """Two rows exchange everything but their ids (ids are the order): the earlier one is named."""
    _fill(session)
    table = AuditEvent.__table__
    a, b = (session.execute(select(table).where(table.c.id == i)).mappings().one() for i in pair)
    swapped = [c for c in EVENT_COLUMNS if c != "id"]
    session.execute(update(table).where(table.c.id == pair[0]).values({c: b[c] for c in swapped}))
    session.execute(update(table).where(table.c.id == pair[1]).values({c: a[c] for c in swapped}))
    session.commit()
    assert _named(session).details["event_id"] == pair[0]


def test_swapped_ids_are_named(session):
    """Two rows exchange only their ids: the chain is read in id order, so the earlier id is named."""
    _fill(session)
    table = AuditEvent.__table__
    session.execute(update(table).where(table.c.id == 2).values(id=-2))
    session.execute(update(table).where(table.c.id == 4).values(id=2))
    session.execute(update(table).where(table.c.id == -2).values(id=4))
    session.commit()
    assert _named(session).details["event_id"] == 2
