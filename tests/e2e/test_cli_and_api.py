"""Drive `modelreg serve`, the CLI and the HTTP API as a user would."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from tests.support.hf_upstream import HfUpstream
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/tiny", card_data={"license": "mit"})
        upstream.commit("org/tiny", tiny_model_files(7))
        yield upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory, hub):
    s = start_server(tmp_path_factory.mktemp("e2e") / "data",
                     extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url])})
    yield s
    s.stop()


def test_first_start_leaves_an_admin_token_only_its_owner_can_read(server):
    import stat

    mode = stat.S_IMODE((server.data_dir / "admin-token").stat().st_mode)
    assert mode == 0o600
    assert stat.S_IMODE((server.data_dir / "keys" / "signing-key.pem").stat().st_mode) == 0o600
    me = httpx.get(server.url + "/v1/whoami", headers={"Authorization": f"Bearer {server.admin_token}"}).json()
    assert me["name"] == "admin" and me["is_admin"]
    assert "modelreg serving on" in server.log.read_text() and "admin-token" in server.log.read_text()


def test_healthz_readyz_and_openapi(server):
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/readyz").json()["status"] == "ready"
    spec = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/models/{tenant}/{name}/versions" in spec["paths"]


def test_errors_are_problem_json_with_stable_types(server):
    r = httpx.get(server.url + "/v1/whoami")
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].endswith("/unauthenticated")
    r = httpx.get(server.url + "/v1/whoami", headers={"Authorization": "Bearer mr_wrong"})
    assert r.status_code == 401
    auth = {"Authorization": f"Bearer {server.admin_token}"}
    r = httpx.get(server.url + "/v1/models/nope/x/versions/1", headers=auth)
    assert r.status_code == 404 and r.json()["type"].endswith("/tenant-not-found")
    r = httpx.get(server.url + "/v1/models/default/x/versions/1", headers=auth)
    assert r.status_code == 404 and r.json()["type"].endswith("/model-not-found")
    r = httpx.post(server.url + "/v1/models/default/x/versions", headers=auth, json={"revision": "main"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "source"
    r = httpx.post(server.url + "/v1/models/default/x/versions", headers=auth, json={"source": "ftp://x"})
    assert r.status_code == 422 and r.json()["type"].endswith("/invalid-input")
    # The server reads no directory of its own, and no hub it was not configured for.
    for body in ({"source": "/etc"}, {"source": str(server.data_dir)},
                 {"source": "hf://org/tiny", "hf_endpoint": "http://169.254.169.254"}):
        r = httpx.post(server.url + "/v1/models/default/x/versions", headers=auth, json=body)
        assert r.status_code == 403 and r.json()["type"].endswith("/source-not-allowed"), body


def test_roles_are_enforced(server):
    server.cli("tenant", "create", "rolet", check=True)
    server.cli("principal", "create", "nodey", check=True)
    server.cli("principal", "grant", "nodey", "--tenant", "rolet", "--role", "node", check=True)
    token = server.cli("principal", "token", "nodey", check=True).stdout.strip()
    r = httpx.post(server.url + "/v1/models/rolet/m/versions", json={"source": "/tmp"},
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied")
    r = httpx.post(server.url + "/v1/tenants", json={"name": "x"}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403
    bad = server.cli("principal", "grant", "nodey", "--tenant", "rolet", "--role", "approver")
    assert bad.returncode == 1 and "capacity" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_submit_wait_json_matches_get_and_is_pinned(server, hub):
    result = server.cli("submit", "hf://org/tiny", "--model", "default/tiny", "--revision", "main",
                        "--hf-endpoint", hub.url, "--wait", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    version = json.loads(result.stdout)
    assert version["resolved_revision"] == hub.head("org/tiny") and version["requested_revision"] == "main"
    assert version["state"] == "awaiting_approval"
    assert all(len(f["sha256"]) == 64 for f in version["files"])
    shown = json.loads(server.cli("version", "show", "default/tiny", str(version["version"]), "--json",
                                  check=True).stdout)
    assert shown == version
    scans = json.loads(server.cli("version", "scans", "default/tiny", str(version["version"]), "--json",
                                  check=True).stdout)
    assert {f["verdict"] for f in scans["files"]} == {"safe"}


def test_submit_of_a_missing_revision_exits_non_zero_with_the_reason(server, hub):
    result = server.cli("submit", "hf://org/tiny", "--model", "default/tiny2", "--revision", "nope",
                        "--hf-endpoint", hub.url, "--wait", "--json", timeout=120)
    assert result.returncode == 1
    version = json.loads(result.stdout)
    assert version["state"] == "failed" and version["failure_reason"] == "revision_not_found"


def test_cli_errors_are_one_line(server):
    r = server.cli("submit", "/nonexistent", "--model", "no-slash")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")
    r = server.cli("version", "show", "default/none", "1")
    assert r.returncode == 1 and "model-not-found" in r.stderr


@pytest.mark.parametrize("char", ["\u200b", "\u00ad", "\u2028", "\u00a0"], ids=lambda c: f"U+{ord(c):04X}")
def test_a_label_with_an_invisible_character_is_one_line_and_non_zero(server, hub, tmp_path, char):
    """Issue 18: the directory's name labels an upload; a revision names what is mirrored."""
    model_dir = tmp_path / f"tiny{char}"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    r = server.cli("submit", str(model_dir), "--model", "default/invisible")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error:") and f"U+{ord(char):04X}" in r.stderr, r.stderr
    r = server.cli("submit", "hf://org/tiny", "--model", "default/invisible", "--revision", f"main{char}",
                   "--hf-endpoint", hub.url)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "invalid-text" in r.stderr and f"U+{ord(char):04X}" in r.stderr, r.stderr
    r = server.cli("version", "list", "default/invisible")
    assert "model-not-found" in r.stderr or r.stdout.strip() in ("", "[]"), (r.stdout, r.stderr)


