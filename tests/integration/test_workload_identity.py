"""Serving nodes authenticated by Kubernetes projected service-account tokens, through the real API.

A real issuer (``tests/support/kube_issuer.py``: discovery and JWKS on loopback, keys made here) mints
tokens shaped as the kube-apiserver mints them; the registry trusts it by discovery. Every refusal the
issue lists has its own test and its own ``reason`` under the problem type ``workload-token-rejected``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import oras.client
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from registry.auth import issue_token
from registry.bootstrap import bootstrap
from registry.cli import main as cli_main
from registry.client.api import RegistryApi
from registry.client.token_file import TokenFile
from registry.db.models import AuditEvent, Principal
from registry.settings import WorkloadIssuer
from registry.workload_identity import JwksCache
from tests.support.kube_issuer import IssuerKey, KubeIssuer
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

T, M = "acme", "llm"
REJECTED = "https://modelreg.dev/problems/workload-token-rejected"
MANIFEST = f"/v1/models/{T}/{M}/manifest"


@pytest.fixture
def issuer():
    with KubeIssuer() as running:
        yield running


@pytest.fixture
def world(settings, issuer, tmp_path):
    """acme/llm@1 approved and promoted to prod; the registry trusts ``issuer`` (by discovery); an admin token."""
    yield from _world(settings, [issuer], tmp_path)


@pytest.fixture
def two_clusters(settings, tmp_path):
    """Two trusted issuers on one host, told apart by their paths (as EKS's clusters are); the world above."""
    with KubeIssuer(path="/id/CLUSTERA") as a:
        b = a.sibling("/id/CLUSTERB")
        for client, container, admin in _world(settings, [a, b], tmp_path):
            yield client, container, admin, a, b


def _world(settings, issuers, tmp_path):
    container = bootstrap(settings.model_copy(update={
        "workload_issuers": [WorkloadIssuer(issuer=i.url, audience="modelreg") for i in issuers],
        "workload_jwks_refresh_seconds": 0.3}))
    admin = make_admin(container, T)
    awaiting_version(container, admin, tmp_path / "v1", T, M, seed=1)
    approve_standin(container, T, M, 1)
    from registry.domain.aliases import make_target
    from registry.services import aliases

    with container.session_factory() as session:
        aliases.promote(session, admin, T, M, "prod", make_target(1, None, ()), policy=container.policy,
                        clock=container.clock)
    with container.session_factory() as session:
        admin_token = issue_token(session, session.get(Principal, admin.id)).token
        session.commit()
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, container, {"Authorization": f"Bearer {admin_token}"}
    container.dispose()


def bind(client, admin_headers, issuer, namespace="serving", service_account="fetcher", tenant=T):
    r = client.post("/v1/node-bindings", headers=admin_headers, json={
        "issuer": issuer.url, "namespace": namespace, "service_account": service_account, "tenant": tenant})
    assert r.status_code == 201, r.text
    return r.json()


def manifest(client, token):
    return client.get(MANIFEST, headers={"Authorization": f"Bearer {token}"}, params={"ref": "prod"})


def refused(response, reason):
    assert response.status_code == 401, response.text[:300]
    body = response.json()
    assert body["type"] == REJECTED, body
    assert body["reason"] == reason, body
    return body


# --- accepted ---------------------------------------------------------------------------------------


def test_a_bound_service_account_fetches_as_its_node_principal_and_nothing_more(world, issuer):
    client, _, admin = world
    bound = bind(client, admin, issuer)
    host = issuer.url.split("://", 1)[1]
    assert bound["principal"] == f"sa:serving/fetcher@{host}"
    token = issuer.mint()
    assert manifest(client, token).status_code == 200
    me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).json()
    assert me == {"name": f"sa:serving/fetcher@{host}", "is_admin": False,
                  "roles": {T: [{"role": "node", "capacity": ""}]}}
    # The node role only: it reads no models and administers nothing.
    assert client.get(f"/v1/models/{T}/{M}/versions", headers={"Authorization": f"Bearer {token}"}).status_code == 403
    assert client.get("/v1/tenants", headers={"Authorization": f"Bearer {token}"}).status_code == 403


