"""The serving rule of an adapter (issue 34, part 2; ADR 0018) through the real manifest endpoint, on SQLite and
PostgreSQL: the signed release of ``acme/llm-support@prod`` names the base it is served with (``adapter_of``),
follows the base's ``prod`` while it keeps the bound weights (a long poll wakes on the base's move), is refused
409 ``adapter-base-moved`` once ``acme/llm@prod`` points at other weights (the ``adapter.unservable`` event says
so) until the adapter bound to the new base is promoted, and 409 ``adapter-base-revoked`` once its base is revoked
(``version.revoked`` lists the adapter); a base canary on other weights refuses it to the canary's tenants only."""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading

import httpx
import pytest

from api.app import create_app
from registry.domain.aliases import make_target
from registry.domain.events import TYPE_PREFIX
from registry.services import aliases, revocations
from registry.signing.release import verify_release
from registry.signing.trust_root import parse_root
from tests.support.adapter_release import SERVED_NAME, build_adapter_in_prod, promote
from tests.support.adapter_submissions import ADAPTER, PROBLEMS, base_row
from tests.support.live_app import serve_in_thread
from tests.support.registry import person
from tests.support.release_unit import NAME, TENANT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.seeded(builder=build_adapter_in_prod)

WAIT = 90
"""A long poll's wait: one never woken answers 304 after it, which the tests tell from a woken one."""


@pytest.fixture
def live(container, seeded):
    """The world behind a real uvicorn with its event watcher: ``(url, watcher, headers)``."""
    container.settings.event_poll_seconds = 0.05
    app = create_app(container)
    with serve_in_thread(app) as url:
        yield url, app.state.event_watcher, {"Authorization": f"Bearer {seeded['node']}"}


def _manifest(url: str, headers: dict, name: str, ref: str, params: dict | None = None) -> httpx.Response:
    return httpx.get(f"{url}/v1/models/{TENANT}/{name}/manifest", params=params or {"ref": ref}, headers=headers,
                     timeout=60)


