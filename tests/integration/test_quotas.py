"""Byte quotas per tenant: set by administrators, counted once per blob a tenant owns, and checked at
submission (a 413 ``quota-exceeded`` problem), at upload, and again when a mirror lands."""

from __future__ import annotations

import hashlib
import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.db.models import Version
from registry.domain.errors import PermissionDeniedError, QuotaExceededError
from registry.services import blobs, quotas, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import drain, make_admin, role_token


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def api(container, admin):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        token = role_token(container, "alice", "acme", "submitter")
        with container.session_factory() as session:
            from registry.auth import issue_token
            from registry.db.models import Principal

            root = session.scalars(select(Principal).where(Principal.name == admin.name)).one()
            client.admin_token = issue_token(session, root).token
            session.commit()
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def as_admin(client) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.admin_token}"}


def source_dir(tmp_path, name: str, files: dict[str, bytes]):
    root = tmp_path / name
    root.mkdir()
    for path, data in files.items():
        (root / path).write_bytes(data)
    return root


def upload(container, principal, tenant: str, data: bytes) -> None:
    with container.session_factory() as session:
        versions.upload_blob(session, principal, tenant, sha(data), io.BytesIO(data), len(data),
                             blob_store=container.blob_store)


def set_quota(container, admin, tenant: str, limit: int | None) -> None:
    with container.session_factory() as session:
        quotas.set_quota(session, admin, tenant, limit, clock=container.clock)


def test_administrators_set_a_quota_and_readers_see_use_and_limit(api, container):
    r = api.put("/v1/tenants/acme/quota", json={"bytes": 1000})
    assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied")
    r = api.put("/v1/tenants/acme/quota", json={"bytes": 1000}, headers=as_admin(api))
    assert r.status_code == 200, r.text
    assert r.json() == {"tenant": "acme", "limit": 1000, "used": 0, "available": 1000}
    r = api.put("/v1/blobs/sha256/" + sha(b"x" * 300), params={"tenant": "acme"}, content=b"x" * 300)
    assert r.status_code == 201, r.text
    assert api.get("/v1/tenants/acme/quota").json() == {"tenant": "acme", "limit": 1000, "used": 300,
                                                         "available": 700}
    r = api.put("/v1/tenants/acme/quota", json={"bytes": None}, headers=as_admin(api))
    assert r.json()["limit"] is None and r.json()["used"] == 300
    assert api.put("/v1/tenants/acme/quota", json={"bytes": -1}, headers=as_admin(api)).status_code == 422


def test_a_blob_counts_once_per_tenant_that_owns_it(container, admin):
    other = make_admin(container, "other")
    shared = b"s" * 100
    for principal, tenant in ((admin, "acme"), (other, "other")):
        upload(container, principal, tenant, shared)
        upload(container, principal, tenant, shared)  # again: still once
    upload(container, admin, "acme", b"a" * 10)
    with container.session_factory() as session:
        assert quotas.read_quota(session, admin, "acme").used == 110
        assert quotas.read_quota(session, other, "other").used == 100


def test_a_submission_over_the_quota_is_refused_with_used_limit_and_needed(api, container, admin, tmp_path):
    upload(container, admin, "acme", b"o" * 100)
    set_quota(container, admin, "acme", 400)
    # 100 bytes the tenant owns already do not count again; 350 new ones do.
    root = source_dir(tmp_path, "big", {"owned.bin": b"o" * 100, "new.bin": b"n" * 350})
    r = api.post("/v1/models/acme/m/versions", json={"source": str(root)})
    assert r.status_code == 413, r.text
    problem = r.json()
    assert r.headers["content-type"] == "application/problem+json"
    assert problem["type"].endswith("/quota-exceeded")
    assert (problem["used"], problem["limit"], problem["needed"]) == (100, 400, 350)
    assert "100 of 400 bytes used, 350 more needed" in problem["detail"]
    with container.session_factory() as session:
        assert session.scalars(select(Version)).all() == []

    fits = source_dir(tmp_path, "fits", {"owned.bin": b"o" * 100, "new.bin": b"n" * 300})
    r = api.post("/v1/models/acme/m/versions", json={"source": str(fits)})
    assert r.status_code == 202, r.text
    drain(container)
    with container.session_factory() as session:
        version = session.scalars(select(Version)).one()
        assert version.state not in ("failed", "mirroring"), version.failure_detail
        assert quotas.read_quota(session, admin, "acme").used == 400


def test_an_upload_over_the_quota_is_refused_before_it_is_read(api, container, admin):
    set_quota(container, admin, "acme", 50)
    data = b"u" * 51
    r = api.put(f"/v1/blobs/sha256/{sha(data)}", params={"tenant": "acme"}, content=data)
    assert r.status_code == 413 and r.json()["type"].endswith("/quota-exceeded"), r.text
    assert not container.blob_store.exists(sha(data))


def test_a_mirror_that_would_exceed_fails_its_version_and_nothing_is_released(container, admin, tmp_path):
    root = source_dir(tmp_path, "src", {"a.bin": b"a" * 200, "b.bin": b"b" * 200})
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", "m", SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
    # Another submission took the room meanwhile.
    upload(container, admin, "acme", b"x" * 150)
    set_quota(container, admin, "acme", 400)
    drain(container)
    with container.session_factory() as session:
        failed = session.get(Version, version.id)
        assert failed.state == "failed" and failed.failure_reason == "quota_exceeded"
        assert failed.failure_detail["limit"] == 400 and failed.failure_detail["needed"] == 200
        assert failed.sealed_at is None and failed.manifest_bundle is None
        assert quotas.read_quota(session, admin, "acme").used <= 400


