"""The trust root, server side: root 1 on first use, served versions, `modelreg keys rotate`, and what a
node walking from root 1 accepts afterwards (on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import os
import stat

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.cli import main
from registry.db.models import AuditEvent
from registry.domain.aliases import make_target
from registry.domain.errors import InvalidKeyError, SignatureError
from registry.services import aliases, trust_roots
from registry.signing.keys import SigningKey
from registry.signing.release import verify_release
from registry.signing.trust_root import RootError, parse_root, root_document, sign_root, walk
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"
NOW = lambda: dt.datetime.now(dt.timezone.utc)  # noqa: E731


@pytest.fixture
def client(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def rotate_cli(container, monkeypatch):
    """`modelreg keys rotate` against the container's database and data directory, as an operator runs it."""
    s = container.settings
    monkeypatch.setenv("MODELREG_DATABASE_URL", s.database_url)
    monkeypatch.setenv("MODELREG_SIGNING_KEY_PEM", s.signing_key_pem.get_secret_value())
    monkeypatch.setenv("MODELREG_BLOB_STORE_URL", s.blob_store_url)

    def run(*args: str) -> int:
        return main(["keys", "rotate", "--data-dir", str(s.data_dir), *args])

    return run


def fetch_root(client):
    def get(version: int):
        r = client.get(f"/v1/trust-root/{version}")
        if r.status_code == 404:
            assert r.json()["type"].endswith("/trust-root-not-found")
            return None
        assert r.status_code == 200, r.text
        return r.json()
    return get


def test_root_one_is_made_from_the_signing_key_on_first_use(client, container):
    newest = client.get("/v1/trust-root")
    assert newest.status_code == 200
    root = parse_root(newest.json())
    key = container.signing_key
    assert (root.version, root.threshold, list(root.keys)) == (1, 1, [key.key_id])
    assert dt.timedelta(days=364) < root.expires - NOW() <= dt.timedelta(days=365)
    assert client.get("/v1/trust-root/1").json() == newest.json()
    assert client.get("/v1/trust-root").json() == newest.json()  # made once
    r = client.get("/v1/trust-root/2")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert client.get("/v1/keys").json()["keys"] == [
        {"key_id": key.key_id, "algorithm": "ecdsa-p256-sha256",
         "public_key_pem": key.public_key.public_pem().decode()}]
    with container.session_factory() as session:
        events = session.scalars(select(AuditEvent.action).where(AuditEvent.subject == "trust-root/1")).all()
    assert events == ["trust_root.published"]


def test_rotation_publishes_root_two_that_nodes_walk_to_and_releases_use_it(client, container, rotate_cli, tmp_path):
    admin = make_admin(container, T)
    awaiting_version(container, admin, tmp_path / "v1", T, M)
    approve_standin(container, T, M, 1)
    with container.session_factory() as session:
        aliases.promote(session, admin, T, M, "prod", make_target(1), policy=container.policy, clock=container.clock)
    node = {"Authorization": f"Bearer {role_token(container, 'nod', T, 'node')}"}
    pinned = parse_root(client.get("/v1/trust-root").json())  # what the node was installed with
    before = client.get(f"/v1/models/{T}/{M}/manifest", headers=node, params={"ref": "prod"})
    old_key = container.signing_key.key_id
    assert before.json()["envelope"]["signatures"][0]["keyid"] == old_key

    assert rotate_cli() == 0
    new_file = container.settings.data_dir.resolve() / "keys" / "signing-key-2.pem"
    assert stat.S_IMODE(os.stat(new_file).st_mode) == 0o600
    new_key = SigningKey.from_file(new_file)

    root = walk(pinned, fetch_root(client), now=NOW())
    assert (root.version, list(root.keys)) == (2, [new_key.key_id])  # the old key is dropped by default
    assert client.get("/v1/keys").json()["keys"][0]["key_id"] == new_key.key_id

    # The server found the new key in the data directory and signs with it at once: a new ETag.
    after = client.get(f"/v1/models/{T}/{M}/manifest", headers=node,
                       params={"ref": "prod"}, )
    assert after.status_code == 200, after.text
    assert after.headers["ETag"] != before.headers["ETag"]
    body = after.json()
    assert body["trust_root_version"] == 2
    assert [s["keyid"] for s in body["envelope"]["signatures"]] == [new_key.key_id]
    assert verify_release(body["envelope"], root, now=NOW(), model=f"{T}/{M}", ref="prod").version == 1
    # A node still on root 1 refuses it: it must walk first.
    with pytest.raises(SignatureError):
        verify_release(body["envelope"], pinned, now=NOW(), model=f"{T}/{M}", ref="prod")
    # And the manifest signed by the retired key no longer verifies with root 2.
    with pytest.raises(SignatureError):
        verify_release(before.json()["envelope"], root, now=NOW(), model=f"{T}/{M}", ref="prod")

    # A second rotation, keeping the old keys: root 3 lists both, and the walk from root 1 still works.
    assert rotate_cli("--keep-old") == 0
    root = walk(pinned, fetch_root(client), now=NOW())
    newest = SigningKey.from_file(new_file.with_name("signing-key-3.pem"))
    assert (root.version, set(root.keys)) == (3, {new_key.key_id, newest.key_id})
    body = client.get(f"/v1/models/{T}/{M}/manifest", headers=node, params={"ref": "prod"}).json()
    assert body["envelope"]["signatures"][0]["keyid"] == newest.key_id  # the key root 3 added
    with container.session_factory() as session:
        actions = session.scalars(select(AuditEvent.subject).where(AuditEvent.action == "trust_root.rotated")).all()
    assert actions == ["trust-root/2", "trust-root/3"]


