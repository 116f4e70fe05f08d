"""Usage per tenant, allocated by model and version, over a period: stored, mirrored, served, evals."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.bootstrap import ensure_trust_root
from registry.db.models import Blob, EvalResult, Model, Tenant, Version
from registry.domain.aliases import make_target
from registry.services import aliases
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"
NOW = dt.datetime.now(dt.timezone.utc)


def build_world(container, root):
    admin = make_admin(container, T)
    for seed in (1, 2):
        awaiting_version(container, admin, root / f"v{seed}", T, M, seed=seed)
        approve_standin(container, T, M, seed)
    other = make_admin(container, "other")
    awaiting_version(container, other, root / "o", "other", "theirs", seed=3)
    with container.session_factory() as session:
        aliases.promote(session, admin, T, M, "prod", make_target(1, None, ()), policy=container.policy,
                        clock=container.clock)
        ids = {n: session.scalars(select(Version.id).where(Version.number == n,
                                                           Version.source_repo.contains(f"/v{n}"))).one()
               for n in (1, 2)}
        # Three evals finished minutes ago, one forty days ago (outside the period asked).
        for number, suite, minutes_ago, ms in ((1, "safety", 5, 1200), (2, "safety", 6, 800),
                                               (1, "quality", 7, 5000), (2, "quality", 60 * 24 * 40, 9999)):
            at = NOW - dt.timedelta(minutes=minutes_ago)
            session.add(EvalResult(version_id=ids[number], suite=suite, suite_version="x" * 64, runner="sanity",
                                   runner_version="1", definition={}, status="completed", duration_ms=ms,
                                   created_at=at, finished_at=at))
        session.commit()
    ensure_trust_root(container)
    tokens = {"node": role_token(container, "node1", T, "node"), "node2": role_token(container, "node2", T, "node"),
              "auditor": role_token(container, "aud", T, "auditor"),
              "submitter": role_token(container, "sub", T, "submitter")}
    return tokens


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(container, seeded):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, seeded


def _as(tokens, who):
    return {"Authorization": f"Bearer {tokens[who]}"}


def files_of(container, tenant, number):
    with container.session_factory() as session:
        version = session.scalars(
            select(Version).join(Version.model).where(Version.number == number)
            .where(Version.source_repo.contains("/o" if tenant == "other" else f"/v{number}"))).one()
        return [(f.sha256, f.size) for f in version.files]


def test_usage_allocates_storage_mirroring_serving_and_evals(world, container):
    client, tokens = world
    for who, ref in (("node", "prod"), ("node", "prod"), ("node2", "2")):
        r = client.get(f"/v1/models/{T}/{M}/manifest", params={"ref": ref}, headers=_as(tokens, who))
        assert r.status_code == 200, r.text
    period = {"tenant": T, "since": (NOW - dt.timedelta(days=1)).isoformat(),
              "until": (NOW + dt.timedelta(days=1)).isoformat()}
    r = client.get("/v1/usage", params=period, headers=_as(tokens, "auditor"))
    assert r.status_code == 200, r.text
    usage = r.json()

    one, two = files_of(container, T, 1), files_of(container, T, 2)
    size1, size2 = sum(s for _, s in one), sum(s for _, s in two)
    distinct = dict(one) | dict(two)
    (model,) = usage["stored"]["models"]
    assert model["model"] == M and model["bytes"] == sum(distinct.values()), (model, one, two)
    assert [(v["version"], v["bytes"]) for v in model["versions"]] == [(1, size1), (2, size2)]
    # The tenant's total is what its quota counts: its versions' blobs and its eval logs, each once.
    with container.session_factory() as session:
        logs = {b.digest: b.size for b in session.scalars(
            select(Blob).join(EvalResult, EvalResult.log_digest == Blob.digest).join(Version).join(Model)
            .join(Tenant).where(Tenant.name == T))}
    assert usage["stored"]["bytes"] == sum((distinct | logs).values())
    quota = client.get(f"/v1/tenants/{T}/quota", headers=_as(tokens, "auditor")).json()
    assert quota["used"] == usage["stored"]["bytes"]
    # Version 2's files that version 1 has already were not mirrored again.
    assert usage["mirrored"]["bytes"] == sum(distinct.values())
    assert usage["mirrored"]["files"] == len(distinct)
    served = usage["served"]
    assert (served["manifests"], served["principals"], served["bytes"]) == (3, 2, 2 * size1 + size2)
    assert [(v["version"], v["manifests"]) for v in served["by_model"][0]["versions"]] == [(1, 2), (2, 1)]
    by_suite = {e["suite"]: e for e in usage["evals"]}
    assert by_suite["quality"] == {"suite": "quality", "runs": 1, "duration_ms": 5000}
    assert by_suite["safety"] == {"suite": "safety", "runs": 2, "duration_ms": 2000}
    # The pipeline's own sanity eval ran on both versions (and not on the other tenant's for this one).
    assert by_suite["sanity"]["runs"] == 2 and set(by_suite) == {"quality", "safety", "sanity"}

    # A period before any of it: nothing mirrored, served or evaluated (storage is now).
    before = {"tenant": T, "since": "2020-01-01T00:00:00Z", "until": "2020-02-01T00:00:00Z"}
    empty = client.get("/v1/usage", params=before, headers=_as(tokens, "auditor")).json()
    assert empty["mirrored"]["bytes"] == 0 and empty["served"]["manifests"] == 0 and empty["evals"] == []
    backwards = {"tenant": T, "since": period["until"], "until": period["since"]}
    assert client.get("/v1/usage", params=backwards, headers=_as(tokens, "auditor")).json()["served"]["bytes"] == 0
    assert empty["stored"]["bytes"] == usage["stored"]["bytes"]


def test_usage_is_for_administrators_and_auditors_of_the_tenant(world):
    client, tokens = world
    assert client.get("/v1/usage", params={"tenant": T}, headers=_as(tokens, "submitter")).status_code == 403
    assert client.get("/v1/usage", params={"tenant": "other"}, headers=_as(tokens, "auditor")).status_code == 403
    r = client.get("/v1/usage", params={"tenant": T, "since": "2026-01-01T00:00:00"}, headers=_as(tokens, "auditor"))
    assert r.status_code == 422
