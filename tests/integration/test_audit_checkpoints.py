"""Signed audit checkpoints: a chain cut or recomputed behind a saved checkpoint fails verification.

Without checkpoints, someone who can write the database can drop the newest events and move the
head, or edit an event and recompute every hash after it, and ``verify`` passes; these tests show
both attacks first, then that a checkpoint saved before them names what happened.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time

import pytest
from sqlalchemy import func, select

from registry import audit
from registry.db.models import AuditCheckpoint, AuditHead
from registry.db.session import begin_write
from registry.domain.errors import AuditChainError, AuditCheckpointError
from registry.signing.dsse import verify_envelope
from registry.signing.keys import SigningKey
from tests.support.audit_attacks import cut_after, rewrite


def _append_n(session, n, start=0):
    begin_write(session)
    for i in range(start, start + n):
        audit.append(session, actor=f"user{i % 3}", action="tenant.created", subject=f"tenant/t{i}",
                     tenant=f"t{i}", details={"i": i})
    session.commit()


def _saved(session, key):
    """Checkpoint the head and return it as an auditor saves it (the endpoint's JSON)."""
    return json.loads(json.dumps(audit.checkpoint(session, key).as_dict()))


@pytest.fixture
def key(container):
    return container.signing_key


def test_a_checkpoint_signs_event_id_chain_hash_and_time(session, key):
    _append_n(session, 3)
    cp = audit.checkpoint(session, key, now=dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc))
    payload = json.loads(verify_envelope(cp.envelope, key.public_key, audit.CHECKPOINT_PAYLOAD_TYPE))
    head = session.get(AuditHead, 1)
    assert payload == {"event_id": 3, "event_hash": head.last_hash, "at": "2026-11-30T12:00:00.000000Z"}
    assert (cp.event_id, cp.event_hash, cp.key_id) == (3, head.last_hash, key.key_id)
    # The head has not moved: the same checkpoint, not a second one.
    assert audit.checkpoint(session, key).id == cp.id
    assert session.scalar(select(func.count()).select_from(AuditCheckpoint)) == 1
    assert audit.verify(session, checkpoints=[cp.as_dict()], keys=key.public_key).checkpoints == 1


def test_an_empty_log_has_no_checkpoint(session, key):
    assert audit.checkpoint(session, key) is None


@pytest.mark.parametrize("kept", [5, 4, 1])
def test_truncation_behind_a_checkpoint_is_named(session, key, kept):
    _append_n(session, 6)
    saved = _saved(session, key)
    cut_after(session, kept)
    audit.verify(session)  # the attack the head alone cannot see
    with pytest.raises(AuditChainError) as err:
        audit.verify(session, checkpoints=[saved], keys=key.public_key)
    assert err.value.details["problem"] == "truncated" and err.value.details["event_id"] == kept + 1
    assert err.value.details["checkpoint_event_id"] == 6
    assert "removed" in str(err.value)


def test_recomputation_behind_a_checkpoint_is_named(session, key):
    _append_n(session, 2)
    first = _saved(session, key)
    _append_n(session, 2, start=2)
    second = _saved(session, key)
    _append_n(session, 2, start=4)
    rewrite(session, 3, actor="mallory")
    audit.verify(session)  # the attack the chain alone cannot see
    with pytest.raises(AuditChainError) as err:
        audit.verify(session, checkpoints=[first, second], keys=key.public_key)
    # The first checkpoint still holds; the second names the event whose signed hash changed.
    assert err.value.details["problem"] == "rewritten" and err.value.details["event_id"] == 4
    assert err.value.details["expected"] == second["event_hash"]


def test_recomputed_and_cut_below_every_checkpoint_is_named(session, key):
    _append_n(session, 5)
    saved = _saved(session, key)
    rewrite(session, 2, details={"i": 99})
    cut_after(session, 3)
    with pytest.raises(AuditChainError) as err:
        audit.verify(session, checkpoints=[saved], keys=key.public_key)
    assert err.value.details["problem"] == "truncated"


def _resign_payload(cp, **changes):
    envelope = dict(cp["envelope"])
    payload = json.loads(base64.b64decode(envelope["payload"]))
    payload.update(changes)
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return {**cp, "envelope": envelope}


@pytest.mark.parametrize("forge", [
    pytest.param(lambda cp, other: _resign_payload(cp, event_id=1), id="payload-edited"),
    pytest.param(lambda cp, other: {**cp, "envelope": {**cp["envelope"], "signatures": [
        {"keyid": "", "sig": base64.b64encode(other.sign(b"x")).decode()}]}}, id="signature-replaced"),
    pytest.param(lambda cp, other: {**cp, "envelope": {**cp["envelope"], "payloadType": "application/json"}},
                 id="payload-type"),
    pytest.param(lambda cp, other: {**cp, "envelope": {**cp["envelope"], "signatures": []}}, id="unsigned"),
])
def test_a_forged_checkpoint_is_reported_as_a_bad_signature(session, key, forge):
    _append_n(session, 3)
    good = _saved(session, key)
    forged = forge(good, SigningKey.generate())
    with pytest.raises(AuditCheckpointError) as err:
        audit.verify(session, checkpoints=[good, forged], keys=key.public_key)
    assert err.value.details == {"checkpoint": 1, "problem": "bad-signature"}
    assert "bad signature" in str(err.value)


