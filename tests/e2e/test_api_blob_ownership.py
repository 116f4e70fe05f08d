"""Blobs are stored once but owned per tenant, through the HTTP API (SQLite and PostgreSQL).

Tenant ``acme`` (alice) and tenant ``other`` (bob) are both submitters. Bytes alice uploaded are, to
bob, bytes that do not exist until he sends them himself or mirrors them from an upstream.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select

from api.app import create_app
from registry.db.models import Blob, BlobOwner, Tenant
from registry.services import versions
from registry.signing.bundle import verify_model_bundle
from tests.support.hf_upstream import HfUpstream
from tests.support.registry import drain, make_admin, role_token

X = b"alice's weights " * 40
X_SHA = hashlib.sha256(X).hexdigest()
# Differs from X in its last byte only: refusing it takes reading the whole body.
NOT_X = X[:-1] + b"!"
NEVER_SHA = hashlib.sha256(b"bytes nobody ever uploaded").hexdigest()


@pytest.fixture
def api(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def alice(container):
    return {"Authorization": f"Bearer {role_token(container, 'alice', 'acme', 'submitter')}"}


@pytest.fixture
def bob(container):
    return {"Authorization": f"Bearer {role_token(container, 'bob', 'other', 'submitter')}"}


def _chunks(data: bytes, size: int = 100):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _put(api, who, tenant: str, data: bytes, digest: str | None = None, chunked: bool = False):
    digest = digest or hashlib.sha256(data).hexdigest()
    return api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": tenant},
                   content=_chunks(data) if chunked else data, headers=who)


def _head(api, who, tenant: str, digest: str) -> int:
    return api.head(f"/v1/blobs/sha256/{digest}", params={"tenant": tenant}, headers=who).status_code


def _submit(api, who, tenant: str, files: list[tuple[str, int, str]], name: str = "m"):
    return api.post(f"/v1/models/{tenant}/{name}/versions", headers=who, json={
        "source": "upload:dir", "files": [{"path": p, "size": s, "sha256": d} for p, s, d in files]})


def _owners(container, digest: str) -> set[str]:
    with container.session_factory() as session:
        return set(session.scalars(select(Tenant.name).join(BlobOwner, BlobOwner.tenant_id == Tenant.id)
                                   .where(BlobOwner.digest == digest)))


@pytest.fixture
def statements(container):
    """Every SQL statement the app's engine runs while the test looks (``.clear()`` to start over)."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args):
        seen.append(statement)

    event.listen(container.engine, "before_cursor_execute", record)
    yield seen
    event.remove(container.engine, "before_cursor_execute", record)


def test_a_tenant_cannot_put_another_tenants_blob_into_a_version(api, container, alice, bob):
    assert _put(api, alice, "acme", X).json() == {"digest": X_SHA, "created": True}
    assert _head(api, alice, "acme", X_SHA) == 200
    # To bob, alice's blob is exactly as absent as one nobody ever sent.
    assert _head(api, bob, "other", X_SHA) == 404
    assert _head(api, bob, "other", NEVER_SHA) == 404

    r = _submit(api, bob, "other", [("weights.bin", len(X), X_SHA)])
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "https://modelreg.dev/problems/blobs-not-uploaded"
    assert r.json()["missing"] == ["weights.bin"] and r.json()["missing_count"] == 1
    never = _submit(api, bob, "other", [("weights.bin", len(X), NEVER_SHA)])
    assert never.status_code == 422 and never.json() == r.json()
    assert api.get("/v1/models/other/m/versions", headers=bob).status_code == 404
    assert _owners(container, X_SHA) == {"acme"}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_put_under_another_tenants_digest_must_send_the_bytes(api, container, alice, bob, chunked):
    _put(api, alice, "acme", X)

    wrong = _put(api, bob, "other", NOT_X, digest=X_SHA, chunked=chunked)
    assert wrong.status_code == 422, wrong.text
    assert wrong.json()["type"].endswith("/digest-mismatch")
    assert _owners(container, X_SHA) == {"acme"}
    assert _head(api, bob, "other", X_SHA) == 404
    assert _submit(api, bob, "other", [("weights.bin", len(X), X_SHA)]).status_code == 422
    assert b"".join(container.blob_store.open_range(X_SHA)) == X

    right = _put(api, bob, "other", X, chunked=chunked)
    # created speaks of bob's tenant: that alice had the same bytes is not told.
    assert right.status_code == 201 and right.json() == {"digest": X_SHA, "created": True}
    assert _owners(container, X_SHA) == {"acme", "other"}
    assert _head(api, bob, "other", X_SHA) == 200
    r = _submit(api, bob, "other", [("weights.bin", len(X), X_SHA)])
    assert r.status_code == 202, r.text
    drain(container)
    version = api.get("/v1/models/other/m/versions/1", headers=bob).json()
    assert version["state"] == "awaiting_approval", version["failure_detail"]
    # An owner's second upload is the cheap one.
    assert _put(api, bob, "other", X).json() == {"digest": X_SHA, "created": False}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_wrong_put_tells_nothing_of_another_tenants_blob(api, alice, bob, chunked):
    """Wrong bytes under a digest only alice holds get the answer they get under a digest nobody holds:
    no size-mismatch naming the stored size, no other difference (the existence and size oracle)."""
    _put(api, alice, "acme", X)
    short = b"bob guesses"  # not len(X) bytes: a size check against the stored blob would tell

    def answer(digest: str) -> tuple[int, str]:
        r = _put(api, bob, "other", short, digest=digest, chunked=chunked)
        assert r.headers["content-type"] == "application/problem+json"
        return r.status_code, r.text.replace(digest, "<digest>")

    held, never = answer(X_SHA), answer(NEVER_SHA)
    assert held == never
    assert held[0] == 422 and '"type":"https://modelreg.dev/problems/digest-mismatch"' in held[1].replace(" ", "")
    assert str(len(X)) not in held[1]