def test_audit_verify_names_an_edited_and_a_deleted_event(tmp_path):
    s = start_server(tmp_path / "data", workers=0)
    try:
        for name in ("t1", "t2", "t3", "t4"):
            s.cli("tenant", "create", name, check=True)
    finally:
        s.stop()
    ok = s.cli("audit", "verify", "--data-dir", str(s.data_dir), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["events"] >= 5
    db = sqlite3.connect(s.data_dir / "registry.db")
    db.execute("UPDATE audit_events SET actor = 'mallory' WHERE id = 3")
    db.commit()
    bad = s.cli("audit", "verify", "--data-dir", str(s.data_dir))
    assert bad.returncode == 1 and "audit event 3 was altered" in bad.stderr
    db.execute("DELETE FROM audit_events WHERE id = 3")
    db.commit()
    bad = s.cli("audit", "verify", "--data-dir", str(s.data_dir))
    assert bad.returncode == 1 and "audit event 3 is missing" in bad.stderr
    db.close()


def test_submit_a_local_directory_by_upload(server, tmp_path):
    model_dir = tmp_path / "upload-me"
    model_dir.mkdir()
    files = tiny_model_files(11)
    for path, data in files.items():
        (model_dir / path).write_bytes(data)
    args = ["submit", str(model_dir), "--model", "default/uploaded", "--upload", "--wait", "--json"]
    result = server.cli(*args, timeout=300)
    assert result.returncode == 0, result.stderr
    version = json.loads(result.stdout)
    assert version["source"]["kind"] == "upload" and version["state"] == "awaiting_approval"
    import hashlib

    assert {f["path"]: f["sha256"] for f in version["files"]} == {
        p: hashlib.sha256(d).hexdigest() for p, d in files.items()}
    again = json.loads(server.cli(*args, timeout=300).stdout)
    assert again["version"] == version["version"]


def test_uploaded_blob_with_wrong_digest_is_refused(server):
    auth = {"Authorization": f"Bearer {server.admin_token}"}
    r = httpx.put(server.url + "/v1/blobs/sha256/" + "0" * 64, params={"tenant": "default"},
                  content=b"not those bytes", headers=auth)
    assert r.status_code == 422 and r.json()["type"].endswith("/digest-mismatch")
    head = server.url + "/v1/blobs/sha256/" + "0" * 64
    assert httpx.head(head, params={"tenant": "default"}, headers=auth).status_code == 404
    server.cli("principal", "create", "looker", check=True)
    looker = {"Authorization": f"Bearer {server.cli('principal', 'token', 'looker', check=True).stdout.strip()}"}
    # Whether some bytes are stored is for submitters of the tenant only.
    assert httpx.head(head, params={"tenant": "default"}, headers=looker).status_code == 403
    assert httpx.head(head, headers=auth).status_code == 422
    r = httpx.post(server.url + "/v1/models/default/up2/versions", headers=auth, json={
        "source": "upload:x", "files": [{"path": "a.bin", "size": 1, "sha256": "1" * 64}]})
    assert r.status_code == 422 and "not uploaded" in r.json()["detail"]


def test_local_presigned_blob_url_serves_ranges_and_refuses_tampering(server, tmp_path):
    import datetime as dt
    import hashlib

    from registry.settings import Settings
    from registry.storage import open_blob_store

    data = bytes(range(256)) * 1000
    digest = hashlib.sha256(data).hexdigest()
    auth = {"Authorization": f"Bearer {server.admin_token}"}
    assert httpx.put(server.url + f"/v1/blobs/sha256/{digest}", params={"tenant": "default"}, content=data,
                     headers=auth).status_code == 201
    # The server's own store signs the URL, with the secret it keeps in its data directory.
    from pydantic import SecretStr

    secret = (server.data_dir / "presign-secret").read_text().strip()
    store = open_blob_store((server.data_dir / "blobs").resolve().as_uri(),
                            Settings(presign_secret=SecretStr(secret), public_url=server.url))
    url = store.presign_get(digest, dt.timedelta(minutes=5))
    full = httpx.get(url)
    assert full.status_code == 200 and full.content == data and full.headers["etag"] == f'"{digest}"'
    part = httpx.get(url, headers={"Range": "bytes=1000-1999"})
    assert part.status_code == 206 and part.content == data[1000:2000]
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(data)}"
    tail = httpx.get(url, headers={"Range": "bytes=-10"})
    assert tail.content == data[-10:]
    assert httpx.get(url, headers={"Range": f"bytes={len(data)}-"}).status_code == 416
    tampered = url.replace("signature=", "signature=0")
    r = httpx.get(tampered)
    assert r.status_code == 403 and r.json()["type"].endswith("/bad-presigned-url")
    assert httpx.get(url.split("?")[0]).status_code == 403
    expired = store.presign_get(digest, dt.timedelta(seconds=-1))
    assert httpx.get(expired).status_code == 403