def test_a_checkpoint_signed_by_another_key_is_a_bad_signature(session, key):
    _append_n(session, 2)
    other = SigningKey.generate()
    with pytest.raises(AuditCheckpointError) as err:
        audit.verify(session, checkpoints=[_saved(session, other)], keys=key.public_key)
    assert err.value.details["problem"] == "bad-signature"


def test_only_the_signed_payload_counts(session, key):
    _append_n(session, 3)
    cp = _saved(session, key)
    audit.verify(session, checkpoints=[{**cp, "event_id": 99, "event_hash": "0" * 64}], keys=key.public_key)
    with pytest.raises(AuditCheckpointError) as err:
        audit.verify(session, checkpoints=[{"event_id": 3}], keys=key.public_key)
    assert err.value.details["problem"] == "malformed"


@pytest.mark.parametrize("payload", [
    {"event_id": 0, "event_hash": audit.GENESIS, "at": "2026-11-30T12:00:00.000000Z"},
    {"event_id": True, "event_hash": audit.GENESIS, "at": "2026-11-30T12:00:00.000000Z"},
    {"event_id": 1, "at": "2026-11-30T12:00:00.000000Z"},
    ["not", "an", "object"],
], ids=["event-zero", "event-bool", "no-hash", "list"])
def test_a_signed_payload_that_is_no_checkpoint_is_malformed(session, key, payload):
    from registry.signing.canonical import canonical_json
    from registry.signing.dsse import sign_envelope

    envelope = sign_envelope(canonical_json(payload), audit.CHECKPOINT_PAYLOAD_TYPE, key)
    with pytest.raises(AuditCheckpointError) as err:
        audit.verify(session, checkpoints=[{"envelope": envelope}], keys=key.public_key)
    assert err.value.details == {"checkpoint": 0, "problem": "malformed"}


def test_the_registry_never_signs_a_broken_chain(session, key):
    _append_n(session, 3)
    audit.checkpoint(session, key)
    _append_n(session, 3, start=3)
    rewrite(session, 2, actor="mallory")
    with pytest.raises(AuditChainError) as err:
        audit.checkpoint(session, key)
    assert err.value.details["problem"] == "rewritten" and err.value.details["event_id"] == 3
    session.rollback()
    assert audit.latest_checkpoint(session).event_id == 3


def test_checkpoints_are_due_by_event_count_or_time(session, key):
    t0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)

    def due(now):
        return audit.checkpoint_if_due(session, key, every_events=3, every_seconds=60, now=now)

    assert due(t0) is None  # empty log
    _append_n(session, 1)
    assert due(t0).event_id == 1  # the first one is due at once
    _append_n(session, 2, start=1)
    assert due(t0) is None  # 2 new events, 0 seconds
    _append_n(session, 1, start=3)
    assert due(t0).event_id == 4  # 3 new events
    _append_n(session, 1, start=4)
    assert due(t0 + dt.timedelta(seconds=59)) is None
    assert due(t0 + dt.timedelta(seconds=60)).event_id == 5  # 60 seconds, one new event
    assert due(t0 + dt.timedelta(hours=5)) is None  # nothing new to sign


def test_concurrent_checkpoints_of_one_head_write_one(container, session, key):
    _append_n(session, 4)
    start = threading.Barrier(4)
    made, errors = [], []

    def run():
        try:
            start.wait()
            with container.session_factory() as s:
                made.append(audit.checkpoint(s, key).event_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and made == [4] * 4
    assert session.scalar(select(func.count()).select_from(AuditCheckpoint)) == 1


def test_worker_processes_write_checkpoints_at_the_interval(container, session, key):
    from workers.entrypoints import start_workers

    container.settings.audit_checkpoint_every_events = 2
    container.settings.audit_checkpoint_every_seconds = 0.1
    stop = threading.Event()
    threads = start_workers(container, 1, stop)
    try:
        _append_n(session, 3)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            latest = audit.latest_checkpoint(session)
            session.rollback()
            if latest is not None and latest.event_id == 3:
                break
            time.sleep(0.05)
        assert latest is not None and latest.event_id == 3
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    saved = [c.as_dict() for c in audit.checkpoints(session)]
    assert audit.verify(session, checkpoints=saved, keys=key.public_key).checkpoints == len(saved)