def test_provenance_nodes_names_the_node_by_its_service_account(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    assert manifest(client, issuer.mint()).status_code == 200
    doc = client.get(f"/v1/provenance/{T}/{M}/nodes", headers=admin, params={"ref": "1"})
    assert doc.status_code == 200, doc.text
    names = [n["principal"] for n in doc.json()["nodes"]]
    assert names == [f"sa:serving/fetcher@{issuer.url.split('://', 1)[1]}"]
    # The console's question "what did this node receive" takes the service account's name too.
    from registry.auth import load_principal
    from registry.services import provenance

    with world[1].session_factory() as session:
        auditor = load_principal(session.query(Principal).filter_by(is_admin=True).one())
        received = provenance.fetched_by(session, auditor, T, names[0])
    assert received["node"] == names[0] and [v["version"] for v in received["versions"]] == [1]


def test_an_es256_issuer_key_is_accepted(world, issuer):
    client, _, admin = world
    es = IssuerKey.generate("ES256")
    issuer.keys.append(es)
    bind(client, admin, issuer)
    assert manifest(client, issuer.mint(key=es)).status_code == 200


def test_a_bound_service_account_reads_its_tenants_events_like_a_node_token(world, issuer):
    """The event stream is how nodes learn of revocations: it accepts the projected token as the manifest
    route does, and shows the service account its bound tenants' events only."""
    client, container, admin = world
    make_admin(container, "beta")
    bind(client, admin, issuer)
    r = client.post(f"/v1/models/{T}/{M}/versions/1/revoke", headers=admin, json={"reason": "bad weights"})
    assert r.status_code == 200, r.text
    token = issuer.mint()
    r = client.get("/v1/events", headers={"Authorization": f"Bearer {token}"}, params={"type": "version.revoked"})
    assert r.status_code == 200, r.text
    assert [(e["data"]["tenant"], e["data"]["version"]) for e in r.json()["events"]] == [(T, 1)]
    assert client.get("/v1/events", headers={"Authorization": f"Bearer {token}"},
                      params={"tenant": "beta"}).status_code == 403
    refused(client.get("/v1/events", headers={"Authorization": f"Bearer {issuer.mint(service_account='x')}"}),
            "unbound")


def test_service_accounts_of_two_issuers_on_one_host_are_two_principals(two_clusters):
    """EKS and GKE serve many clusters' issuers from one host: each (issuer, namespace, service account) is
    its own principal, for provenance and for `principal disable`."""
    client, container, admin, a, b = two_clusters
    assert client.post("/v1/tenants", headers=admin, json={"name": "beta"}).status_code == 201
    assert bind(client, admin, a)["principal"] == f"sa:serving/fetcher@{a.url.split('://', 1)[1]}"
    assert bind(client, admin, b, tenant="beta")["principal"] == f"sa:serving/fetcher@{b.url.split('://', 1)[1]}"
    me_a = client.get("/v1/whoami", headers={"Authorization": f"Bearer {a.mint()}"}).json()
    me_b = client.get("/v1/whoami", headers={"Authorization": f"Bearer {b.mint()}"}).json()
    assert me_a["name"].endswith("/id/CLUSTERA") and me_b["name"].endswith("/id/CLUSTERB"), (me_a, me_b)
    assert me_a["roles"] == {T: [{"role": "node", "capacity": ""}]}
    assert me_b["roles"] == {"beta": [{"role": "node", "capacity": ""}]}
    # Disabling cluster A's node (through the API, as `modelreg principal disable` does: the name's slashes
    # percent-encoded) leaves cluster B's alone.
    r = client.post(f"/v1/principals/{quote(me_a['name'], safe='')}/disable", headers=admin)
    assert r.status_code == 200 and r.json()["disabled"] is True, r.text
    refused(manifest(client, a.mint()), "disabled")
    assert client.get("/v1/whoami", headers={"Authorization": f"Bearer {b.mint()}"}).status_code == 200
    assert client.post(f"/v1/principals/{quote(me_a['name'], safe='')}/enable", headers=admin).status_code == 200
    assert manifest(client, a.mint()).status_code == 200
    # A name that is neither a principal's nor a bound service account's is refused as input.
    r = client.post(f"/v1/principals/{quote('sa:Serving/x y@h', safe='')}/disable", headers=admin)
    assert r.status_code == 422 and r.json()["type"].endswith("/invalid-input"), r.text


def test_a_binding_of_one_trusted_issuer_does_not_bind_the_same_service_account_of_another(two_clusters):
    client, _, admin, a, b = two_clusters
    bind(client, admin, a)
    assert manifest(client, a.mint()).status_code == 200
    # Cluster B's serving/fetcher is another workload, whoever named it alike.
    refused(manifest(client, b.mint()), "unbound")


def test_oras_pulls_through_v2_with_a_service_account_token_and_the_pull_token_dies_with_the_binding(
        world, issuer, tmp_path):
    client, _, admin = world
    bind(client, admin, issuer)
    token = issuer.mint()
    with serve_in_thread(client.app) as url:
        host = url.removeprefix("http://")
        # oras-py: 401, then /v2/token with Basic (any user, the service-account token as the password).
        puller = oras.client.OrasClient(hostname=host, insecure=True)
        puller.auth.set_basic_auth("kubelet", token)
        pulled = puller.pull(target=f"{host}/{T}/{M}:prod", outdir=str(tmp_path / "pulled"))
        assert sorted(Path(p).relative_to(tmp_path / "pulled").as_posix() for p in pulled) \
            == sorted(tiny_model_files(1))
        r = httpx.get(f"{url}/v2/token", params={"scope": f"repository:{T}/{M}:pull", "service": host},
                      auth=("", token), timeout=30)
        assert r.status_code == 200, r.text
        pull_token = {"Authorization": f"Bearer {r.json()['token']}"}
        assert httpx.get(f"{url}/v2/{T}/{M}/manifests/prod", headers=pull_token, timeout=30).status_code == 200
        r = client.delete("/v1/node-bindings", headers=admin, params={
            "issuer": issuer.url, "namespace": "serving", "service_account": "fetcher", "tenant": T})
        assert r.status_code == 204, r.text
        r = httpx.get(f"{url}/v2/{T}/{M}/manifests/prod", headers=pull_token, timeout=30)
        assert r.status_code == 401 and r.json()["errors"][0]["code"] == "UNAUTHORIZED", r.text


# --- refused ------------------------------------------------------------------------------------------


def test_wrong_audience_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint(audience=["https://kubernetes.default.svc.cluster.local"])), "audience")


