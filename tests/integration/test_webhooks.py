"""Webhooks in-process, on SQLite and PostgreSQL, delivered to real HTTP receivers on 127.0.0.1.

Events are real audit events of the catalogue (appended as the services append them). The
``standardwebhooks`` library verifies every signature (and rejects a replayed or altered delivery), the
``cloudevents`` library parses every body. What is checked: order and no loss per subscription, a
receiver down for a while getting everything after it returns, pausing after the retry window and
resuming, secret rotation, one slow receiver not delaying another, a burst sent in batches on one kept-alive
connection, the egress guard, who may do what.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
import standardwebhooks
from cloudevents.core.formats.json import JSONFormat
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry import audit
from registry.bootstrap import bootstrap
from registry.clock import ManualClock
from registry.db.models import AuditEvent, WebhookSubscription
from registry.db.session import begin_write
from registry.domain import webhooks as hooks
from registry.domain.errors import EgressRefusedError
from registry.net.egress import EgressPolicy
from registry.services import webhooks
from tests.support.registry import drain, make_admin, role_token
from tests.support.webhook_receiver import Receiver
from workers.webhooks import start_webhooks

T = "acme"


@pytest.fixture
def clock():
    # Real time, standing still until moved: signatures carry it and the library checks it against now.
    return ManualClock(dt.datetime.now(dt.timezone.utc))


@pytest.fixture
def container(settings, clock):
    settings.egress_allow = ["127.0.0.1/32"]
    settings.webhook_retry_for_seconds = 600
    settings.webhook_backoff_base_seconds = 1
    settings.webhook_backoff_max_seconds = 8
    settings.webhook_timeout_seconds = 2
    settings.webhook_poll_seconds = 0.05
    c = bootstrap(settings, clock=clock)
    yield c
    c.dispose()


@pytest.fixture
def api(container):
    make_admin(container, T)
    tokens = {"admin": role_token(container, "tadmin", T, "admin"),
              "submitter": role_token(container, "sub", T, "submitter"),
              "other": role_token(container, "oadmin", "beta", "admin")}
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, tokens


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


def call(client, token, method, path, **kwargs):
    return client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)


def subscribe(client, token, url, types=("version.revoked",), **extra):
    r = call(client, token, "POST", "/v1/webhooks", json={"tenant": T, "url": url, "types": list(types), **extra})
    assert r.status_code == 201, r.text
    return r.json()


def revoke_event(container, number: int, tenant: str = T, model: str = "llm") -> int:
    """What revocations.revoke appends for a version: a catalogue event of ``tenant``."""
    with container.session_factory() as session:
        begin_write(session)
        row = audit.append(session, actor="sec", action="version.revoked", subject=f"{tenant}/{model}@{number}",
                           tenant=tenant, details={"state": "revoked", "reason": f"CVE-{number}", "aliases": []})
        session.commit()
        return row.id


def delivery(client, token, hook_id: int, delivery_id: int) -> dict:
    """One delivery of a webhook, read as any delivery is (the list, from its id down)."""
    r = call(client, token, "GET", f"/v1/webhooks/{hook_id}/deliveries", params={"before": delivery_id + 1,
                                                                                  "limit": 1})
    assert r.status_code == 200 and r.json()[0]["id"] == delivery_id, r.text
    return r.json()[0]


def deliver_all(container, rounds: int = 20) -> None:
    """What the workers do: notice due subscriptions, run their jobs; until nothing is left to run."""
    for _ in range(rounds):
        with container.session_factory() as session:
            webhooks.arm_due(session, clock=container.clock)
        if drain(container) == 0:
            return


def verified(secret: str, request) -> dict:
    """The body, after the standardwebhooks library checked its signature; and parsed by cloudevents."""
    standardwebhooks.Webhook(secret).verify(request.body, request.headers)
    event = JSONFormat().read(None, request.body)
    assert event.get_specversion() == "1.0" and event.get_id() == request.headers["webhook-id"]
    assert request.headers["content-type"].startswith("application/cloudevents+json")
    return json.loads(request.body)


def test_events_arrive_in_order_signed_and_as_cloudevents_from_the_subscription_on(api, container, receiver):
    client, tokens = api
    before = revoke_event(container, 1)  # before the subscription: not delivered (no replay of history)
    hook = subscribe(client, tokens["admin"], receiver.url)
    secret = hook["secret"]
    assert secret.startswith("whsec_") and hook["cursor"] >= before
    assert "secret" not in call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
    ids = [revoke_event(container, n) for n in range(2, 7)]
    revoke_event(container, 9, tenant="beta")  # another tenant's
    with container.session_factory() as session:  # a type it did not subscribe to
        audit.append(session, actor="x", action="version.approved", subject=f"{T}/llm@2", tenant=T,
                     details={"state": "approved"})
        session.commit()
    deliver_all(container)

    assert receiver.ids() == [str(i) for i in ids]
    bodies = [verified(secret, r) for r in receiver.requests]
    assert [b["data"]["version"] for b in bodies] == [2, 3, 4, 5, 6]
    assert {b["type"] for b in bodies} == {"dev.modelreg.version.revoked"}
    assert {b["source"] for b in bodies} == {f"/modelreg/tenants/{T}"}
    # The library refuses a replay (an old timestamp, re-signed or not) and an altered body.
    first = receiver.requests[0]
    old = int(time.time()) - 3600
    replayed = {**first.headers, "webhook-timestamp": str(old),
                "webhook-signature": hooks.signature(secret, first.headers["webhook-id"], old, first.body)}
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(first.body, replayed)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(first.body.replace(b"CVE-2", b"CVE-0"), first.headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(hooks.new_secret()).verify(first.body, first.headers)
    deliveries = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}/deliveries").json()
    assert [d["event_id"] for d in deliveries] == [str(i) for i in reversed(ids)]
    assert {d["status_code"] for d in deliveries} == {204}
    # Caught up: nothing is sent twice.
    deliver_all(container)
    assert len(receiver.requests) == 5


def test_a_receiver_down_for_a_while_gets_everything_in_order_after_it_returns(api, container, clock, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url)
    receiver.stop()
    ids = [revoke_event(container, n) for n in range(1, 5)]
    for _ in range(4):  # down: connections refused, retried with a growing delay
        deliver_all(container)
        clock.advance(seconds=10)
    sub = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
    assert sub["state"] == "active" and sub["failed_attempts"] >= 3 and sub["failing_since"]
    assert "Connection" in sub["last_error"] or "refused" in sub["last_error"]
    receiver.start()
    receiver.status = 503  # up, but failing
    deliver_all(container)
    clock.advance(seconds=10)
    receiver.status = 200
    ids += [revoke_event(container, 5)]
    for _ in range(3):
        deliver_all(container)
        clock.advance(seconds=10)
    assert receiver.ids(accepted=True) == [str(i) for i in ids]
    # Every retry was the same event, with the same id: nothing was sent ahead of it.
    assert set(receiver.ids()[:-len(ids)]) == {str(ids[0])}
    for r in receiver.requests:
        verified(hook["secret"], r)
    attempts = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}/deliveries",
                    params={"limit": 500}).json()
    first_event = [d for d in attempts if d["event_id"] == str(ids[0])]
    assert [d["attempt"] for d in reversed(first_event)] == list(range(1, len(first_event) + 1))
    assert first_event[-1]["status_code"] is None and first_event[0]["status_code"] == 200


def test_past_the_retry_window_the_webhook_is_paused_with_its_reason_and_redeliver_resumes_it(
        api, container, clock, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url)
    receiver.status = 500
    first, second = revoke_event(container, 1), revoke_event(container, 2)
    for _ in range(30):
        deliver_all(container)
        clock.advance(seconds=60)
        state = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
        if state["state"] == "paused":
            break
    assert state["state"] == "paused", state
    assert f"event {first}" in state["paused_reason"] and "answered 500" in state["paused_reason"]
    # The tenant's admins see it in the list; the audit log says so too.
    listed = call(client, tokens["admin"], "GET", "/v1/webhooks", params={"tenant": T}).json()
    assert [(w["id"], w["state"]) for w in listed] == [(hook["id"], "paused")]
    with container.session_factory() as session:
        paused = session.scalars(select(AuditEvent).where(AuditEvent.action == "webhook.paused")).all()
        assert [p.subject for p in paused] == [f"webhook/{hook['id']}"]
    # Retried with backoff until the window closed: attempts spaced apart, never the second event.
    assert set(receiver.ids()) == {str(first)}
    tried = len(receiver.requests)
    assert 3 <= tried <= 12
    deliver_all(container)
    clock.advance(seconds=3600)
    deliver_all(container)
    assert len(receiver.requests) == tried  # paused: nothing is sent
    receiver.status = 200
    r = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/redeliver", json={})
    assert r.status_code == 200 and r.json()["state"] == "active" and r.json()["paused_reason"] is None
    deliver_all(container)
    assert receiver.ids(accepted=True) == [str(first), str(second)]
    # Redeliver from an event: it and every one after it again, with their ids.
    r = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/redeliver",
             json={"from_event": str(first)})
    assert r.status_code == 200
    deliver_all(container)
    assert receiver.ids(accepted=True) == [str(first), str(second)] * 2
    bad = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/redeliver",
               json={"from_event": "x1"})
    assert bad.status_code == 422 and bad.json()["type"].endswith("/invalid-input")


def test_a_rotated_secret_signs_beside_the_old_one_until_it_is_dropped(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url)
    old = hook["secret"]
    r = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/rotate-secret", json={})
    new = r.json()["secret"]
    assert r.status_code == 200 and new != old and r.json()["previous_secret_valid_until"]
    revoke_event(container, 1)
    deliver_all(container)
    during = receiver.requests[-1]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    verified(old, during), verified(new, during)
    r = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/rotate-secret",
             json={"keep_previous_seconds": 0})
    newest = r.json()["secret"]
    revoke_event(container, 2)
    deliver_all(container)
    after = receiver.requests[-1]
    verified(newest, after)
    for gone in (old, new):
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            standardwebhooks.Webhook(gone).verify(after.body, after.headers)
    with container.session_factory() as session:
        actions = session.scalars(select(AuditEvent.action).where(AuditEvent.action.like("webhook.%"))).all()
    assert actions == ["webhook.created", "webhook.secret_rotated", "webhook.secret_rotated"]


def test_model_globs_and_types_choose_the_events_and_derived_events_keep_their_own_ids(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url, types=["version.scanned", "version.awaiting_approval"],
                     model_glob="llama-*")
    with container.session_factory() as session:
        scanned = audit.append(session, actor="system", action="version.scanned", subject=f"{T}/llama-7b@1",
                               tenant=T, details={"state": "awaiting_approval"})
        audit.append(session, actor="system", action="version.scanned", subject=f"{T}/mistral@1", tenant=T,
                     details={"state": "awaiting_approval"})
        session.commit()
    deliver_all(container)
    assert receiver.ids() == [str(scanned.id), f"{scanned.id}.version.awaiting_approval"]
    assert [verified(hook["secret"], r)["type"] for r in receiver.requests] == [
        "dev.modelreg.version.scanned", "dev.modelreg.version.awaiting_approval"]
    # A row the glob passes over, then one meaning two events, delivered one at a time (a failure between).
    with container.session_factory() as session:
        audit.append(session, actor="system", action="version.scanned", subject=f"{T}/mistral@2", tenant=T,
                     details={"state": "awaiting_approval"})
        again = audit.append(session, actor="system", action="version.scanned", subject=f"{T}/llama-7b@2",
                             tenant=T, details={"state": "awaiting_approval"})
        session.commit()
    receiver.requests.clear()
    receiver.status = 204
    with container.session_factory() as session:
        sub = session.get(WebhookSubscription, hook["id"])
        batch, _ = webhooks._next_events(session, sub, 1)
        assert [p.event.id for p in batch] == [str(again.id)]
        sub.cursor, sub.cursor_part = batch[0].cursor, batch[0].part
        session.commit()
    deliver_all(container)
    assert receiver.ids() == [f"{again.id}.version.awaiting_approval"]


def still_running_burst(container, count: int) -> list[int]:
    """What one revocation of a version held in ``count`` places appends: a ``version.still_running`` each."""
    with container.session_factory() as session:
        begin_write(session)
        rows = [audit.append(session, actor="sec", action="version.still_running", subject=f"{T}/llm@1", tenant=T,
                             details={"program": "cache-warm", "principal": f"node-{n}", "node": f"node-{n:05d}",
                                      "place": {"where": "path", "path": "/var/cache/modelreg"}})
                for n in range(count)]
        session.commit()
        return [row.id for row in rows]


def test_a_burst_arrives_in_order_each_signed_once_with_one_delivery_record_each(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url, types=["version.still_running"])
    count = 2 * webhooks.EVENTS_PER_BATCH + 7  # three batches, the last one short
    ids = [str(i) for i in still_running_burst(container, count)]
    deliver_all(container)

    assert receiver.ids() == ids  # in order, each once
    bodies = [verified(hook["secret"], r) for r in receiver.requests]
    assert [b["data"]["node"] for b in bodies] == [f"node-{n:05d}" for n in range(count)]
    assert {b["type"] for b in bodies} == {"dev.modelreg.version.still_running"}
    # One kept-alive connection carried them all.
    assert receiver.connections == 1
    records = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}/deliveries",
                   params={"limit": 500}).json()
    assert [d["event_id"] for d in reversed(records)] == ids
    assert {(d["attempt"], d["state"], d["status_code"]) for d in records} == {(1, "delivered", 204)}
    assert call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()["cursor"] == int(ids[-1])
    deliver_all(container)
    assert len(receiver.requests) == count


def test_a_failure_inside_a_batch_stops_it_there_and_the_rest_follow_the_retry_in_order(
        api, container, clock, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url, types=["version.still_running"])
    ids = [str(i) for i in still_running_burst(container, 30)]
    receiver.answers = {10: 503}
    deliver_all(container)
    assert receiver.ids() == ids[:10] and receiver.ids(accepted=True) == ids[:9]
    sub = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
    assert sub["cursor"] == int(ids[8]) and sub["failed_attempts"] == 1 and sub["last_error"] == "answered 503"
    deliver_all(container)
    assert receiver.ids() == ids[:10]  # its retry waits for its time
    clock.advance(seconds=10)
    deliver_all(container)
    assert receiver.ids(accepted=True) == ids
    records = list(reversed(call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}/deliveries",
                                 params={"limit": 500}).json()))
    assert [(d["event_id"], d["attempt"], d["status_code"]) for d in records] == (
        [(i, 1, 204) for i in ids[:9]] + [(ids[9], 1, 503), (ids[9], 2, 204)] + [(i, 1, 204) for i in ids[10:]])


def test_a_receiver_closing_kept_connections_unannounced_gets_every_event_once(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url, types=["version.still_running"])
    receiver.drop_kept = True
    ids = [str(i) for i in still_running_burst(container, 12)]
    deliver_all(container)
    # Each request after the first finds its kept connection closed and is sent again on a new one.
    assert receiver.ids() == ids
    assert receiver.connections == len(ids)
    for r in receiver.requests:
        verified(hook["secret"], r)
    records = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}/deliveries").json()
    assert {(d["attempt"], d["state"]) for d in records} == {(1, "delivered")} and len(records) == len(ids)


def test_one_slow_receiver_never_delays_another_subscription(api, container):
    client, tokens = api
    with Receiver() as slow, Receiver() as quick:
        # The slow receiver answers its first delivery only when the test lets it (within the delivery's
        # time bound), so "the quick one got all three meanwhile" does not depend on the machine's speed.
        slow.hold = threading.Event()
        slow_hook = subscribe(client, tokens["admin"], slow.url)
        subscribe(client, tokens["admin"], quick.url)
        ids = [str(revoke_event(container, n)) for n in range(1, 4)]
        stop = threading.Event()
        threads = start_webhooks(container, stop, threads=2, poll_interval=0.02)
        try:
            # Until the quick receiver has all three and the slow one holds the first (which of the two
            # subscriptions a thread takes first is the scheduler's: the slow one's first request may come last).
            deadline = time.monotonic() + slow.HOLD_SECONDS - 1
            while (quick.ids(accepted=True), slow.ids()) != (ids, ids[:1]) and time.monotonic() < deadline:
                time.sleep(0.02)
            # The quick receiver has all three while the slow one is still answering the first.
            assert quick.ids(accepted=True) == ids
            assert slow.ids() == ids[:1]
            slow.hold.set()
            deadline = time.monotonic() + 15
            while slow.ids(accepted=True) != ids and time.monotonic() < deadline:
                time.sleep(0.05)
            assert slow.ids(accepted=True) == ids
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=5)
        for r in slow.requests:
            verified(slow_hook["secret"], r)


def test_a_redirect_is_not_followed_and_an_endless_answer_is_cut(api, container, receiver):
    client, tokens = api
    with Receiver() as elsewhere:
        receiver.status, receiver.location = 302, elsewhere.url
        hook = subscribe(client, tokens["admin"], receiver.url)
        revoke_event(container, 1)
        deliver_all(container)
        assert len(receiver.requests) == 1 and elsewhere.requests == []
        sub = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
        assert sub["last_error"] == "answered 302" and sub["cursor"] == hook["cursor"]


@pytest.mark.parametrize("url", [
    "http://127.0.0.2/hook", "http://10.0.0.7/hook", "http://192.168.1.1/", "http://172.16.0.1/",
    "http://169.254.169.254/latest/meta-data/", "http://[::1]/hook", "http://[::ffff:127.0.0.1]/hook",
    "http://[fe80::1]/", "http://0.0.0.0/", "http://[::ffff:169.254.169.254]/", "http://100.64.0.1/",
    "http://[2002:7f00:1::]/", "http://224.0.0.1/",
    "ftp://example.com/", "file:///etc/passwd", "http://user:pw@example.com/", "http:///nohost",
])
def test_the_egress_guard_refuses_internal_targets(url):
    with pytest.raises(EgressRefusedError):
        EgressPolicy().check(url)


def test_the_allow_list_names_hosts_and_networks_and_a_name_is_resolved_once():
    assert EgressPolicy().check("https://93.184.215.14:8443/x?y=1").path == "/x?y=1"
    loopback = EgressPolicy.from_entries(["127.0.0.1/32"])
    assert loopback.check("http://[::ffff:127.0.0.1]/").host == "::ffff:127.0.0.1"  # the same address
    with pytest.raises(EgressRefusedError, match="loopback"):
        loopback.check("http://127.0.0.2/")
    with pytest.raises(EgressRefusedError, match="not a public address"):
        EgressPolicy().check("http://localhost/")  # a name is judged by what it resolves to
    answers = {"hooks.internal": ["10.1.2.3"]}
    resolver = lambda host, port: answers[host]  # noqa: E731 (DNS, as the operator's resolver answers)
    with pytest.raises(EgressRefusedError, match="not a public address") as refused:
        EgressPolicy.from_entries([], resolver).check("http://hooks.internal/")
    # The refusal names neither the internal address a name resolves to nor its kind.
    assert "10.1.2.3" not in str(refused.value) and "private" not in str(refused.value)
    assert "address" not in refused.value.details and refused.value.details["reason"] == "not-public"
    assert EgressPolicy.from_entries(["10.1.0.0/16"], resolver).check("http://hooks.internal/").addresses == (
        "10.1.2.3",)
    assert EgressPolicy.from_entries(["Hooks.Internal"], resolver).check("http://hooks.internal/").host == (
        "hooks.internal")


def test_the_guard_is_checked_again_at_delivery_time(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url)
    container.settings.egress_allow = []  # the operator withdrew the leave
    revoke_event(container, 1)
    deliver_all(container)
    assert receiver.requests == []
    sub = call(client, tokens["admin"], "GET", f"/v1/webhooks/{hook['id']}").json()
    assert "egress guard" in sub["last_error"] and "loopback" in sub["last_error"]


def test_who_may_manage_webhooks(api, container, receiver):
    client, tokens = api
    r = call(client, tokens["submitter"], "POST", "/v1/webhooks", json={"tenant": T, "url": receiver.url,
                                                                        "types": ["*"]})
    assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied")
    hook = subscribe(client, tokens["admin"], receiver.url, types=["*"])
    for token in ("submitter", "other"):
        r = call(client, tokens[token], "GET", f"/v1/webhooks/{hook['id']}")
        assert r.status_code == 404 and r.json()["type"].endswith("/webhook-not-found")
        assert call(client, tokens[token], "DELETE", f"/v1/webhooks/{hook['id']}").status_code == 404
        assert call(client, tokens[token], "GET", "/v1/webhooks").json() == []
    bad = call(client, tokens["admin"], "POST", "/v1/webhooks",
               json={"tenant": T, "url": receiver.url, "types": ["version.exploded"]})
    assert bad.status_code == 422 and "version.exploded" in bad.json()["detail"]
    assert call(client, tokens["admin"], "GET", "/v1/webhooks/99999999999").status_code == 404
    metadata = call(client, tokens["admin"], "POST", "/v1/webhooks",
                    json={"tenant": T, "url": "http://169.254.169.254/latest/meta-data/", "types": ["*"]})
    assert metadata.status_code == 422 and metadata.json()["type"].endswith("/egress-refused")
    # The ping is queued for the delivery workers, which send it through the guard and record its answer.
    ping = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/test")
    assert ping.status_code == 202 and ping.json()["state"] == "pending"
    deliver_all(container)
    assert delivery(client, tokens["admin"], hook["id"], ping.json()["id"])["status_code"] == 204
    body = verified(hook["secret"], receiver.requests[-1])
    assert body["type"] == hooks.TEST_TYPE
    assert call(client, tokens["admin"], "DELETE", f"/v1/webhooks/{hook['id']}").status_code == 204
    with container.session_factory() as session:
        assert session.scalars(select(WebhookSubscription)).all() == []
        actions = session.scalars(select(AuditEvent.action).where(AuditEvent.action.like("webhook.%"))).all()
    assert actions == ["webhook.created", "webhook.removed"]


def test_a_ping_holds_no_api_thread_goes_through_the_workers_and_is_capped_per_tenant(api, container, receiver):
    client, tokens = api
    hook = subscribe(client, tokens["admin"], receiver.url)
    beta = role_token(container, "badmin", "beta", "admin")
    other = call(client, beta, "POST", "/v1/webhooks", json={"tenant": "beta", "url": receiver.url,
                                                              "types": ["version.revoked"]}).json()
    # The API answers at once with the pending delivery: nothing was sent from the request.
    pings = [call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/test")
             for _ in range(webhooks.MAX_PINGS_IN_FLIGHT)]
    assert [p.status_code for p in pings] == [202] * webhooks.MAX_PINGS_IN_FLIGHT
    assert {p.json()["state"] for p in pings} == {"pending"} and receiver.requests == []
    # One more in flight is refused for this tenant; another tenant's ping is not held back by it.
    refused = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/test")
    assert refused.status_code == 409 and refused.json()["type"].endswith("/webhook-pings-in-flight")
    theirs = call(client, beta, "POST", f"/v1/webhooks/{other['id']}/test")
    assert theirs.status_code == 202
    # A paused webhook is pinged too (testing the receiver is how its admin finds out what is wrong).
    with container.session_factory() as session:
        session.get(WebhookSubscription, hook["id"]).status = hooks.PAUSED
        session.commit()
    deliver_all(container)
    sent = [verified(hook["secret"], r) for r in receiver.requests if r.headers["webhook-id"].startswith("test-")
            and r.headers["webhook-id"] != theirs.json()["event_id"]]
    assert sorted(b["id"] for b in sent) == sorted(p.json()["event_id"] for p in pings)
    for p in pings:
        done = delivery(client, tokens["admin"], hook["id"], p.json()["id"])
        assert (done["state"], done["status_code"], done["event_id"]) == ("delivered", 204, p.json()["event_id"])
    assert delivery(client, beta, other["id"], theirs.json()["id"])["state"] == "delivered"
    # Sent, they are no longer in flight: the tenant may ping again; a receiver's refusal is a failed delivery.
    receiver.status = 503
    again = call(client, tokens["admin"], "POST", f"/v1/webhooks/{hook['id']}/test")
    assert again.status_code == 202
    deliver_all(container)
    failed = delivery(client, tokens["admin"], hook["id"], again.json()["id"])
    assert (failed["state"], failed["status_code"], failed["error"]) == ("failed", 503, "answered 503")
