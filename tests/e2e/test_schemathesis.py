"""Contract fuzzing: schemathesis drives a live ``modelreg serve`` on PostgreSQL with every check.

No request, however odd, may get a 5xx, and every answer must be what the OpenAPI document says
(status, content type, headers, body schema). The run is bounded and reproducible: a fixed seed,
a fixed number of examples per operation, no example database carried between runs.

The database holds a tenant with a principal in each role, tokens, a blob and a version that went through
sealing and scanning, and the fuzzer draws tenant, model and version from them half of the time, so
the routes answer with real data (and their response schemas are checked) rather than only 404s.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from registry.auth import issue_token
from registry.bootstrap import bootstrap
from registry.db.models import Principal, RoleBinding, Tenant
from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support.server import start_server

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
SEED = 20261130
MAX_EXAMPLES = 30
TENANT, MODEL = "acme", "tiny"
SEED_FILE = b'{"architectures": ["TinyModel"], "hidden_size": 8}\n'
SEED_DIGEST = hashlib.sha256(SEED_FILE).hexdigest()

# Where a check cannot judge an operation, it is relaxed for that operation only, for the reason given.
# positive_data_acceptance: the body must agree across fields (or with the path) in ways a JSON
# schema does not state, so a schema-valid body may get a 422 problem.
ACCEPTS_422 = "positive_data_acceptance"
RELAXED: dict[tuple[str, str], tuple[str, str]] = {
    ("POST", "/v1/models/{tenant}/{name}/versions"): (ACCEPTS_422, "`files` goes with an upload: source and "
                                                      "only with it; the files must have been uploaded"),
    ("PUT", "/v1/blobs/sha256/{digest}"): (ACCEPTS_422, "the body must hash to the digest in the path"),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/approvals"): (
        ACCEPTS_422, "the caller must be an approver in the capacity the body names (403), not the version's "
                     "submitter (403), and decide once on a version awaiting approval (409); the files it "
                     "names must be the version's (422)"),
    ("POST", "/v1/provenance/audit-log"): (ACCEPTS_422, "each checkpoint must be one the registry signed"),
    **{("GET", f"/v1/provenance/{path}"): (ACCEPTS_422, "a cursor is a next_cursor the registry handed out")
       for path in ("{tenant}/{name}/files", "{tenant}/{name}/scans", "{tenant}/{name}/nodes",
                    "{tenant}/{name}/aliases/{alias}", "revoked-nodes", "blobs/sha256:{digest}")},
    ("DELETE", "/v1/principals/{name}/roles"): (
        "ensure_resource_availability", "its 404 is about the role or tenant named in the body (not held, no "
                                        "such tenant), not about the principal in the path, which exists"),
}


def _config() -> str:
    """schemathesis.toml: the fuzzer's dictionaries of existing names, and the relaxed checks."""
    lines = [
        # Every check (`--checks all` on the command line would override the relaxations below).
        "[checks]\nenabled = true",
        f'[dictionaries.tenants]\nvalues = ["{TENANT}"]',
        f'[dictionaries.models]\nvalues = ["{MODEL}"]',
        "[dictionaries.numbers]\nvalues = [1]",
        f'[dictionaries.digests]\nvalues = ["{SEED_DIGEST}"]',
        '[dictionaries.sources]\nvalues = ["upload:seed", "hf://org/model"]',
        "[parameters]",
        '"path.tenant" = { dictionary = "tenants", probability = 0.5 }',
        '"query.tenant" = { dictionary = "tenants", probability = 0.5 }',
        '"body.tenant" = { dictionary = "tenants", probability = 0.5 }',
        '"path.name" = { dictionary = "models", probability = 0.5 }',
        '"path.number" = { dictionary = "numbers", probability = 0.5 }',
        '"path.digest" = { dictionary = "digests", probability = 0.5 }',
        '"body.files[*].sha256" = { dictionary = "digests", probability = 0.5 }',
        '"body.source" = { dictionary = "sources", probability = 0.5 }',
        # A long poll with nothing to wait for holds its whole `wait` (GET /v1/events, manifests): past the
        # fuzzer's 10 s request timeout. The waits themselves are tested in tests/integration/test_long_polls.py.
        '"query.wait" = 0',
    ]
    for (method, path), (check, _reason) in RELAXED.items():
        lines += ["[[operations]]", f'include-method = "{method}"', f'include-path = "{path}"']
        if check == ACCEPTS_422:
            lines.append(f'checks.{check}.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]')
        else:
            lines.append(f"checks.{check}.enabled = false")
    return "\n".join(lines) + "\n"