def test_expired_token_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint(issued_at=int(time.time()) - 7200, expires_in=3600)), "expired")


def test_token_not_yet_valid_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint(issued_at=int(time.time()) + 600)), "not-yet-valid")


def test_token_of_a_key_the_issuer_does_not_publish_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    stranger = IssuerKey.generate()
    refused(manifest(client, issuer.mint(key=stranger)), "unknown-key")


def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_interval(world, issuer):
    client, container, admin = world
    container.workload_verifier.caches[issuer.url].refresh_interval = 60.0  # the flood outlasts 0.3 s
    bind(client, admin, issuer)
    assert manifest(client, issuer.mint()).status_code == 200
    before = issuer.jwks_fetches
    stranger = IssuerKey.generate()
    for _ in range(20):
        refused(manifest(client, issuer.mint(key=stranger)), "unknown-key")
    assert issuer.jwks_fetches - before <= 1


def test_rotated_key_is_fetched_on_its_unknown_kid_and_the_retired_key_is_refused(world, issuer):
    client, container, admin = world
    # The key cache on a clock the test moves (JwksCache takes one): the refresh interval passes at once.
    held = container.workload_verifier.caches[issuer.url]
    now = [0.0]
    container.workload_verifier.caches[issuer.url] = JwksCache(held.issuer, refresh_interval=held.refresh_interval,
                                                               monotonic=lambda: now[0])
    bind(client, admin, issuer)
    old = issuer.keys[0]
    old_token = issuer.mint(key=old)
    assert manifest(client, old_token).status_code == 200
    new = IssuerKey.generate()
    issuer.keys = [new]  # the apiserver signs with the new key and publishes only it
    before = issuer.jwks_fetches
    refused(manifest(client, issuer.mint(key=new)), "unknown-key")  # within the interval: not fetched again
    assert issuer.jwks_fetches == before
    now[0] += held.refresh_interval  # past the refresh interval
    assert manifest(client, issuer.mint(key=new)).status_code == 200
    refused(manifest(client, old_token), "unknown-key")


