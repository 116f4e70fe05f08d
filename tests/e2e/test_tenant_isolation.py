"""Tenant isolation of every read path that names bytes, and fast paths whose state changed underneath.

``CROSS_TENANT`` holds one probe per route whose path or query takes a revision, a ref, a commit, a
digest or a ``for_tenant``; ``test_every_route_naming_a_revision_digest_or_tenant_has_a_probe`` reads the
app's routes, so a new such route without a probe fails. Each probe asks, as a principal of one tenant,
with the identifier of the other (globex's commit under acme's model, acme's digest as globex, a
release for globex of acme's model) and asserts the refusal, or that the answer is the one a name
nobody holds gets.

The world, made through the services: ``acme/llm`` versions 1-3 approved (``prod`` -> 1) and
``globex/llm`` version 1 approved (``prod`` -> 1), from different files; a node, an auditor and a
submitter in each tenant.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.app import create_app
from registry.db.models import Blob
from registry.domain.aliases import make_target
from registry.services import aliases, gc, hf, loaders, retention, revocations
from tests.support.console import sign_in
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

A, B, M = "acme", "globex", "llm"
NAMING = frozenset({"revision", "ref", "reference", "commit", "digest", "sha256", "for_tenant"})
"""Parameters that pick bytes or the tenant they are served for: a route taking one needs a probe."""
NEVER = hashlib.sha256(b"bytes nobody holds").hexdigest()


@dataclass
class World:
    client: TestClient
    container: Any
    admin: Any
    tokens: dict[str, str]
    commits: dict[tuple[str, int], str] = field(default_factory=dict)
    files: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)
    """Path -> sha256 of each version."""

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, who: str, path: str, **kwargs: Any):
        return self.client.get(path, headers=self.auth(who), **kwargs)

    def only(self, tenant: str) -> str:
        """A digest of the tenant's version 1 that no version of the other tenant holds."""
        other = {d for (t, _), fs in self.files.items() if t != tenant for d in fs.values()}
        return next(d for _, d in sorted(self.files[(tenant, 1)].items()) if d not in other)

    def manifest(self, who: str, tenant: str, ref: str, etag: str | None = None, **params: str):
        headers = {**self.auth(who), **({"If-None-Match": etag} if etag else {})}
        return self.client.get(f"/v1/models/{tenant}/{M}/manifest", params={"ref": ref, **params}, headers=headers)


def build_world(container, root):
    admin = make_admin(container, A)
    make_admin(container, B)
    for tenant, seeds in ((A, (1, 2, 3)), (B, (7,))):
        for seed in seeds:
            number = awaiting_version(container, admin, root / f"{tenant}-{seed}", tenant, M,
                                      files={**tiny_model_files(seed), "extra/notes.txt": b"seed %d" % seed})
            approve_standin(container, tenant, M, number)
        with container.session_factory() as session:
            aliases.promote(session, admin, tenant, M, "prod", make_target(1), policy=container.policy,
                            clock=container.clock)
    tokens = {}
    for tenant in (A, B):
        for role in ("node", "auditor", "submitter"):
            tokens[f"{tenant}-{role}"] = role_token(container, f"{tenant}-{role}", tenant, role)
    commits, files = {}, {}
    with container.session_factory() as session:
        for tenant, numbers in ((A, (1, 2, 3)), (B, (1,))):
            model = loaders.load_model_unchecked(session, tenant, M)
            for n in numbers:
                v = loaders.load_version_unchecked(session, model, n)
                commits[(tenant, n)] = hf.commit_of(v)
                files[(tenant, n)] = {f.path: f.sha256 for f in v.files}
    return admin, tokens, commits, files


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(container, seeded):
    admin, tokens, commits, files = seeded
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        w = World(client, container, admin, tokens)
        w.commits.update(commits)
        w.files.update(files)
        yield w


