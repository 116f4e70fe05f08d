"""`/metrics` through the HTTP API: the series move after real work (a mirror, a scan, an eval, a manifest).

The exposition is parsed with prometheus_client's own parser, so a malformed line fails here as it
would fail a Prometheus scrape.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from api.metrics import MANIFEST_ROUTE
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"


def scrape(client: TestClient, **kwargs) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``, keyed by name and sorted labels."""
    r = client.get("/metrics", **kwargs)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


@pytest.fixture
def client(container):
    container.settings.metrics_cache_seconds = 0
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c


def test_series_move_after_a_mirror_a_scan_an_eval_and_manifest_requests(container, client, tmp_path):
    before = scrape(client)
    assert value(before, "modelreg_metrics_database_up") == 1
    assert value(before, "modelreg_mirrored_bytes_total") == 0

    admin = make_admin(container, T)
    number = awaiting_version(container, admin, tmp_path / "v1", T, M, seed=1)
    awaiting = awaiting_version(container, admin, tmp_path / "v2", T, M, seed=2)
    approve_standin(container, T, M, number)
    drain(container)  # the approval queued the OCI image build
    node = {"Authorization": f"Bearer {role_token(container, 'node-1', T, 'node')}"}
    manifest = f"/v1/models/{T}/{M}/manifest"

    issued = client.get(manifest, params={"ref": str(number)}, headers=node)
    assert issued.status_code == 200, issued.text
    assert client.get(manifest, params={"ref": str(number)},
                      headers={**node, "If-None-Match": issued.headers["etag"]}).status_code == 304
    assert client.get(manifest, params={"ref": str(awaiting)}, headers=node).status_code == 409
    assert client.get(manifest, params={"ref": str(number)}).status_code == 401

    after = scrape(client)
    mirrored = sum(p.stat().st_size for p in (tmp_path / "v1").rglob("*") if p.is_file())
    mirrored += sum(p.stat().st_size for p in (tmp_path / "v2").rglob("*") if p.is_file())
    assert value(after, "modelreg_mirrored_bytes_total") == mirrored
    assert value(after, "modelreg_versions", state="approved") == 1
    assert value(after, "modelreg_versions", state="awaiting_approval") == 1
    assert total(after, "modelreg_jobs", state="succeeded") > 0
    assert value(after, "modelreg_mirrored_files_total") == sum(
        1 for v in ("v1", "v2") for p in (tmp_path / v).rglob("*") if p.is_file())
    assert total(after, "modelreg_queue_depth") == 0
    assert total(after, "modelreg_scan_results_total", verdict="safe") > 0
    assert total(after, "modelreg_eval_duration_seconds_count") > 0
    count = total(after, "modelreg_eval_duration_seconds_count")
    assert total(after, "modelreg_eval_duration_seconds_bucket", le="+Inf") == count
    assert value(after, "modelreg_manifests_issued_total") == 1
    assert value(after, "modelreg_manifest_requests_total", outcome="issued", reason="") == 1
    assert value(after, "modelreg_manifest_requests_total", outcome="not_modified", reason="") == 1
    assert value(after, "modelreg_manifest_requests_total", outcome="refused", reason="not-approved") == 1
    assert value(after, "modelreg_manifest_requests_total", outcome="refused", reason="unauthenticated") == 1
    assert value(after, "modelreg_http_request_duration_seconds_count", method="GET", route=MANIFEST_ROUTE,
                 status_class="4xx") == 2


def test_latency_is_labelled_by_route_template_never_by_raw_path(client):
    for name in ("alpha", "beta", "gamma"):
        client.get(f"/v1/models/{T}/{name}/versions", headers={"Authorization": "Bearer mr_nope"})
    client.get("/no/such/path/anywhere")
    text = client.get("/metrics").text
    assert "alpha" not in text and "beta" not in text and "/no/such" not in text
    samples = scrape(client)
    assert value(samples, "modelreg_http_request_duration_seconds_count", method="GET",
                 route="/v1/models/{tenant}/{name}/versions", status_class="4xx") == 3
    assert value(samples, "modelreg_http_request_duration_seconds_count", method="GET", route="unmatched",
                 status_class="4xx") == 1


def test_queue_depth_and_age_count_due_jobs(container, client):
    import datetime as dt

    from registry.jobs import enqueue

    now = container.clock.now()
    with container.session_factory() as session:
        enqueue(session, "seal_version", {"version_id": 1}, run_after=now - dt.timedelta(seconds=120))
        enqueue(session, "seal_version", {"version_id": 2}, run_after=now - dt.timedelta(seconds=5))
        enqueue(session, "scan_blob", {}, run_after=now + dt.timedelta(hours=1))  # not due yet
        session.commit()
    samples = scrape(client)
    assert value(samples, "modelreg_queue_depth", kind="seal_version") == 2
    assert "scan_blob" not in {dict(ls).get("kind") for (n, ls) in samples if n == "modelreg_queue_depth"}
    assert 120 <= value(samples, "modelreg_queue_oldest_age_seconds", kind="seal_version") < 180
    assert value(samples, "modelreg_jobs", kind="scan_blob", state="queued") == 1


def test_private_metrics_need_an_administrator(container, client):
    container.settings.metrics_public = False
    assert client.get("/metrics").status_code == 401
    reader = role_token(container, "reader", T, "submitter")
    assert client.get("/metrics", headers={"Authorization": f"Bearer {reader}"}).status_code == 403
    root = role_token(container, "root", T, "auditor")
    with container.session_factory() as session:
        from registry.db.models import Principal

        session.query(Principal).filter_by(name="root").one().is_admin = True
        session.commit()
    assert value(scrape(client, headers={"Authorization": f"Bearer {root}"}), "modelreg_metrics_database_up") == 1