def test_alg_none_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint_unsigned(issuer.claims())), "algorithm")


def test_hs256_keyed_with_the_public_key_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint_hs256_with_public_key(issuer.claims())), "algorithm")


def test_a_tampered_signature_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    head, payload, sig = issuer.mint().split(".")
    claims = issuer.claims(service_account="fetcher")
    claims["kubernetes.io"]["namespace"] = claims["kubernetes.io"]["namespace"]  # same shape, new body
    import base64

    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    refused(manifest(client, f"{head}.{forged}.{sig}"), "signature")


def test_another_issuer_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint(issuer="https://other-cluster.example")), "issuer")


def test_an_unbound_service_account_is_refused(world, issuer):
    client, _, admin = world
    bind(client, admin, issuer)
    refused(manifest(client, issuer.mint(service_account="notebook")), "unbound")
    refused(manifest(client, issuer.mint(namespace="other-team")), "unbound")


def test_a_binding_removed_refuses_a_token_still_valid_at_once(world, issuer):
    client, container, admin = world
    bind(client, admin, issuer)
    token = issuer.mint()
    assert manifest(client, token).status_code == 200
    r = client.delete("/v1/node-bindings", headers=admin, params={
        "issuer": issuer.url, "namespace": "serving", "service_account": "fetcher", "tenant": T})
    assert r.status_code == 204, r.text
    refused(manifest(client, token), "unbound")
    with container.session_factory() as session:
        actions = [a for (a,) in session.query(AuditEvent.action).filter(AuditEvent.action.like("node.%"))]
    assert actions == ["node.bound", "node.unbound"]


def test_a_node_of_one_tenant_gets_nothing_of_another(world, issuer):
    client, _, admin = world
    make_admin(world[1], "beta")
    bind(client, admin, issuer, tenant="beta")
    assert manifest(client, issuer.mint()).status_code == 403


def test_binding_is_for_administrators_and_trusted_issuers_only(world, issuer):
    client, container, admin = world
    node = role_token(container, "plain-node", T, "node")
    body = {"issuer": issuer.url, "namespace": "serving", "service_account": "fetcher", "tenant": T}
    r = client.post("/v1/node-bindings", headers={"Authorization": f"Bearer {node}"}, json=body)
    assert r.status_code == 403, r.text
    r = client.post("/v1/node-bindings", headers=admin, json={**body, "issuer": "https://untrusted.example"})
    assert r.status_code == 422 and r.json()["type"].endswith("/invalid-input"), r.text
    r = client.post("/v1/node-bindings", headers=admin, json={**body, "namespace": "Bad_NS"})
    assert r.status_code == 422, r.text


# --- the CLI and the client ------------------------------------------------------------------------------


def test_cli_node_bind_bindings_unbind(world, issuer, capsys):
    client, _, admin = world
    token = admin["Authorization"].split()[1]
    with serve_in_thread(client.app) as url:
        common = ["--url", url, "--token", token]
        args = ["--issuer", issuer.url, "--namespace", "serving", "--service-account", "fetcher", "--tenant", T]
        assert cli_main(["node", "bind", *args, *common]) == 0
        assert "bound serving/fetcher" in capsys.readouterr().out
        assert cli_main(["node", "bindings", "--json", *common]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(b["namespace"], b["service_account"], b["tenant"]) for b in listed] == [("serving", "fetcher", T)]
        assert cli_main(["node", "unbind", *args, *common]) == 0
        capsys.readouterr()
        assert cli_main(["node", "unbind", *args, *common]) == 1
        assert "no binding" in capsys.readouterr().err