def _problem(r, status: int, type_: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == f"https://modelreg.dev/problems/{type_}", r.text[:300]


# --- the probes ---------------------------------------------------------------------------------


def _hf_path(template: str, tenant: str, revision: str) -> str:
    return (template.replace("{tenant}", tenant).replace("{name}", M).replace("{revision}", revision)
            .replace("{path:path}", "extra" if "/tree/" in template else "config.json"))


def hf_probe(method: str, template: str) -> Callable[[World], None]:
    """acme's node names globex's commit under acme's model: no such revision (the commit is looked up
    in the model asked for, never across models); and globex's own commit under globex is refused."""

    def probe(w: World) -> None:
        kwargs = {"data": {"paths": ["config.json"]}} if method == "POST" else {}
        own = w.client.request(method, _hf_path(template, A, w.commits[(A, 1)]), headers=w.auth(f"{A}-node"),
                               **kwargs)
        assert own.status_code == 200, own.text[:300]
        other = w.client.request(method, _hf_path(template, A, w.commits[(B, 1)]), headers=w.auth(f"{A}-node"),
                                 **kwargs)
        assert other.status_code == 404 and other.headers.get("X-Error-Code") == "RevisionNotFound", other.text
        foreign = w.client.request(method, _hf_path(template, B, w.commits[(B, 1)]),
                                   headers=w.auth(f"{A}-node"), **kwargs)
        assert foreign.status_code == 403

    return probe


def manifest_probe(w: World) -> None:
    """globex's node asks for acme's release served for globex: its role in globex is no role in acme."""
    assert w.manifest(f"{A}-node", A, "prod", for_tenant=B).status_code == 200
    for ref in ("prod", "1"):
        _problem(w.manifest(f"{B}-node", A, ref, for_tenant=B), 403, "permission-denied")
    _problem(w.manifest(f"{A}-node", A, "prod", for_tenant="nosuchtenant"), 404, "tenant-not-found")


def resolve_probe(w: World) -> None:
    path = f"/v1/models/{A}/{M}/aliases/prod/resolve"
    assert w.get(f"{A}-node", path, params={"for_tenant": B}).status_code == 200
    _problem(w.get(f"{B}-node", path, params={"for_tenant": B}), 403, "permission-denied")
    _problem(w.get(f"{A}-node", path, params={"for_tenant": "nosuchtenant"}), 404, "tenant-not-found")


def provenance_ref_probe(template: str) -> Callable[[World], None]:
    def probe(w: World) -> None:
        path = template.replace("{tenant}", A).replace("{name}", M)
        assert w.get(f"{A}-auditor", path, params={"ref": "1"}).status_code == 200
        _problem(w.get(f"{B}-auditor", path, params={"ref": "1"}), 403, "permission-denied")

    return probe


def provenance_blob_probe(w: World) -> None:
    """globex's auditor asks about a blob only acme holds: the answer of a digest nobody holds."""
    acme_only = w.only(A)
    assert w.get(f"{A}-auditor", f"/v1/provenance/blobs/sha256:{acme_only}").json()["versions"]
    held = w.get(f"{B}-auditor", f"/v1/provenance/blobs/sha256:{acme_only}")
    never = w.get(f"{B}-auditor", f"/v1/provenance/blobs/sha256:{NEVER}")
    assert held.status_code == never.status_code == 200
    assert held.text.replace(acme_only, "<d>") == never.text.replace(NEVER, "<d>")


def provenance_component_probe(w: World) -> None:
    """globex's auditor asks which versions hold a component only acme has: the answer of a digest nobody holds."""
    def digests(tenant: str) -> dict[str, str]:
        r = w.get(f"{tenant}-auditor", f"/v1/provenance/{tenant}/{M}/components", params={"ref": "1"})
        assert r.status_code == 200, r.text
        return {c["name"]: c["digest"] for c in r.json()["components"]}

    theirs = set(digests(B).values())
    acme_only = next(d for _, d in sorted(digests(A).items()) if d not in theirs)
    assert w.get(f"{A}-auditor", f"/v1/provenance/components/sha256:{acme_only}").json()["versions"]
    held = w.get(f"{B}-auditor", f"/v1/provenance/components/sha256:{acme_only}")
    never = w.get(f"{B}-auditor", f"/v1/provenance/components/sha256:{NEVER}")
    assert held.status_code == never.status_code == 404
    assert held.text.replace(acme_only, "<d>") == never.text.replace(NEVER, "<d>")


def provenance_adapter_base_probe(w: World) -> None:
    """Which base an adapter ran on: acme's auditor is told acme's model is no adapter; globex's, nothing."""
    path = f"/v1/provenance/{A}/{M}/adapter-base"
    _problem(w.get(f"{A}-auditor", path, params={"ref": "1"}), 409, "not-an-adapter")
    _problem(w.get(f"{B}-auditor", path, params={"ref": "1"}), 403, "permission-denied")


def provenance_adapters_probe(w: World) -> None:
    """globex's auditor asks which adapters are bound to weights only acme has: the answer of weights nobody has
    (who binds adapters to them is tested with adapters, tests/integration/test_adapter_provenance.py)."""
    r = w.get(f"{A}-auditor", f"/v1/provenance/{A}/{M}/components", params={"ref": "1"})
    assert r.status_code == 200, r.text
    weights = next(c["digest"] for c in r.json()["components"] if c["name"] == "weights").removeprefix("sha256:")
    assert w.get(f"{A}-auditor", f"/v1/provenance/adapters/sha256:{weights}").status_code == 200
    held = w.get(f"{B}-auditor", f"/v1/provenance/adapters/sha256:{weights}")
    never = w.get(f"{B}-auditor", f"/v1/provenance/adapters/sha256:{NEVER}")
    assert held.status_code == never.status_code == 200
    assert held.text.replace(weights, "<d>") == never.text.replace(NEVER, "<d>")


def console_provenance_probe(w: World) -> None:
    acme_only = w.only(A)
    assert sign_in(w.client, w.tokens[f"{B}-auditor"]).status_code == 303
    held = w.client.get("/ui/provenance", params={"digest": acme_only})
    never = w.client.get("/ui/provenance", params={"digest": NEVER})
    w.client.cookies.clear()
    assert held.status_code == never.status_code == 200
    assert held.text.replace(acme_only, "<d>") == never.text.replace(NEVER, "<d>")


def blob_head_probe(w: World) -> None:
    acme_only = w.only(A)
    path = "/v1/blobs/sha256/{}"
    assert w.client.head(path.format(acme_only), params={"tenant": A}, headers=w.auth(f"{A}-submitter")) \
        .status_code == 200
    held = w.client.head(path.format(acme_only), params={"tenant": B}, headers=w.auth(f"{B}-submitter"))
    never = w.client.head(path.format(NEVER), params={"tenant": B}, headers=w.auth(f"{B}-submitter"))
    assert held.status_code == never.status_code == 404
    # Every header the same but the request's own id.
    same = lambda r: {k: v for k, v in r.headers.items() if k != "x-request-id"}  # noqa: E731
    assert same(held) == same(never)


def blob_put_probe(w: World) -> None:
    acme_only = w.only(A)

    def put(digest: str):
        r = w.client.put(f"/v1/blobs/sha256/{digest}", params={"tenant": B}, headers=w.auth(f"{B}-submitter"),
                         content=b"a guess")
        return r.status_code, r.text.replace(digest, "<d>")

    held, never = put(acme_only), put(NEVER)
    assert held == never and held[0] == 422 and "digest-mismatch" in held[1]


def blob_get_probe(w: World) -> None:
    """A presigned URL opens the blob it was signed for, never another tenant's under the same signature."""
    body = w.manifest(f"{B}-node", B, "prod").json()
    url = next(iter(body["transport"].values()))
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query))
    assert w.client.get(parts.path, params=params).status_code == 200
    other = re.sub(r"[0-9a-f]{64}$", w.only(A), parts.path)
    _problem(w.client.get(other, params=params), 403, "bad-presigned-url")