def test_a_root_two_not_signed_by_root_one_is_refused(client):
    pinned = parse_root(client.get("/v1/trust-root").json())
    intruder = SigningKey.generate()
    forged = sign_root(root_document(2, [intruder.public_key], 1, NOW() + dt.timedelta(days=30)), [intruder])
    with pytest.raises(RootError) as caught:
        walk(pinned, {2: forged}.get, now=NOW())
    assert caught.value.details["reason"] == "signature"
    # Signed by root 1's key but not by its own: refused too.
    server_key_doc = root_document(2, [intruder.public_key], 1, NOW() + dt.timedelta(days=30))
    half = sign_root(server_key_doc, [SigningKey.generate()])
    with pytest.raises(RootError):
        walk(pinned, {2: half}.get, now=NOW())


def test_rotation_needs_root_n_keys(container, tmp_path):
    """A registry that holds none of the newest root's keys cannot publish the next root."""
    from registry.signing.keyring import KeyRing

    with container.session_factory() as session:
        trust_roots.ensure_root(session, container.signing_key, expires_in=dt.timedelta(days=1),
                                clock=container.clock)
        stranger = KeyRing(SigningKey.generate(), tmp_path / "no-keys")
        with pytest.raises(InvalidKeyError):
            trust_roots.rotate(session, stranger, SigningKey.generate(), expires_in=dt.timedelta(days=1),
                               clock=container.clock)
        assert trust_roots.newest(session).version == 1


def test_two_replicas_starting_at_once_publish_one_next_root(container, monkeypatch):
    """Two `modelreg serve` processes that both read root 1 and both publish root 2 for a changed log setting:
    one publishes it, the other gets a RotationConflictError (which bootstrap answers by reading the winner's),
    never a database error, and only the winner's rotation is in the audit log."""
    import threading

    with container.session_factory() as session:
        trust_roots.ensure_root(session, container.signing_key, expires_in=dt.timedelta(days=1),
                                clock=container.clock)
    both_read_root_one = threading.Barrier(2, timeout=20)
    rescan = container.keyring.rescan

    def rescan_after_both_read() -> None:  # _publish_next's first step, after ensure_root read root 1
        both_read_root_one.wait()
        rescan()

    monkeypatch.setattr(container.keyring, "rescan", rescan_after_both_read)
    outcomes: list[object] = []

    def replica() -> None:
        with container.session_factory() as session:
            try:
                outcomes.append(trust_roots.publish_log(session, container.keyring, container.log_trust,
                                                        expires_in=dt.timedelta(days=1), clock=container.clock))
            except Exception as e:  # noqa: BLE001 - the assertion below names what was raised
                outcomes.append(e)

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    kinds = sorted(type(o).__name__ for o in outcomes)
    assert kinds == ["RotationConflictError", "TrustRoot"], outcomes
    with container.session_factory() as session:
        assert trust_roots.newest(session).version == 2
        assert trust_roots.newest(session).log == container.log_trust
        rotated = session.scalars(select(AuditEvent.subject).where(AuditEvent.action == "trust_root.rotated")).all()
        assert rotated == ["trust-root/2"]
