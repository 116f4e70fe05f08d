"""``POST /v1/receipts`` and ``provenance running`` against a real ``modelreg serve``: who may report, how much
and how often; a repeated report changes nothing, a snapshot drops what it no longer lists, a quiet reporter's
places are shown stale (not gone); and a place first reported after a revocation gets its own
``version.still_running`` event.

One server for the module over the seeded ``acme/llm`` (v1, v2 approved; ``tests/support/release_seed.py``),
with a stale period of 3 s and a rate of 60 reports a minute; each test reports from its own node name, so
what one test holds is not another's.
"""

from __future__ import annotations

import json

import httpx
import pytest

from registry.domain.receipts import MAX_PLACES, MAX_REPORT_BYTES
from tests.support.release_seed import MODEL, TENANT, admin_token, revoke, seed_release
from tests.support.server import start_server
from tests.support.waiting import wait_until

RATE = 60


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("receipts") / "data"
    tokens = seed_release(data_dir, 3)
    admin = admin_token(data_dir)
    server = start_server(data_dir, workers=0, extra_env={"MODELREG_RECEIPTS_STALE_AFTER_SECONDS": "3",
                                                          "MODELREG_RECEIPTS_RATE_PER_MINUTE": str(RATE)})
    try:
        server.node_tokens, server.tenant_admin = tokens, admin
        yield server
    finally:
        server.stop()