def _payload(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return json.loads(base64.b64decode(response.json()["envelope"]["payload"]))


def _long_poll(url: str, headers: dict, name: str, ref: str, etag: str, watcher) -> tuple[threading.Thread, dict]:
    """A long poll on a release, registered with the server's watcher before this returns."""
    answer: dict = {}
    waiting = watcher.waiting

    def run() -> None:
        answer["response"] = httpx.get(f"{url}/v1/models/{TENANT}/{name}/manifest",
                                       params={"ref": ref, "wait": WAIT}, headers={**headers, "If-None-Match": etag},
                                       timeout=WAIT + 60)

    thread = threading.Thread(target=run)
    thread.start()
    wait_until(lambda: watcher.waiting > waiting or "response" in answer, "the long poll registered")
    return thread, answer


def _events(url: str, headers: dict, kind: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/events", params={"after": 0, "type": kind, "limit": 1000}, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["events"]


def test_the_release_names_its_base_and_follows_the_bases_alias_while_it_keeps_the_weights(container, live,
                                                                                            people):
    url, watcher, headers = live
    weights, _ = base_row(container, 1)
    base_release = _payload(_manifest(url, headers, NAME, "1"))
    response = _manifest(url, headers, ADAPTER, "prod")
    root = parse_root(httpx.get(f"{url}/v1/trust-root", timeout=30).json())
    signed = _payload(response)
    release = verify_release(response.json()["envelope"], root, now=dt.datetime.now(dt.timezone.utc),
                             model=f"{TENANT}/{ADAPTER}", ref="prod")
    assert release.version == 1 and release.adapter_of is not None
    assert release.adapter_of.as_dict() == {
        "model": f"{TENANT}/{NAME}", "ref": "prod", "version": 1, "bound_version": 1, "weights_digest": weights,
        "statement_digest": base_release["statement_digest"], "served_name": SERVED_NAME}
    # By number: the bound base, whatever its aliases say.
    assert _payload(_manifest(url, headers, ADAPTER, "1"))["adapter_of"]["ref"] == "1"

    # The base's prod moves to version 3, the same weights: the adapter's long poll wakes with a new release.
    thread, answer = _long_poll(url, headers, ADAPTER, "prod", response.headers["ETag"], watcher)
    promote(container, people, NAME, "prod", 3)
    thread.join()
    moved = _payload(answer["response"])
    assert moved["serial"] == signed["serial"] + 1
    assert (moved["adapter_of"]["version"], moved["adapter_of"]["bound_version"], moved["adapter_of"]["ref"]) == (
        3, 1, "prod")
    assert moved["adapter_of"]["statement_digest"] == _payload(_manifest(url, headers, NAME, "3"))["statement_digest"]
    assert _events(url, headers, "adapter.unservable") == []


def test_a_base_alias_moved_to_other_weights_refuses_the_adapter_until_a_rebound_one_is_promoted(
        container, live, people):
    url, watcher, headers = live
    (one, _), (two, _) = base_row(container, 1), base_row(container, 2)
    etag = _manifest(url, headers, ADAPTER, "prod").headers["ETag"]
    thread, answer = _long_poll(url, headers, ADAPTER, "prod", etag, watcher)
    promote(container, people, NAME, "prod", 2)
    thread.join()
    refused = answer["response"]
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"] == PROBLEMS + "adapter-base-moved"
    assert (problem["adapter"], problem["bound_base"], problem["bound_weights"], problem["base_alias"],
            problem["base_version"], problem["base_weights"]) == (
        f"{TENANT}/{ADAPTER}@prod", f"{TENANT}/{NAME}@1", one, f"{TENANT}/{NAME}@prod", 2, two)
    [event] = _events(url, headers, "adapter.unservable")
    assert (event["type"], event["subject"]) == (TYPE_PREFIX + "adapter.unservable", f"{TENANT}/{ADAPTER}@prod")
    assert {k: event["data"][k] for k in ("reason", "alias", "adapter_version", "base", "base_version",
                                          "weights_digest", "base_weights_digest", "canary")} == {
        "reason": "base-moved", "alias": "prod", "adapter_version": 1, "base": f"{TENANT}/{NAME}@prod",
        "base_version": 2, "weights_digest": one, "base_weights_digest": two, "canary": False}
    # The adapter by number is still served with the base it is bound to.
    assert _payload(_manifest(url, headers, ADAPTER, "1"))["adapter_of"]["version"] == 1

    promote(container, people, ADAPTER, "prod", 2)
    served = _payload(_manifest(url, headers, ADAPTER, "prod"))
    assert (served["version"], served["adapter_of"]["version"], served["adapter_of"]["weights_digest"]) == (2, 2, two)


def test_revoking_the_base_makes_its_adapters_unservable_and_the_events_say_so(container, live, people):
    url, _, headers = live
    with container.session_factory() as session:
        revocations.revoke(session, people["admin"], TENANT, NAME, 1, "bad weights", clock=container.clock)
    for ref in ("prod", "1"):
        refused = _manifest(url, headers, ADAPTER, ref)
        assert refused.status_code == 409, refused.text
        assert refused.json()["type"] == PROBLEMS + "adapter-base-revoked"
        assert (refused.json()["base"], refused.json()["base_version"]) == (f"{TENANT}/{NAME}", 1)
        assert "its base acme/llm@1 was revoked: bad weights" in refused.json()["detail"]
    # The adapter bound to another base is not touched.
    assert _payload(_manifest(url, headers, ADAPTER, "2"))["adapter_of"]["version"] == 2
    [revoked] = [e for e in _events(url, headers, "version.revoked") if e["subject"] == f"{TENANT}/{NAME}@1"]
    assert (revoked["data"]["adapters"], revoked["data"]["adapters_total"]) == ([f"{TENANT}/{ADAPTER}@1"], 1)
    [unservable] = _events(url, headers, "adapter.unservable")
    assert unservable["subject"] == f"{TENANT}/{ADAPTER}@1"
    assert (unservable["data"]["reason"], unservable["data"]["base"]) == ("base-revoked", f"{TENANT}/{NAME}@1")


def test_a_base_canary_on_other_weights_refuses_the_adapter_to_the_canary_s_tenants_only(container, live, people):
    url, _, headers = live
    person(container, "beta-reader", "beta", ("reader", ""))  # the tenant the canary serves
    with container.session_factory() as session:
        aliases.promote(session, people["mia"], TENANT, NAME, "prod", make_target(1, 2, ["beta"]),
                        policy=container.policy, clock=container.clock)
    (one, _), (two, _) = base_row(container, 1), base_row(container, 2)
    assert _payload(_manifest(url, headers, ADAPTER, "prod"))["adapter_of"]["version"] == 1
    refused = _manifest(url, headers, ADAPTER, "prod", params={"ref": "prod", "for_tenant": "beta"})
    assert refused.status_code == 409 and refused.json()["type"] == PROBLEMS + "adapter-base-moved", refused.text
    assert (refused.json()["base_version"], refused.json()["base_weights"]) == (2, two)
    [event] = _events(url, headers, "adapter.unservable")
    assert (event["data"]["canary"], event["data"]["base_version"], event["data"]["weights_digest"]) == (True, 2, one)
