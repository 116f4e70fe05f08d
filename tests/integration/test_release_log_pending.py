"""A release is never served without its log proof while the registry holds the log key, on SQLite and PostgreSQL.

The manifest request integrates the log up to the release's events itself and signs a checkpoint holding
them. The worker's ``integrate_audit_log`` job may integrate the same events at the same moment; the
request once decided from a size read before it locked the log head, found nothing left to integrate and
served the release without a proof, which a node refused as unproven ("the registry sent ... without a
proof that it is in the log", seen once from ``cache warm`` under the full suite). That interleaving is
reproduced here without timing luck: the worker's half runs in its own session exactly between the
request's size read and its lock. A log further behind than a request integrates itself is answered 503
with ``Retry-After`` (problem type ``release-not-logged-yet``), and a node's client asks again after it.
"""

from __future__ import annotations

import base64
import datetime as dt
from contextlib import contextmanager

import pytest
from sqlalchemy import event, func, select

from registry.client.api import MANIFEST_RETRIES, RegistryApi
from registry.client.errors import NetworkError
from registry.db.models import ReleaseIssuance
from registry.services import tlog, trust_roots
from registry.tlog import events as log_events
from registry.tlog import merkle
from registry.tlog.checkpoint import parse_checkpoint
from registry.tlog.note import parse_note
from tests.support.manifest_standin import Standin
from tests.support.release_world import BASE, _as, build_release_world, promote

pytestmark = pytest.mark.seeded(builder=build_release_world)


@pytest.fixture
def logged(release_world, container):
    """The release world whose newest trust root names the registry's log: every release carries its proof."""
    with container.session_factory() as session:
        trust_roots.publish_log(session, container.keyring, container.log_trust, expires_in=dt.timedelta(days=30),
                                clock=container.clock)
    return release_world


def fetch(client, tokens):
    return client.get(BASE, headers=_as(tokens), params={"ref": "prod"})


def assert_proven(body) -> None:
    """The release carries a checkpoint and an inclusion proof in it of its approval and its alias move."""
    proof = body["log"]
    assert proof is not None, "a release served without its log proof"
    checkpoint = parse_checkpoint(parse_note(proof["checkpoint"].encode()).text)
    actions = set()
    for entry in proof["entries"]:
        leaf = merkle.leaf_hash(log_events.commitment(entry["event"]))
        merkle.verify_inclusion(leaf, entry["index"], checkpoint.size,
                                [base64.b64decode(h) for h in entry["inclusion_proof"]], checkpoint.root_hash)
        actions.add(entry["event"]["action"])
    assert "version.approved" in actions and len(proof["entries"]) == 2


def issuances(container) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(ReleaseIssuance))


@contextmanager
def worker_integrates_before_the_request_locks_the_log(container):
    """Run the worker's integration (no checkpoint: its interval has not passed) in a session of its own
    the moment the request, having read the log's size, starts the transaction that locks the log head
    (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's insert-or-nothing of the head row). Yields the list the
    run is recorded in."""
    ran: list[tlog.Integration] = []
    size_read = False

    def before(conn, cursor, statement, parameters, context, executemany):
        nonlocal size_read
        text = " ".join(statement.split())
        if text.startswith("SELECT log_head.size FROM log_head"):
            size_read = True
        elif size_read and not ran and text.startswith(("BEGIN IMMEDIATE", "INSERT INTO log_head ")):
            ran.append(None)  # first: the worker's own statements pass through here too
            ran[0] = tlog.integrate_audit_log(container.session_factory)

    event.listen(container.engine, "before_cursor_execute", before)
    try:
        yield ran
    finally:
        event.remove(container.engine, "before_cursor_execute", before)


def test_a_release_the_worker_integrates_meanwhile_is_served_with_its_proof(logged, container):
    client, tokens, admin = logged
    promote(container, admin, 2)  # a move no checkpoint covers yet
    with container.session_factory() as session:
        before = tlog.log_size(session)
    with worker_integrates_before_the_request_locks_the_log(container) as ran:
        r = fetch(client, tokens)
    assert r.status_code == 200, r.text
    # The worker took the log past the release's events before the request could lock it.
    assert len(ran) == 1 and ran[0].old_size == before and ran[0].new_size > before
    assert_proven(r.json())


def test_a_release_the_log_cannot_prove_yet_is_answered_503_with_retry_after_then_proven(logged, container):
    client, tokens, admin = logged
    container.settings.log_release_catch_up_events = 0  # as a log still being built after an upgrade
    promote(container, admin, 2)
    recorded = issuances(container)
    r = fetch(client, tokens)
    assert r.status_code == 503, r.headers
    assert r.headers["Retry-After"] == "2"
    assert r.headers["Content-Type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["type"] == "https://modelreg.dev/problems/release-not-logged-yet"
    assert problem["ref"] == "prod" and problem["retry_after"] == 2
    assert issuances(container) == recorded, "a release refused 503 was recorded as issued"

    # The worker's job catches the log up and signs: the next request carries the proof.
    tlog.integrate_audit_log(container.session_factory)
    tlog.sign_checkpoint_if_due(container.session_factory, container.log_key, interval=0, now=container.clock.now())
    r = fetch(client, tokens)
    assert r.status_code == 200, r.text
    assert_proven(r.json())
    assert issuances(container) == recorded + 1


RELEASE = {"envelope": {"payloadType": "x", "payload": "", "signatures": []}, "transport": {},
           "signature_bundle": {}}


def test_the_node_client_asks_again_after_a_503_with_retry_after():
    with Standin("http://127.0.0.1:9") as standin:
        standin.manifests[("acme", "tiny", "prod")] = RELEASE
        standin.unavailable[("acme", "tiny", "prod")] = MANIFEST_RETRIES
        with RegistryApi(standin.url, "token") as api:
            answer = api.manifest("acme", "tiny", "prod")
        assert answer is not None and answer.envelope == RELEASE["envelope"]
        assert len(standin.manifest_gets) == MANIFEST_RETRIES + 1


def test_the_node_client_asks_again_a_bounded_number_of_times():
    with Standin("http://127.0.0.1:9") as standin:
        standin.manifests[("acme", "tiny", "prod")] = RELEASE
        standin.unavailable[("acme", "tiny", "prod")] = MANIFEST_RETRIES + 5
        with RegistryApi(standin.url, "token") as api, pytest.raises(NetworkError) as refused:
            api.manifest("acme", "tiny", "prod")
        assert refused.value.details["status"] == 503
        assert len(standin.manifest_gets) == MANIFEST_RETRIES + 1