def _post(server, token: str | None, body: dict | bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if isinstance(body, bytes):
        return httpx.post(f"{server.url}/v1/receipts", content=body, timeout=30,
                          headers={**headers, "Content-Type": "application/json"})
    return httpx.post(f"{server.url}/v1/receipts", json=body, headers=headers, timeout=30)


def _report(node: str, *places: dict, snapshot: bool = False, program: str = "cache-warm") -> dict:
    return {"program": program, "node": node, "scope": "/var/cache/modelreg", "snapshot": snapshot,
            "places": list(places)}


def _path(version: int, path: str, held: bool = True) -> dict:
    return {"model": f"{TENANT}/{MODEL}", "version": version, "where": "path", "path": path, "held": held}


def _running(server, version: int, by: str = "node") -> dict:
    result = server.cli("provenance", "running", f"{TENANT}/{MODEL}@{version}", "--by", by, "--json",
                        token=server.tenant_admin, check=True)
    return json.loads(result.stdout)


def _running_http(server, version: int) -> dict:
    """The same question over HTTP: no CLI start between the report and the answer."""
    answer = httpx.get(f"{server.url}/v1/provenance/{TENANT}/{MODEL}/running", params={"ref": str(version)},
                       headers={"Authorization": f"Bearer {server.tenant_admin}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _mine(doc: dict, node: str) -> list[dict]:
    return [p for p in doc["places"] if p["reporter_node"] == node]


def test_a_repeated_report_changes_nothing_and_a_snapshot_drops_what_it_no_longer_lists(registry):
    token = registry.node_tokens[0]
    first = _post(registry, token, _report("idem-1", _path(1, "/srv/a"), _path(2, "/srv/b")))
    assert first.status_code == 200, first.text
    assert first.json()["recorded"] == 2 and first.json()["rejected"] == []
    before = _mine(_running(registry, 1), "idem-1")
    again = _post(registry, token, _report("idem-1", _path(1, "/srv/a"), _path(2, "/srv/b")))
    assert again.status_code == 200 and again.json()["dropped"] == 0
    after = _mine(_running(registry, 1), "idem-1")
    assert len(after) == 1 and after[0]["since"] == before[0]["since"]
    assert after[0]["place"] == {"where": "path", "node": "idem-1", "path": "/srv/a"}
    # A snapshot listing only v2: v1's place is dropped, and leaves the answer.
    snap = _post(registry, token, _report("idem-1", _path(2, "/srv/b"), snapshot=True))
    assert snap.json()["dropped"] == 1, snap.text
    assert _mine(_running(registry, 1), "idem-1") == []
    assert len(_mine(_running(registry, 2), "idem-1")) == 1
    # A drop names the place; reported held again, it is held since now.
    assert _post(registry, token, _report("idem-1", _path(2, "/srv/b", held=False))).json()["dropped"] == 1
    assert _mine(_running(registry, 2), "idem-1") == []


def test_a_sweep_drops_what_cache_warm_reported_at_the_same_folder(registry):
    token = registry.node_tokens[0]
    _post(registry, token, _report("sweep-1", _path(1, "/cache/models/x")))
    assert len(_mine(_running(registry, 1), "sweep-1")) == 1
    swept = _post(registry, token, _report("sweep-1", _path(1, "/cache/models/x", held=False),
                                           program="cache-sweep"))
    assert swept.json()["dropped"] == 1
    assert _mine(_running(registry, 1), "sweep-1") == []


def test_a_quiet_reporter_is_shown_stale_not_gone(registry):
    _post(registry, registry.node_tokens[0], _report("quiet-1", _path(1, "/srv/q")))
    stale = wait_until(lambda: [p for p in _mine(_running(registry, 1), "quiet-1") if p["stale"]],
                       "the place to turn stale", timeout=30)
    assert stale[0]["place"]["path"] == "/srv/q"
    doc = _running(registry, 1)
    group = next(g for g in doc["groups"] if g["key"] == "quiet-1")
    assert group["stale"] is True
    # Reporting again makes it fresh, with the same since.
    _post(registry, registry.node_tokens[0], _report("quiet-1", _path(1, "/srv/q")))
    fresh = _mine(_running_http(registry, 1), "quiet-1")
    assert fresh[0]["stale"] is False and fresh[0]["since"] == stale[0]["since"]


def test_only_node_identities_report_and_only_for_their_tenants(registry):
    token = registry.node_tokens[0]
    assert _post(registry, None, _report("auth-1", _path(1, "/x"))).status_code == 401
    refused = _post(registry, token, _report("auth-1", {**_path(1, "/x"), "model": "other/llm"}))
    assert refused.status_code == 403, refused.text
    assert refused.json()["type"] == "https://modelreg.dev/problems/permission-denied"
    # One place outside its tenants refuses the whole report: the place of its own tenant is not recorded.
    mixed = _post(registry, token, _report("auth-1", _path(1, "/x"), {**_path(1, "/y"), "model": "other/llm"}))
    assert mixed.status_code == 403
    assert _mine(_running(registry, 1), "auth-1") == []
    # An unknown version of its own tenant is named back, not recorded, and the rest is.
    partial = _post(registry, token, _report("auth-1", _path(1, "/x"), _path(99, "/z")))
    assert partial.status_code == 200
    assert partial.json()["recorded"] == 1
    assert [r["index"] for r in partial.json()["rejected"]] == [1]


@pytest.mark.parametrize(("body", "status", "field"), [
    (_report("bad-1", {**_path(1, "/x"), "where": "moon"}), 422, "places.0.where"),
    (_report("bad-1", {**_path(1, "relative/path")}), 422, "places.0.path"),
    (_report("bad-1", {**_path(1, "/a/../etc")}), 422, "places.0.path"),
    (_report("bad-1", {**_path(1, "/x"), "image_digest": "sha256:" + "0" * 64}), 422, "places.0"),
    ({**_report("bad-1"), "program": "admission"}, 422, "program"),
    ({**_report("bad-1"), "node": "Not A Node"}, 422, "node"),
    ({**_report("bad-1"), "extra": 1}, 422, "extra"),
    (_report("bad-1", *[_path(1, f"/p{i}") for i in range(MAX_PLACES + 1)]), 413, "places"),
])
def test_bad_reports_get_a_problem_naming_the_field(registry, body, status, field):
    answer = _post(registry, registry.node_tokens[0], body)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["field"] == field


def test_a_body_over_the_limit_is_refused_unread(registry):
    answer = _post(registry, registry.node_tokens[0], b"[" + b" " * MAX_REPORT_BYTES + b"]")
    assert answer.status_code == 413
    assert answer.json()["type"] == "https://modelreg.dev/problems/limit-exceeded"
    assert _post(registry, registry.node_tokens[0], b"{not json").status_code == 422


def test_reports_are_bounded_in_rate_per_principal(registry):
    token = registry.node_tokens[2]  # a principal of its own: the other tests' reports do not count
    answers = [_post(registry, token, _report("rate-1", _path(1, "/r"))) for _ in range(RATE + 1)]
    assert [a.status_code for a in answers[:RATE]] == [200] * RATE
    limited = answers[RATE]
    assert limited.status_code == 429, limited.text
    assert limited.json()["type"] == "https://modelreg.dev/problems/receipts-rate-limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    # Another principal is not slowed down by it.
    assert _post(registry, registry.node_tokens[1], _report("rate-2", _path(1, "/r"))).status_code == 200


def test_grouping_by_namespace_and_pod(registry):
    pod = {"model": f"{TENANT}/{MODEL}", "version": 2, "where": "pod", "namespace": "ml", "pod": "llm-0",
           "uid": "6f1c0a9e-0000-4000-8000-000000000001", "volume": "model", "pod_node": "gpu-7"}
    assert _post(registry, registry.node_tokens[1], _report("group-1", pod, program="cluster-watch")).status_code \
        == 200
    by_ns = _running(registry, 2, by="namespace")
    assert any(g["key"] == "ml" and g["places"][0]["place"]["pod"] == "llm-0" for g in by_ns["groups"])
    by_pod = _running(registry, 2, by="pod")
    assert any(g["key"] == "ml/llm-0" for g in by_pod["groups"])
    by_node = _running(registry, 2, by="node")
    assert any(g["key"] == "gpu-7" for g in by_node["groups"])
    text = registry.cli("provenance", "running", f"{TENANT}/{MODEL}@2", "--by", "pod",
                        token=registry.tenant_admin, check=True).stdout
    assert "pod ml/llm-0 volume model: cluster-watch" in text
    bad = registry.cli("provenance", "running", f"{TENANT}/{MODEL}@2", "--by", "zone", token=registry.tenant_admin)
    assert bad.returncode != 0 and "--by" in bad.stderr


def test_a_place_first_reported_after_the_revocation_is_alerted_once(registry):
    token = registry.node_tokens[1]
    revoke(registry.data_dir, 2, "after the fact")

    def still_running() -> list[dict]:
        events = httpx.get(f"{registry.url}/v1/events",
                           params={"tenant": TENANT, "after": 0, "limit": 1000, "type": "version.still_running"},
                           headers={"Authorization": f"Bearer {registry.tenant_admin}"}, timeout=30).json()
        return [e for e in events["events"] if e["type"] == "dev.modelreg.version.still_running"
                and e["data"]["place"].get("path") == "/late"]

    before = len(still_running())
    _post(registry, token, _report("late-1", _path(2, "/late")))
    _post(registry, token, _report("late-1", _path(2, "/late")))  # repeated: no second event
    events = still_running()
    assert len(events) == before + 1
    assert events[-1]["data"]["principal"] and events[-1]["data"]["version"] == 2
    doc = _running(registry, 2)
    assert doc["revocation"]["reason"] == "after the fact"
    listed = registry.cli("provenance", "revoked-nodes", "--tenant", TENANT, "--json", token=registry.tenant_admin,
                          check=True)
    assert any(p["place"].get("path") == "/late" and p["version"] == 2
               for p in json.loads(listed.stdout)["holding"])