def test_an_owners_upload_is_not_read_and_a_newcomers_is_read_to_the_end(container):
    """The service itself: an owner's bytes are left unread, anyone else's are hashed in full."""
    acme, other = make_admin(container, "acme"), make_admin(container, "other")
    store = container.blob_store

    def upload(principal, tenant, source):
        with container.session_factory() as session:
            return versions.upload_blob(session, principal, tenant, X_SHA, source, len(X), blob_store=store)

    assert upload(acme, "acme", _chunks(X)) is True

    def unreadable():
        raise AssertionError("an owner's upload of a stored blob was read")
        yield b""  # pragma: no cover

    assert upload(acme, "acme", unreadable()) is False

    read = []

    def counted():
        for chunk in _chunks(X):
            read.append(len(chunk))
            yield chunk

    assert upload(other, "other", counted()) is True
    assert sum(read) == len(X)
    assert _owners(container, X_SHA) == {"acme", "other"}


def test_upload_sizes_come_from_the_store(api, container, alice):
    container.settings.max_version_size = 150
    a, b = b"a" * 100, b"b" * 100
    da, db = hashlib.sha256(a).hexdigest(), hashlib.sha256(b).hexdigest()
    _put(api, alice, "acme", a)
    _put(api, alice, "acme", b)

    # Under-claiming would slip two 100-byte files past a 150-byte limit, and be signed as the truth.
    r = _submit(api, alice, "acme", [("a.bin", 1, da), ("b.bin", 1, db)])
    assert r.status_code == 422, r.text
    assert r.json()["type"].endswith("/size-mismatch")
    assert r.json()["path"] == "a.bin" and "a.bin" in r.json()["detail"]
    assert r.json()["expected"] == 100 and r.json()["actual"] == 1
    assert api.get("/v1/models/acme/m/versions", headers=alice).status_code == 404

    over = _submit(api, alice, "acme", [("a.bin", 100, da), ("b.bin", 100, db)])
    assert over.status_code == 202 and over.json()["state"] == "failed"
    assert over.json()["failure_reason"] == "limit_exceeded"

    container.settings.max_version_size = 1000
    r = _submit(api, alice, "acme", [("a.bin", 100, da)], name="ok")
    assert r.status_code == 202 and r.json()["files"][0]["size"] == 100
    drain(container)
    bundle = api.get("/v1/models/acme/ok/versions/1/signature", headers=alice).json()
    statement = verify_model_bundle(bundle, container.signing_key.public_key)
    assert statement["predicate"]["modelreg"]["files"] == [{"path": "a.bin", "size": 100, "sha256": da}]