def _seed(database_url: str, data_dir: Path) -> str:
    """A tenant, a principal in each role with a token, and an admin token for the fuzzer."""
    container = bootstrap(Settings(database_url=database_url, data_dir=data_dir))
    try:
        with container.session_factory() as session:
            tenant = Tenant(name=TENANT)
            session.add(tenant)
            session.flush()
            for name, role, capacity in (("sam", "submitter", ""), ("sue", "approver", "security"),
                                         ("ada", "auditor", ""), ("nod", "node", "")):
                principal = Principal(name=name)
                session.add(principal)
                session.flush()
                session.add(RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role=role,
                                        capacity=capacity))
                issue_token(session, principal)
            fuzzer = Principal(name="fuzzer", is_admin=True)
            session.add(fuzzer)
            session.flush()
            # DELETE /v1/tokens/{id} is fuzzed too: the fuzzer's own token has an id no generator guesses.
            session.execute(text("ALTER SEQUENCE api_tokens_id_seq RESTART WITH 987654321987"))
            token = issue_token(session, fuzzer, description="schemathesis").token
            session.commit()
    finally:
        container.dispose()
    return token


def _upload_version(url: str, token: str) -> None:
    """Version 1 of acme/tiny, uploaded through the API and left to the server's worker."""
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r = client.put(f"/v1/blobs/sha256/{SEED_DIGEST}", params={"tenant": TENANT}, content=SEED_FILE)
    assert r.status_code in (200, 201), r.text
    r = client.post(f"/v1/models/{TENANT}/{MODEL}/versions", json={
        "source": "upload:seed", "files": [{"path": "config.json", "size": len(SEED_FILE), "sha256": SEED_DIGEST}]})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 60
    while (state := client.get(f"/v1/models/{TENANT}/{MODEL}/versions/1").json()["state"]) in (
            "submitted", "mirroring", "sealed", "scanning", "evaluating"):
        assert time.monotonic() < deadline, f"version 1 still {state}"
        time.sleep(0.05)
    assert state == "awaiting_approval", state


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A real server (one worker thread) on a fresh PostgreSQL database, seeded."""
    database_url = dbsupport.create_pg_database()
    data_dir = tmp_path_factory.mktemp("schemathesis") / "data"
    token = _seed(database_url, data_dir)
    # No hub is reachable and each job runs once: the run never leaves this machine, nor lingers.
    server = start_server(data_dir, workers=1, extra_env={
        "MODELREG_DATABASE_URL": database_url, "MODELREG_HF_ENDPOINT": "http://127.0.0.1:9",
        "MODELREG_JOB_MAX_ATTEMPTS": "1",
        # One principal sends every fuzzed receipt report: the per-principal rate bound (429, its own test in
        # tests/e2e/test_receipts_api.py) would answer most of them before their body is looked at.
        "MODELREG_RECEIPTS_RATE_PER_MINUTE": "100000",
    })
    try:
        _upload_version(server.url, token)
        yield server, token
    finally:
        server.stop()
        dbsupport.drop_pg_database(database_url)


# Every operation is fuzzed, so the run grows with the API: this wave's operations (receipts, admission,
# provenance running) took it past the suite's 300 s on a loaded machine (2026-12-07: 304 s, then cut off).
@pytest.mark.timeout(900)
def test_no_5xx_and_no_schema_violation(live, tmp_path):
    server, token = live
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config())
    args = [
        SCHEMATHESIS, "--config-file", str(config), "run", f"{server.url}/openapi.json",
        "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--generation-database", "none",
        "--workers", "1",
        "--header", f"Authorization: Bearer {token}",
        "--no-color", "--output-truncate", "false",
        "--report", "junit", "--report-dir", str(tmp_path),
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=840, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-30000:] + result.stderr[-5000:]
    print(result.stdout[-4000:])  # the summary, for `pytest -s`: phases, warnings, cases generated
    # Every part of every operation was tested: no schema the fuzzer could not resolve (issue 18).
    assert "Unresolvable references" not in result.stdout, result.stdout[-6000:]
    # Every operation of the document was tested.
    spec = httpx.get(f"{server.url}/openapi.json").json()
    operations = sum(len(item) for item in spec["paths"].values())
    assert f"Tested: {operations}\n" in result.stdout, result.stdout[-3000:]