def test_rescan_cli(server, hub):
    server.cli("submit", "hf://org/tiny", "--model", "default/tiny", "--hf-endpoint", hub.url, "--wait",
               check=True, timeout=300)
    r = server.cli("rescan")
    assert r.returncode == 1 and "--all" in r.stderr
    result = json.loads(server.cli("rescan", "--all", "--json", check=True).stdout)
    # Everything stored was scanned by this scanner version already: nothing to queue.
    assert result["queued"] == 0 and result["scanner"] == "modelreg"
    server.cli("principal", "create", "nobody", check=True)
    token = server.cli("principal", "token", "nobody", check=True).stdout.strip()
    denied = server.cli("rescan", "--all", token=token)
    assert denied.returncode == 1 and "permission-denied" in denied.stderr


def test_audit_events_by_tenant_for_auditors(server):
    server.cli("tenant", "create", "audited", check=True)
    server.cli("principal", "create", "auditor1", check=True)
    server.cli("principal", "grant", "auditor1", "--tenant", "audited", "--role", "auditor", check=True)
    token = server.cli("principal", "token", "auditor1", check=True).stdout.strip()
    auditor = {"Authorization": f"Bearer {token}"}
    events = httpx.get(server.url + "/v1/audit/events", params={"tenant": "audited"}, headers=auditor).json()
    assert {e["tenant"] for e in events} == {"audited"}
    assert {"tenant.created", "role.granted"} <= {e["action"] for e in events}
    # Each event carries its link in the chain.
    everything = httpx.get(server.url + "/v1/audit/events", params={"limit": 1000},
                           headers={"Authorization": f"Bearer {server.admin_token}"}).json()
    assert all(b["prev_hash"] == a["hash"] for a, b in zip(everything, everything[1:]))
    after = events[0]["id"]
    later = httpx.get(server.url + "/v1/audit/events", params={"tenant": "audited", "after": after},
                      headers=auditor).json()
    assert [e["id"] for e in later] == [e["id"] for e in events[1:]]
    assert httpx.get(server.url + "/v1/audit/events", headers=auditor).status_code == 403
    assert httpx.get(server.url + "/v1/audit/events", params={"tenant": "default"}, headers=auditor).status_code == 403