def test_a_files_list_over_the_limit_is_refused_before_any_lookup(api, container, alice, statements):
    container.settings.max_files_per_version = 5
    files = [(f"f{i}", 1, NEVER_SHA) for i in range(6)]
    statements.clear()
    r = _submit(api, alice, "acme", files)
    assert r.status_code == 413 and r.json()["type"].endswith("/limit-exceeded"), r.text
    assert r.json()["files"] == 6 and r.json()["limit"] == 5
    # Only the token and its roles were looked up: not the tenant by name, not a model, not a blob.
    pattern = r"tenants\.name = |\b(models|versions|blobs|blob_owners)\b"
    looked_up = [s for s in statements if re.search(pattern, s)]
    assert looked_up == [], statements

    with container.session_factory() as session:
        principal = make_admin(container, "acme")
        statements.clear()
        with pytest.raises(Exception) as refused:
            versions.submit_uploaded(session, principal, "acme", "m",
                                     [versions.FileEntry(p, s, d) for p, s, d in files],
                                     label="dir", limits=container.limits(), ports=container.ports)
        assert type(refused.value).__name__ == "LimitExceededError"
        assert statements == []


def test_the_digests_of_a_submission_are_looked_up_in_one_query(api, container, alice, statements):
    selects = {}
    for count in (3, 40):
        files = []
        for i in range(count):
            data = b"file %d of %d\n" % (i, count)
            _put(api, alice, "acme", data)
            files.append((f"dir/f{i}.txt", len(data), hashlib.sha256(data).hexdigest()))
        statements.clear()
        r = _submit(api, alice, "acme", files, name=f"m{count}")
        assert r.status_code == 202, r.text
        lookups = [s for s in statements if re.search(r"\b(blobs|blob_owners)\b", s)]
        assert len(lookups) == 1, lookups
        selects[count] = sum(1 for s in statements if s.lstrip().upper().startswith("SELECT"))
    # Not one more query for 37 more files.
    assert selects[3] == selects[40], selects


def test_an_error_body_lists_a_few_paths_and_counts_the_rest(api, alice):
    r = _submit(api, alice, "acme", [(f"dir/file-{i:05d}.bin", 1, NEVER_SHA) for i in range(3000)])
    assert r.status_code == 422
    body = r.json()
    assert body["missing_count"] == 3000
    assert body["missing"] == [f"dir/file-{i:05d}.bin" for i in range(10)]
    assert "and 2990 more" in body["detail"]
    assert len(r.content) < 2000


# --- mirroring ------------------------------------------------------------------------------


@pytest.fixture
def hub(container):
    # Every file is LFS, so the upstream publishes its sha256.
    with HfUpstream(lfs_threshold=1) as upstream:
        container.settings.hf_allowed_endpoints.append(upstream.url)
        upstream.add_repo("org/m", gitattributes=False)
        upstream.commit("org/m", {"notes.txt": X})
        yield upstream


def _submit_hf(api, who, hub):
    return api.post("/v1/models/other/m/versions", headers=who,
                    json={"source": "hf://org/m", "hf_endpoint": hub.url})


def _downloads(hub, path: str) -> int:
    return sum(1 for r in hub.requests if r.method == "GET" and r.path.endswith("/" + path))


def test_mirroring_reads_the_upstream_and_grants_ownership(api, container, alice, bob, hub):
    _put(api, alice, "acme", X)
    r = _submit_hf(api, bob, hub)
    assert r.status_code == 202, r.text
    drain(container)
    version = api.get("/v1/models/other/m/versions/1", headers=bob).json()
    assert version["sealed_at"] is not None, version["failure_detail"]
    # Stored already for acme, yet fetched from bob's upstream: that is what makes the bytes his.
    assert _downloads(hub, "notes.txt") == 1
    assert _owners(container, X_SHA) == {"acme", "other"}
    assert _head(api, bob, "other", X_SHA) == 200

    # Bob's next version of the same bytes is not transferred again.
    hub.commit("org/m", {"more.txt": b"more"})
    assert _submit_hf(api, bob, hub).json()["version"] == 2
    drain(container)
    assert api.get("/v1/models/other/m/versions/2", headers=bob).json()["sealed_at"] is not None
    assert _downloads(hub, "notes.txt") == 1