def chunk_list_probe(w: World) -> None:
    """globex's node asks for the chunk list of a file only acme holds: through acme's model it is refused;
    through its own version it gets the answer of a digest nobody holds."""
    acme_only = w.only(A)
    path = "/v1/models/{}/{}/versions/1/chunks/{}"
    own = w.get(f"{A}-node", path.format(A, M, acme_only))
    assert own.status_code == 200 and len(own.content) % 32 == 0 and own.content, own.text[:300]
    _problem(w.get(f"{B}-node", path.format(A, M, acme_only)), 403, "permission-denied")
    held, never = w.get(f"{B}-node", path.format(B, M, acme_only)), w.get(f"{B}-node", path.format(B, M, NEVER))
    _problem(held, 404, "blob-not-found")
    assert held.text.replace(acme_only, "<d>") == never.text.replace(NEVER, "<d>")


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _oci_error(r, status: int, code: str) -> None:
    assert r.status_code == status, (r.status_code, r.text[:300])
    if r.request.method != "HEAD":
        assert [e["code"] for e in r.json()["errors"]] == [code], r.text[:300]


def oci_manifest_probe(method: str) -> Callable[[World], None]:
    """globex's node pulls acme's manifest (by tag and digest, and its signature and referrers-index tags) and
    acme's digest under its own repository: each the answer of a repository or digest nobody holds."""
    def probe(w: World) -> None:
        def ask(who: str, tenant: str, name: str, ref: str):
            return w.client.request(method, f"/v2/{tenant}/{name}/manifests/{ref}",
                                    headers={**w.auth(who), "Accept": OCI_MANIFEST})

        own = ask(f"{A}-node", A, M, "prod")
        assert own.status_code == 200, own.text[:300]
        digest = own.headers["Docker-Content-Digest"]
        hexdigest = digest.removeprefix("sha256:")
        # The digest, cosign's signature tag and the referrers tag schema's index tag of acme's manifest.
        forms = ("sha256:{}", "sha256-{}.sig", "sha256-{}")
        for ref in ("prod", *(form.format(hexdigest) for form in forms)):
            held, nobody = ask(f"{B}-node", A, M, ref), ask(f"{B}-node", A, "nobody-has-this", ref)
            _oci_error(held, 403, "DENIED")
            assert (held.status_code, held.content) == (nobody.status_code, nobody.content)
        for form in forms:
            held = ask(f"{B}-node", B, M, form.format(hexdigest))
            never = ask(f"{B}-node", B, M, form.format(NEVER))
            _oci_error(held, 404, "MANIFEST_UNKNOWN")
            assert held.content.replace(hexdigest.encode(), b"<d>") == never.content.replace(NEVER.encode(), b"<d>")

    return probe