def test_the_grant_checks_the_quota_again_whatever_was_checked_before(container, admin):
    """Two puts that each fit, but not both: the grant (which locks the quota row) refuses the second."""
    set_quota(container, admin, "acme", 150)
    first, second = b"1" * 100, b"2" * 100
    container.blob_store.put(io.BytesIO(first))
    container.blob_store.put(io.BytesIO(second))
    from registry.db.session import begin_write

    tenant_id = _tenant_id(container, "acme")
    with container.session_factory() as session:
        begin_write(session)
        blobs.grant_blob(session, tenant_id, sha(first), 100, via="upload", blob_store=container.blob_store)
        session.commit()
    with container.session_factory() as session, pytest.raises(QuotaExceededError):
        begin_write(session)
        blobs.grant_blob(session, tenant_id, sha(second), 100, via="upload", blob_store=container.blob_store)


def test_only_administrators_set_quotas(container):
    role_token(container, "tadmin", "acme", "admin")
    from registry.auth import load_principal
    from registry.db.models import Principal

    with container.session_factory() as session:
        tenant_admin = load_principal(session.scalars(select(Principal).where(Principal.name == "tadmin")).one())
        with pytest.raises(PermissionDeniedError):
            quotas.set_quota(session, tenant_admin, "acme", 10, clock=container.clock)


def _tenant_id(container, name: str) -> int:
    from registry.db.models import Tenant

    with container.session_factory() as session:
        return session.scalars(select(Tenant.id).where(Tenant.name == name)).one()


def _submit_dir(container, principal, tenant: str, root):
    with container.session_factory() as session:
        version, _ = versions.submit(session, principal, tenant, "m", SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        return version.id


def test_a_blob_listed_twice_in_one_submission_counts_once(container, admin, tmp_path):
    set_quota(container, admin, "acme", 150)
    same = b"w" * 100
    root = source_dir(tmp_path, "twice", {"a.bin": same, "b.bin": same})
    version_id = _submit_dir(container, admin, "acme", root)  # 200 listed, 100 new: it fits
    drain(container)
    with container.session_factory() as session:
        version = session.get(Version, version_id)
        assert version.state not in ("failed", "mirroring"), version.failure_detail
        assert quotas.read_quota(session, admin, "acme").used == 100


def test_a_blob_only_another_tenant_holds_counts_as_new(api, container, admin, tmp_path):
    """acme's copy of the bytes is no byte of globex's: globex's submission and upload need the room."""
    globex = make_admin(container, "globex")
    held = b"h" * 100
    upload(container, admin, "acme", held)
    set_quota(container, admin, "globex", 50)
    root = source_dir(tmp_path, "held", {"w.bin": held})
    with pytest.raises(QuotaExceededError) as refused:
        _submit_dir(container, globex, "globex", root)
    assert (refused.value.details["used"], refused.value.details["needed"]) == (0, 100)
    with pytest.raises(QuotaExceededError):
        upload(container, globex, "globex", held)
    with container.session_factory() as session:
        assert quotas.read_quota(session, globex, "globex").used == 0
        assert quotas.read_quota(session, admin, "acme").used == 100


def test_concurrent_submissions_cannot_together_pass_the_quota(container, admin, tmp_path):
    """Two submissions that each fit, but not both, mirror at once: while the first grant's transaction is
    open, the second waits for its quota row and then counts the first's bytes."""
    import threading

    from registry.db.session import begin_write

    set_quota(container, admin, "acme", 150)
    first, second = b"1" * 100, b"2" * 100
    ids = [_submit_dir(container, admin, "acme", source_dir(tmp_path, name, {"w.bin": data}))
           for name, data in (("first", first), ("second", second))]
    assert len(set(ids)) == 2  # both accepted: neither owned anything yet
    for data in (first, second):
        container.blob_store.put(io.BytesIO(data))
    tenant_id = _tenant_id(container, "acme")
    granted, second_done, outcome = threading.Event(), threading.Event(), {}

    def grant_first() -> None:
        with container.session_factory() as session:
            begin_write(session)
            blobs.grant_blob(session, tenant_id, sha(first), 100, via="mirror", blob_store=container.blob_store)
            granted.set()
            second_done.wait(1.0)  # the second grant is under way (or done, without the lock)
            session.commit()

    def grant_second() -> None:
        granted.wait(10)
        try:
            with container.session_factory() as session:
                begin_write(session)
                blobs.grant_blob(session, tenant_id, sha(second), 100, via="mirror",
                                    blob_store=container.blob_store)
                session.commit()
                outcome["second"] = "granted"
        except QuotaExceededError:
            outcome["second"] = "refused"
        finally:
            second_done.set()

    threads = [threading.Thread(target=grant_first), threading.Thread(target=grant_second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcome == {"second": "refused"}
    with container.session_factory() as session:
        assert quotas.read_quota(session, admin, "acme").used == 100