def test_an_upstream_that_publishes_a_digest_it_cannot_serve_gets_nothing(api, container, alice, bob, hub):
    """A hub that lists alice's sha256 but serves other bytes does not get her bytes into bob's version."""
    _put(api, alice, "acme", X)
    hub.corrupt("org/m", "notes.txt")
    r = _submit_hf(api, bob, hub)
    assert r.status_code == 202, r.text
    drain(container)
    version = api.get("/v1/models/other/m/versions/1", headers=bob).json()
    assert version["state"] == "failed" and version["failure_reason"] == "digest_mismatch", version
    assert version["sealed_at"] is None
    assert _owners(container, X_SHA) == {"acme"}
    assert _head(api, bob, "other", X_SHA) == 404


@pytest.mark.parametrize("upstream", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_mirroring_a_directory_or_a_bucket_grants_ownership(request, api, container, alice, bob, tmp_path,
                                                            upstream):
    _put(api, alice, "acme", X)
    if upstream == "local":
        model = tmp_path / "model"
        model.mkdir()
        (model / "notes.txt").write_bytes(X)
        source = str(model)
    else:
        from pydantic import SecretStr

        server, bucket = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket")
        server.client().put_object(Bucket=bucket, Key="models/m/notes.txt", Body=X)
        container.settings.s3_endpoint_url = server.endpoint_url
        container.settings.s3_access_key_id = server.access_key
        container.settings.s3_secret_access_key = SecretStr(server.secret_key)
        container.settings.s3_source_buckets = [bucket]
        source = f"s3://{bucket}/models/m"
    r = api.post("/v1/models/other/m/versions", headers=bob, json={"source": source})
    assert r.status_code == 202, r.text
    assert r.json()["files"][0]["mirrored"] is False
    drain(container)
    version = api.get("/v1/models/other/m/versions/1", headers=bob).json()
    assert version["sealed_at"] is not None, version["failure_detail"]
    assert _owners(container, X_SHA) == {"acme", "other"}
    assert _head(api, bob, "other", X_SHA) == 200
    with container.session_factory() as session:
        assert session.get(Blob, X_SHA).size == len(X)


def test_a_git_file_seen_in_another_tenant_is_fetched_again(api, container, alice, bob):
    """Small git files are matched by git blob sha1 and size, within the tenant only."""
    config = b'{"hidden_size": 64}\n'
    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        for repo in ("acme/cfg", "bob/cfg", "bob/cfg2"):
            hub.add_repo(repo, gitattributes=False)
            hub.commit(repo, {"config.json": config})
        hub.corrupt("bob/cfg", "config.json")

        def submit(who, tenant, repo, name):
            r = api.post(f"/v1/models/{tenant}/{name}/versions", headers=who,
                         json={"source": f"hf://{repo}", "hf_endpoint": hub.url})
            assert r.status_code == 202, r.text
            drain(container)
            return api.get(f"/v1/models/{tenant}/{name}/versions/1", headers=who).json()

        assert submit(alice, "acme", "acme/cfg", "cfg")["sealed_at"] is not None
        # bob's hub lists the same git blob id but serves other bytes: they are fetched, and refused.
        lying = submit(bob, "other", "bob/cfg", "cfg")
        assert lying["state"] == "failed" and lying["failure_reason"] == "digest_mismatch", lying
        assert _owners(container, hashlib.sha256(config).hexdigest()) == {"acme"}
        honest = submit(bob, "other", "bob/cfg2", "cfg2")
        assert honest["sealed_at"] is not None, honest["failure_detail"]
        assert _owners(container, hashlib.sha256(config).hexdigest()) == {"acme", "other"}
        # Now his own: a later repository with the same file, twice, fetches neither copy.
        hub.add_repo("bob/cfg3", gitattributes=False)
        hub.commit("bob/cfg3", {"config.json": config, "copy/config.json": config})
        before = len(hub.requests)
        again = submit(bob, "other", "bob/cfg3", "cfg3")
        assert again["sealed_at"] is not None and all(f["sha256"] for f in again["files"])
        assert not [r for r in hub.requests[before:] if r.method == "GET" and "config.json" in r.path]


def test_a_request_with_thousands_of_bad_entries_lists_a_few(api, alice):
    r = _submit(api, alice, "acme", [(f"dir/file-{i:05d}.bin", 1, "not-a-digest") for i in range(3000)])
    assert r.status_code == 422 and r.json()["type"].endswith("/invalid-input")
    body = r.json()
    assert body["errors_count"] == 3000 and len(body["errors"]) == 20
    assert body["errors"][0]["field"] == "files.0.sha256"
    assert "(and 2980 more)" in body["detail"]
    assert len(r.content) < 5000