def oci_blob_probe(method: str) -> Callable[[World], None]:
    """A blob only acme's versions hold, asked through globex's repository: the answer of bytes nobody holds."""
    def probe(w: World) -> None:
        acme_only = w.only(A)
        path = "/v2/{}/{}/blobs/sha256:{}"
        assert w.client.request(method, path.format(A, M, acme_only), headers=w.auth(f"{A}-node")).status_code == 200
        held = w.client.request(method, path.format(B, M, acme_only), headers=w.auth(f"{B}-node"))
        never = w.client.request(method, path.format(B, M, NEVER), headers=w.auth(f"{B}-node"))
        _oci_error(held, 404, "BLOB_UNKNOWN")
        assert held.content.replace(acme_only.encode(), b"<d>") == never.content.replace(NEVER.encode(), b"<d>")
        _oci_error(w.client.request(method, path.format(A, M, acme_only), headers=w.auth(f"{B}-node")), 403,
                   "DENIED")

    return probe


def oci_referrers_probe(w: World) -> None:
    """globex's node asks for the referrers of acme's manifest, under acme's repository and under its own:
    denied as for a repository nobody has, and an empty index as for a digest nobody has."""
    def ask(tenant: str, name: str, digest: str):
        return w.client.get(f"/v2/{tenant}/{name}/referrers/{digest}", headers=w.auth(f"{B}-node"))

    digest = w.client.head(f"/v2/{A}/{M}/manifests/prod", headers=w.auth(f"{A}-node")).headers["Docker-Content-Digest"]
    own = w.client.get(f"/v2/{A}/{M}/referrers/{digest}", headers=w.auth(f"{A}-node"))
    assert own.status_code == 200 and own.json()["manifests"], own.text[:300]
    held, nobody = ask(A, M, digest), ask(A, "nobody-has-this", digest)
    _oci_error(held, 403, "DENIED")
    assert (held.status_code, held.content) == (nobody.status_code, nobody.content)
    held, never = ask(B, M, digest), ask(B, M, f"sha256:{NEVER}")
    assert held.status_code == 200 and held.content == never.content and held.json()["manifests"] == []
    # Nor is one of acme's referrers a manifest of globex's repository.
    referrer = own.json()["manifests"][0]["digest"]
    r = w.client.get(f"/v2/{B}/{M}/manifests/{referrer}", headers=w.auth(f"{B}-node"))
    _oci_error(r, 404, "MANIFEST_UNKNOWN")