def test_token_file_is_read_again_after_the_kubelet_rotates_it(world, issuer, tmp_path):
    """The kubelet's layout: token -> ..data/token, ..data -> a timestamped directory, swapped atomically."""
    client, _, admin = world
    bind(client, admin, issuer)
    mount = tmp_path / "projected"
    mount.mkdir()

    def project(stamp: str, token: str) -> None:
        (mount / stamp).mkdir()
        (mount / stamp / "token").write_text(token + "\n")
        os.symlink(stamp, mount / "..data_tmp")
        os.replace(mount / "..data_tmp", mount / "..data")

    project("..2026_12_02_01_00_00.1", issuer.mint(service_account="fetcher"))
    os.symlink("..data/token", mount / "token")
    bind(client, admin, issuer, service_account="fetcher-b")
    with serve_in_thread(client.app) as url:
        with RegistryApi(url, TokenFile(mount / "token")) as api:
            assert api.whoami()["name"].startswith("sa:serving/fetcher@")
            project("..2026_12_02_01_48_00.2", issuer.mint(service_account="fetcher-b"))
            assert api.whoami()["name"].startswith("sa:serving/fetcher-b@")


def test_cli_reads_the_token_from_modelreg_token_file(world, issuer, tmp_path, capsys, monkeypatch):
    client, _, admin = world
    bind(client, admin, issuer)
    path = Path(tmp_path / "token")
    path.write_text(issuer.mint() + "\n")
    monkeypatch.setenv("MODELREG_TOKEN_FILE", str(path))
    monkeypatch.delenv("MODELREG_TOKEN", raising=False)
    with serve_in_thread(client.app) as url:
        assert cli_main(["whoami", "--json", "--url", url]) == 0
        assert json.loads(capsys.readouterr().out)["name"].startswith("sa:serving/fetcher@")
        path.unlink()
        assert cli_main(["whoami", "--url", url]) == 1
        assert "cannot read the token file" in capsys.readouterr().err


def test_modelreg_fetch_and_cache_warm_with_the_projected_token_file(world, issuer, tmp_path, capsys):
    """The node's whole path: `modelreg fetch` and `cache warm --once` with --token-file, no registry token."""
    client, _, admin = world
    bind(client, admin, issuer)
    token_file = tmp_path / "token"
    token_file.write_text(issuer.mint() + "\n")
    root = tmp_path / "root.json"
    root.write_text(client.get("/v1/trust-root").text)
    with serve_in_thread(client.app) as url:
        common = ["--url", url, "--token-file", str(token_file), "--trust-root", str(root),
                  "--cache", str(tmp_path / "cache")]
        assert cli_main(["fetch", f"modelreg://{T}/{M}@prod", str(tmp_path / "models"), *common]) == 0, \
            capsys.readouterr().err
        assert (tmp_path / "models" / "config.json").exists()
        assert cli_main(["cache", "warm", "--once", f"{T}/{M}@prod", *common]) == 0, capsys.readouterr().err
        token_file.write_text(issuer.mint(audience=["elsewhere"]))  # rotated to a token for someone else
        assert cli_main(["fetch", f"modelreg://{T}/{M}@prod", str(tmp_path / "again"), *common]) != 0
        assert "not for audience" in capsys.readouterr().err


def test_cache_warm_once_exits_16_and_sets_the_metric_when_the_event_stream_is_refused(world, issuer, tmp_path,
                                                                                      capsys, monkeypatch):
    """A registry that refuses the node's event stream (as one did service-account tokens) while it serves
    its manifests: the warm goes on, but the exit code and the textfile say no revocation was applied."""
    from registry.client.http import RemoteError

    client, _, admin = world
    bind(client, admin, issuer)
    token_file = tmp_path / "token"
    token_file.write_text(issuer.mint() + "\n")
    root = tmp_path / "root.json"
    root.write_text(client.get("/v1/trust-root").text)
    prom = tmp_path / "warm.prom"
    with serve_in_thread(client.app) as url:
        args = ["cache", "warm", "--once", f"{T}/{M}@prod", "--url", url, "--token-file", str(token_file),
                "--trust-root", str(root), "--cache", str(tmp_path / "cache"), "--metrics-textfile", str(prom)]
        assert cli_main(args) == 0, capsys.readouterr().err
        assert "modelreg_cache_events_failing 0.0" in prom.read_text()

        def refused(self, *a, **k):
            raise RemoteError(401, {"type": REJECTED, "title": "refused", "detail": "service-account token refused",
                                    "status": 401})

        monkeypatch.setattr(RegistryApi, "events", refused)
        assert cli_main(args) == 16
        err = capsys.readouterr().err
        assert "no revocation was applied" in err and "service-account token refused" in err, err
        assert "modelreg_cache_events_failing 1.0" in prom.read_text()
