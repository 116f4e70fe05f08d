"""Release manifests through the HTTP API, on SQLite and PostgreSQL: what a serving node receives.

Versions go through the real pipeline to ``awaiting_approval``; ``approve_standin`` makes them approved.
Every manifest is checked the way the fetch client checks it: ``verify_release`` against the root served
by ``GET /v1/trust-root``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import threading
import time

import httpx
import pytest
from sqlalchemy import select

from api.app import create_app
from registry.db.models import ReleaseIssuance, Version
from registry.services import manifests, revocations
from registry.signing.canonical import canonical_json
from registry.signing.release import verify_release
from registry.signing.trust_root import parse_root
from tests.support.live_app import serve_in_thread
from tests.support.release_world import BASE, M, T, _as, build_release_world, promote, revoke

pytestmark = pytest.mark.seeded(builder=build_release_world)


def fetch(client, tokens, ref="prod", who="node", **params):
    return client.get(BASE, headers=_as(tokens, who), params={"ref": ref, **params})


def verified(client, body, ref="prod", model=f"{T}/{M}"):
    root = parse_root(client.get("/v1/trust-root").json())
    return verify_release(body["envelope"], root, now=dt.datetime.now(dt.timezone.utc), model=model, ref=ref)


def test_manifest_verifies_with_the_trust_root_and_says_what_the_version_is(release_world, container):
    client, tokens, _ = release_world
    r = fetch(client, tokens)
    assert r.status_code == 200, r.text
    body = r.json()
    release = verified(client, body)
    assert (release.version, release.serial, release.tenant) == (1, 1, T)
    assert release.expires_at - release.issued_at == dt.timedelta(seconds=300)
    assert body["trust_root_version"] == 1
    with container.session_factory() as session:
        version = session.scalar(select(Version).where(Version.number == 1))
        files = {f.path: (f.size, f.sha256) for f in version.files}
        bundle = version.manifest_bundle
        record = manifests.approval_record(session, version)
        source = {"kind": version.source_kind, "repo": version.source_repo, "revision": version.resolved_revision}
    assert {f.path: (f.size, f.sha256) for f in release.files} == files
    assert release.payload["source"] == source
    assert release.payload["statement_digest"] == hashlib.sha256(
        base64.b64decode(bundle["dsseEnvelope"]["payload"])).hexdigest()
    assert release.payload["approval_digest"] == hashlib.sha256(canonical_json(record)).hexdigest()
    assert body["signature_bundle"] == bundle
    # The transport URLs serve exactly the signed bytes.
    assert set(body["transport"]) == set(files)
    for path, url in body["transport"].items():
        data = client.get(url).content
        assert hashlib.sha256(data).hexdigest() == files[path][1], path
    # A version number ref: its own long-lived release, serial 1.
    r = fetch(client, tokens, ref="2")
    release = verified(client, r.json(), ref="2")
    assert (release.version, release.serial) == (2, 1)
    assert release.expires_at - release.issued_at == dt.timedelta(seconds=86400)


def test_serial_grows_when_prod_moves_and_not_otherwise(release_world, container):
    client, tokens, admin = release_world
    serials = [verified(client, fetch(client, tokens).json()).serial for _ in range(3)]
    assert serials == [1, 1, 1]
    promote(container, admin, 2)
    assert [verified(client, fetch(client, tokens).json()).serial for _ in range(2)] == [2, 2]
    # A canary change moves the serial for every tenant, even one that still gets version 2.
    promote(container, admin, 2, canary=1, tenants=["beta"])
    release = verified(client, fetch(client, tokens).json())
    assert (release.version, release.serial) == (2, 3)
    # Back to version 1: a new serial, never an old one.
    promote(container, admin, 1)
    release = verified(client, fetch(client, tokens).json())
    assert (release.version, release.serial) == (1, 4)
    # The version ref's serial is its own and stays 1.
    assert verified(client, fetch(client, tokens, ref="1").json(), ref="1").serial == 1


def test_canary_tenant_gets_the_canary_version(release_world, container):
    client, tokens, admin = release_world
    promote(container, admin, 1, canary=2, tenants=["beta"])
    beta = verified(client, fetch(client, tokens, for_tenant="beta").json())
    main = verified(client, fetch(client, tokens, for_tenant="gamma").json())
    own = verified(client, fetch(client, tokens).json())
    assert (beta.version, beta.tenant) == (2, "beta")
    assert (main.version, main.tenant) == (1, "gamma")
    assert (own.version, own.tenant) == (1, T)
    assert beta.serial == main.serial == own.serial


def test_etag_and_304_and_issuances_recorded(release_world, container):
    client, tokens, admin = release_world
    first = fetch(client, tokens)
    etag = first.headers["ETag"]
    again = fetch(client, tokens)
    assert again.headers["ETag"] == etag
    r = client.get(BASE, headers={**_as(tokens), "If-None-Match": etag}, params={"ref": "prod"})
    assert (r.status_code, r.content, r.headers["ETag"]) == (304, b"", etag)
    r = client.get(BASE, headers={**_as(tokens), "If-None-Match": f'W/"x", W/{etag}'}, params={"ref": "prod"})
    assert r.status_code == 304
    # Another tenant's canary routing is another ETag.
    assert fetch(client, tokens, for_tenant="beta").headers["ETag"] != etag
    promote(container, admin, 2)
    moved = client.get(BASE, headers={**_as(tokens), "If-None-Match": etag}, params={"ref": "prod"})
    assert moved.status_code == 200 and moved.headers["ETag"] != etag
    with container.session_factory() as session:
        rows = session.scalars(select(ReleaseIssuance).order_by(ReleaseIssuance.id)).all()
        got = [(r.principal, r.model, r.ref, r.for_tenant, r.version, r.serial) for r in rows]
    # Each 200 is recorded; the two 304s are not.
    assert got == [("nod", f"{T}/{M}", "prod", T, 1, 1)] * 2 + [("nod", f"{T}/{M}", "prod", "beta", 1, 1),
                                                                   ("nod", f"{T}/{M}", "prod", T, 2, 2)]


def test_refusals_have_their_problem_types(release_world, container):
    client, tokens, admin = release_world
    cases = {"3": (409, "not-approved"), "9": (404, "version-not-found"), "staging": (404, "alias-not-found")}
    for ref, (status, kind) in cases.items():
        r = fetch(client, tokens, ref=ref)
        assert (r.status_code, r.json()["type"].rsplit("/", 1)[1]) == (status, kind), (ref, r.text)
    r = fetch(client, tokens, ref="Prod")
    assert r.status_code == 422
    r = client.get(f"/v1/models/{T}/nothing/manifest", headers=_as(tokens), params={"ref": "prod"})
    assert r.json()["type"].endswith("/model-not-found")
    with container.session_factory() as session:
        revocations.revoke(session, admin, T, M, 1, "leaked weights", clock=container.clock)
    for ref in ("prod", "1"):
        r = fetch(client, tokens, ref=ref)
        assert (r.status_code, r.json()["type"].rsplit("/", 1)[1]) == (409, "revoked"), r.text
        assert r.json()["version"] == 1 and "leaked weights" in r.json()["detail"]
    with container.session_factory() as session:
        assert session.scalars(select(ReleaseIssuance)).all() == []


def test_who_may_fetch(release_world):
    client, tokens, _ = release_world
    assert fetch(client, tokens, who="node").status_code == 200
    assert fetch(client, tokens, who="reader").status_code == 200
    r = fetch(client, tokens, who="other-node")
    assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied")
    assert client.get(BASE, params={"ref": "prod"}).status_code == 401


def test_long_poll_returns_when_the_alias_moves_and_304_after_its_wait(release_world, container):
    _, tokens, admin = release_world
    with serve_in_thread(create_app(container)) as url, httpx.Client(base_url=url, timeout=30) as http:
        first = http.get(BASE, headers=_as(tokens), params={"ref": "prod"})
        etag = first.headers["ETag"]
        started = time.monotonic()
        r = http.get(BASE, headers={**_as(tokens), "If-None-Match": etag}, params={"ref": "prod", "wait": 1})
        assert r.status_code == 304 and time.monotonic() - started >= 1.0
        mover = threading.Timer(0.5, promote, (container, admin, 2))
        mover.start()
        started = time.monotonic()
        r = http.get(BASE, headers={**_as(tokens), "If-None-Match": etag}, params={"ref": "prod", "wait": 20})
        waited = time.monotonic() - started
        mover.join()
        assert r.status_code == 200, r.text
        # woken by the move (0.5 s in), not the 20 s wait running out; the upper bound leaves a loaded machine room
        assert 0.4 < waited < 15, waited
        assert r.headers["ETag"] != etag
        assert r.json()["envelope"]["signatures"][0]["keyid"]
        # A revocation wakes a waiting node too: it learns at once that prod's version is revoked.
        etag = r.headers["ETag"]
        revoker = threading.Timer(0.3, revoke, (container, admin, 2))
        revoker.start()
        r = http.get(BASE, headers={**_as(tokens), "If-None-Match": etag}, params={"ref": "prod", "wait": 20})
        revoker.join()
        assert r.status_code == 409 and r.json()["type"].endswith("/revoked")