CROSS_TENANT: dict[tuple[str, str], Callable[[World], None]] = {
    ("GET", "/v1/blobs/sha256/{digest}"): blob_get_probe,
    ("HEAD", "/v1/blobs/sha256/{digest}"): blob_head_probe,
    ("PUT", "/v1/blobs/sha256/{digest}"): blob_put_probe,
    ("GET", "/v1/models/{tenant}/{name}/aliases/{alias}/resolve"): resolve_probe,
    ("GET", "/v1/models/{tenant}/{name}/manifest"): manifest_probe,
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/chunks/{digest}"): chunk_list_probe,
    **{(method, path): hf_probe(method, path) for method, path in (
        ("GET", "/hf/api/models/{tenant}/{name}/revision/{revision}"),
        ("GET", "/hf/api/models/{tenant}/{name}/tree/{revision}"),
        ("GET", "/hf/api/models/{tenant}/{name}/tree/{revision}/{path:path}"),
        ("POST", "/hf/api/models/{tenant}/{name}/paths-info/{revision}"),
        ("HEAD", "/hf/{tenant}/{name}/resolve/{revision}/{path:path}"),
        ("GET", "/hf/{tenant}/{name}/resolve/{revision}/{path:path}"),
    )},
    **{("GET", f"/v1/provenance/{{tenant}}/{{name}}/{q}"):
       provenance_ref_probe(f"/v1/provenance/{{tenant}}/{{name}}/{q}")
       for q in ("origin", "files", "scans", "evals", "license", "approvals", "nodes", "components", "running")},
    ("GET", "/v1/provenance/blobs/sha256:{digest}"): provenance_blob_probe,
    ("GET", "/v1/provenance/components/sha256:{digest}"): provenance_component_probe,
    ("GET", "/v1/provenance/{tenant}/{name}/adapter-base"): provenance_adapter_base_probe,
    ("GET", "/v1/provenance/adapters/sha256:{digest}"): provenance_adapters_probe,
    ("GET", "/ui/provenance"): console_provenance_probe,
    **{(method, "/v2/{tenant}/{name}/manifests/{reference}"): oci_manifest_probe(method) for method in ("GET", "HEAD")},
    **{(method, "/v2/{tenant}/{name}/blobs/{digest}"): oci_blob_probe(method) for method in ("GET", "HEAD")},
    ("GET", "/v2/{tenant}/{name}/referrers/{digest}"): oci_referrers_probe,
}


def naming_routes(app) -> set[tuple[str, str]]:
    """Every (method, path template) whose path or query (dependencies included) takes a NAMING parameter."""
    def names(dependant) -> set[str]:
        found = {p.name for p in dependant.path_params + dependant.query_params}
        for dep in dependant.dependencies:
            found |= names(dep)
        return found

    keys = set()
    for entry in app.routes:
        if hasattr(entry, "effective_route_contexts"):
            routes = [(c.original_route, c.path) for c in entry.effective_route_contexts()]
        else:
            routes = [(entry, getattr(entry, "path", ""))]
        for route, path in routes:
            if isinstance(route, APIRoute) and names(route.dependant) & NAMING:
                keys |= {(method, path) for method in route.methods}
    return keys


def test_every_route_naming_a_revision_digest_or_tenant_has_a_probe(container):
    routes = naming_routes(create_app(container))
    assert sorted(routes - CROSS_TENANT.keys()) == [], "add a cross-tenant probe for each new route"
    assert sorted(CROSS_TENANT.keys() - routes) == [], "a probe for a route that no longer exists"


def test_cross_tenant(world):
    """Every probe, in one world (building it is the slow part); each failure is named."""
    failed = {}
    for route, probe in sorted(CROSS_TENANT.items()):
        try:
            probe(world)
        except AssertionError as e:
            failed[route] = str(e)[:400]
    assert failed == {}


def test_receipts_are_taken_only_for_the_reporters_tenants(world):
    """``POST /v1/receipts`` names its models in the body (no naming route parameter): globex's node may not say
    it holds acme's version, and learns nothing of what acme has (a model acme has, one nobody has: the same)."""
    def report(who: str, model: str, version: int = 1):
        return world.client.post("/v1/receipts", headers=world.auth(who), json={
            "program": "fetch", "node": "n1", "places": [
                {"model": model, "version": version, "where": "path", "path": "/srv/m"}]})

    assert report(f"{A}-node", f"{A}/{M}").status_code == 200
    held, nobody = report(f"{B}-node", f"{A}/{M}"), report(f"{B}-node", f"{A}/nobody-has-this", 99)
    _problem(held, 403, "permission-denied")
    assert (held.status_code, held.json()["detail"]) == (nobody.status_code, nobody.json()["detail"])
    _problem(report(f"{A}-auditor", f"{A}/{M}"), 403, "permission-denied")  # auditors read, nodes report
    running = world.get(f"{A}-auditor", f"/v1/provenance/{A}/{M}/running", params={"ref": "1"}).json()
    assert [p["principal"] for p in running["places"]] == [f"{A}-node"]


# --- fast paths whose state changed underneath ---------------------------------------------------


def test_a_manifest_etag_is_not_answered_after_the_version_is_revoked(world):
    etags = {}
    for ref in ("prod", "1"):
        first = world.manifest(f"{A}-node", A, ref)
        assert first.status_code == 200
        etags[ref] = first.headers["ETag"]
        assert world.manifest(f"{A}-node", A, ref, etag=etags[ref]).status_code == 304
    with world.container.session_factory() as session:
        revocations.revoke(session, world.admin, A, M, 1, "unsafe", clock=world.container.clock)
    for ref, etag in etags.items():
        _problem(world.manifest(f"{A}-node", A, ref, etag=etag), 409, "revoked")


def _delete_version_2(w: World) -> None:
    """Retention keeps the newest (3) and the aliased (1): version 2 goes."""
    with w.container.session_factory() as session:
        retention.set_rule(session, w.admin, A, M, keep_last=1, approved_within_days=None, clock=w.container.clock)
    with w.container.session_factory() as session:
        assert retention.apply(session, w.admin, A, M, clock=w.container.clock).delete == [2]


def test_a_deleted_version_is_gone_from_hf_manifests_and_its_state_before_and_after_gc(world):
    w = world
    node = f"{A}-node"
    by_number = f"/hf/{A}/{M}/resolve/2/config.json"
    by_commit = f"/hf/{A}/{M}/resolve/{w.commits[(A, 2)]}/config.json"
    info = f"/hf/api/models/{A}/{M}/revision/2"
    manifest = w.manifest(node, A, "2")
    assert manifest.status_code == 200
    for path in (by_number, by_commit):
        assert w.client.head(path, headers=w.auth(node)).status_code == 200
        assert w.get(node, path).status_code == 200
    _delete_version_2(w)

    def gone() -> None:
        for path in (by_number, by_commit, info):
            for method in ("HEAD", "GET") if "/resolve/" in path else ("GET",):
                r = w.client.request(method, path, headers=w.auth(node))
                assert r.status_code == 404 and r.headers["X-Error-Code"] == "RevisionNotFound", (method, path)
        # The node's ETag fast path answers no 304 for a version that is gone.
        _problem(w.manifest(node, A, "2", etag=manifest.headers["ETag"]), 409, "version-deleted")
        assert w.get(f"{A}-auditor", f"/v1/models/{A}/{M}/versions/2").json()["state"] == "deleted"
        listed = {v["version"]: v["state"] for v in w.get(f"{A}-auditor", f"/v1/models/{A}/{M}/versions").json()}
        assert listed == {1: "approved", 2: "deleted", 3: "approved"}
        # The console says so too, on the version's page and in the model's list.
        console = TestClient(w.client.app)
        assert sign_in(console, w.tokens[f"{A}-auditor"]).status_code == 303
        page = console.get(f"/ui/models/{A}/{M}/versions/2").text
        assert '<span class="state state-deleted" id="state">deleted</span>' in page, page[:2000]
        assert "state-deleted" in console.get(f"/ui/models/{A}/{M}").text

    gone()
    # Garbage collection takes the bytes only version 2 held; every answer stays the same.
    with w.container.session_factory() as session:
        then = w.container.clock.now() - dt.timedelta(days=2)
        session.execute(update(Blob).values(last_used_at=then, created_at=then))
        session.commit()
    report = gc.collect(w.container.session_factory, w.container.blob_store, w.container.clock,
                        dt.timedelta(hours=1))
    assert report.deleted
    gone()
    # What the other versions hold is still served.
    assert w.get(node, f"/hf/{A}/{M}/resolve/3/config.json").status_code == 200
