"""Who may call what: every route of the app x every caller x own and other tenant, on a live app.

The table and the world of the ``tests/e2e/test_authorization_matrix*.py`` modules; each of them runs the
routes of one family (``FAMILIES``), so no one file is the suite's tail.

The expectations live in one table, ``RULES``, keyed by ``(method, path template)``: a route
without an entry fails ``test_every_route_has_exactly_one_rule`` (``tests/e2e/test_authorization_matrix.py``), so a new
route cannot ship without someone saying who may call it. Adding a route is one line, e.g.::

    ("GET", "/v1/models/{tenant}/{name}/aliases"): Rule("read", 200),

What each role may do is written out here (``ROLE_MAY``), not read from ``registry.auth``, so a
change there that widens a role fails the matrix instead of moving the expectation with it.

The world is real: two tenants with a sealed model version each (made through the services), and
callers holding one role each in tenant ``a``; "other" means tenant ``b``'s real version. The
tokens that must not work (missing, unknown, expired, revoked, of a disabled principal) belong to
administrators, so nothing but the token's state can be what refuses them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.auth import authenticate, issue_token, load_principal
from registry.db.models import EvalResult, Model, Principal, Version, WebhookSubscription
from registry.domain.aliases import make_target
from registry.domain.components import Member, component_digest
from registry.domain.files import FileEntry
from registry.net.egress import EgressPolicy
from registry.services import aliases, approvals, evals, identity, node_bindings, versions
from registry.services import webhooks as webhook_service
from registry.settings import WorkloadIssuer
from tests.support.registry import drain
from tests.support.releases import approve_standin

# --- who may do what (written out, not imported) ----------------------------------------------

PUBLIC = "public"  # no token needed: every caller, even with a bad token, gets the rule's status
AUTHENTICATED = "authenticated"  # any valid token
ADMIN = "admin"  # principals flagged is_admin (not the tenant role "admin")
# Auditors of any tenant (the request names none): the whole log's checkpoints, the chain's check against
# them, and the versions holding a blob (answered from the tenants the caller audits only).
AUDITS_ANY_TENANT = "audits-any-tenant"
READS_ANY_TENANT = "reads-any-tenant"  # readers of any tenant (the request names none): deployment-wide eval sets
# Approvers in the capacity the request names (security), in the tenant: no other role, administrators included.
APPROVER_IN_CAPACITY = "approver-in-capacity"
TENANT_ADMIN = "tenant-admin"  # the tenant role "admin" in the tenant the request names (and sysadmins)
# A tenant's webhook, named by id: its admins manage it; to anyone else it does not exist (404).
TENANT_ADMIN_ELSE_NOT_FOUND = "tenant-admin-else-not-found"
# The console's sign-in form: any valid token of a principal holding a role besides `node` (administrators too).
SIGNS_IN = "signs-in"
# The console's pages for any signed-in principal (each shows only what it may see).
SIGNED_IN = "signed-in"

ROLE_MAY: dict[str, frozenset[str]] = {
    "submitter": frozenset({"read", "submit"}),
    # The matrix's approver is a `security` approver: it may revoke, and the promotion policy does not
    # let it move aliases ("promote": ml approvers and admins of the tenant).
    "approver": frozenset({"read", "approve", "revoke"}),
    "auditor": frozenset({"read", "audit"}),
    "node": frozenset({"fetch"}),
    "admin": frozenset({"read", "submit", "approve", "audit", "fetch", "admin", "promote", "revoke"}),
    "none": frozenset(),
}
OWN, OTHER = "a", "b"
# Nothing listens on the discard port: a webhook's test ping there is a recorded failure, at once.
WEBHOOK_URL = "http://127.0.0.1:9/matrix"
ABSENT_WEBHOOK = str(10**9)
MATRIX_ISSUER = "https://kubernetes.default.svc.cluster.local"
EVALSET = (b'{"id": "c1", "category": "factual", "language": "en", '
           b'"messages": [{"role": "user", "content": "2+2?"}], "expect": {"exact": "4"}}\n')


@dataclass(frozen=True)
class Rule:
    """What a route needs and answers.

    Attributes:
        who: PUBLIC, AUTHENTICATED, ADMIN, or a tenant permission (``"read"``, ``"submit"``,
            ``"audit"``...) that the caller must hold in the tenant the request names.
        ok: the status of an allowed call.
        request: ``(world, tenant) -> extra request arguments`` (query, JSON body, content).
        path: path parameters that differ from the world's defaults for the tenant: the name of another
            default, or ``(world, tenant) -> value``.
    """

    who: str
    """A rule's ``who`` may name alternatives, ``"read|fetch"``: holding one of them is enough."""
    ok: int
    request: Callable[["World", str], dict[str, Any]] | None = None
    path: dict[str, Any] = field(default_factory=dict)
    console: bool = False
    """A web console route (``/ui``): called with the caller's console session (signed in through the form with
    its token) instead of a bearer token, and a form's CSRF token. A caller who cannot sign in is sent to the
    sign-in page (303); a refusal is an HTML page."""


def tenant_query(w: "World", t: str) -> dict[str, Any]:
    return {"params": {"tenant": t}}


def version_ref() -> dict[str, Any]:
    """A provenance question of version 1 of the tenant's model."""
    return {"params": {"ref": "1"}}


NOTES_DIGEST = "sha256:" + hashlib.sha256(b"notes\n").hexdigest()
"""The blob of ``sub/notes.txt``, a file of every version the world makes (in both tenants)."""

RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule(PUBLIC, 200),
    ("GET", "/readyz"): Rule(PUBLIC, 200),
    ("GET", "/metrics"): Rule(PUBLIC, 200),  # MODELREG_METRICS_PUBLIC (default); tests/e2e/test_metrics.py: off
    ("GET", "/openapi.json"): Rule(PUBLIC, 200),
    ("GET", "/docs"): Rule(PUBLIC, 200),
    ("GET", "/docs/oauth2-redirect"): Rule(PUBLIC, 200),
    ("GET", "/redoc"): Rule(PUBLIC, 200),
    ("GET", "/v1/keys"): Rule(PUBLIC, 200),
    ("GET", "/v1/trust-root"): Rule(PUBLIC, 200),
    ("GET", "/v1/trust-root/{version}"): Rule(PUBLIC, 200, path={"version": lambda w, t: "1"}),
    # The verifiable audit log: commitments only, public. The matrix's world has not integrated its log yet.
    ("GET", "/log/checkpoint"): Rule(PUBLIC, 404),
    ("GET", "/log/tile/{path:path}"): Rule(PUBLIC, 404, path={"path": lambda w, t: "0/000"}),
    ("GET", "/log/proof/inclusion"): Rule(PUBLIC, 404, lambda w, t: {"params": {"index": 0, "size": 1}}),
    ("GET", "/log/proof/consistency"): Rule(PUBLIC, 200, lambda w, t: {"params": {"first": 0, "second": 0}}),
    ("GET", "/v1/blobs/sha256/{digest}"): Rule(PUBLIC, 200, lambda w, t: {"params": w.presigned(t)}),
    ("GET", "/v1/whoami"): Rule(AUTHENTICATED, 200),
    ("POST", "/v1/tenants"): Rule(ADMIN, 201, lambda w, t: {"json": {"name": w.fresh("tenant")}}),
    ("GET", "/v1/tenants"): Rule(ADMIN, 200),
    # Off, so that the matrix's anonymous callers stay refused on /v2 (tests/integration/test_oci_referrers.py: on).
    ("PUT", "/v1/tenants/{tenant}/oci-anonymous-pull"): Rule(ADMIN, 200, lambda w, t: {"json": {"enabled": False}}),
    ("POST", "/v1/principals"): Rule(ADMIN, 201, lambda w, t: {"json": {"name": w.fresh("principal")}}),
    ("GET", "/v1/principals/{name}"): Rule(ADMIN, 200, path={"name": "target"}),
    ("POST", "/v1/principals/{name}/roles"): Rule(ADMIN, 201, lambda w, t: {"json": {"tenant": t, "role": "auditor"}},
                                                  path={"name": "target"}),
    ("DELETE", "/v1/principals/{name}/roles"): Rule(ADMIN, 204, lambda w, t: w.granted_role(t),
                                                    path={"name": "target"}),
    ("POST", "/v1/principals/{name}/tokens"): Rule(ADMIN, 201, lambda w, t: {"json": {}}, path={"name": "target"}),
    ("DELETE", "/v1/tokens/{token_id}"): Rule(ADMIN, 204),
    ("GET", "/v1/principals/{name}/tokens"): Rule(ADMIN, 200, path={"name": "target"}),
    ("POST", "/v1/principals/{name:path}/disable"): Rule(ADMIN, 200, path={"name": "target"}),
    ("POST", "/v1/principals/{name:path}/enable"): Rule(ADMIN, 200, path={"name": "target"}),
    ("POST", "/v1/node-bindings"): Rule(ADMIN, 201, lambda w, t: {"json": {
        "issuer": MATRIX_ISSUER, "namespace": "serving", "service_account": w.fresh("sa"), "tenant": t}}),
    ("GET", "/v1/node-bindings"): Rule(ADMIN, 200),
    ("DELETE", "/v1/node-bindings"): Rule(ADMIN, 204, lambda w, t: w.bound_node(t)),
    ("GET", "/v1/audit/events"): Rule("audit", 200, tenant_query),
    # Any role in the tenant reads its event stream (registry.services.events.visible_tenants).
    ("GET", "/v1/events"): Rule("read|fetch", 200, tenant_query),
    ("POST", "/v1/webhooks"): Rule(TENANT_ADMIN, 201, lambda w, t: {"json": {
        "tenant": t, "url": WEBHOOK_URL, "types": ["version.approved"]}}),
    ("GET", "/v1/webhooks"): Rule(TENANT_ADMIN, 200, tenant_query),
    ("GET", "/v1/webhooks/{webhook_id}"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 200),
    ("DELETE", "/v1/webhooks/{webhook_id}"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 204),
    ("GET", "/v1/webhooks/{webhook_id}/deliveries"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 200),
    ("POST", "/v1/webhooks/{webhook_id}/redeliver"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 200,
                                                          lambda w, t: {"json": {}}),
    ("POST", "/v1/webhooks/{webhook_id}/rotate-secret"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 200,
                                                              lambda w, t: {"json": {}}),
    ("POST", "/v1/webhooks/{webhook_id}/test"): Rule(TENANT_ADMIN_ELSE_NOT_FOUND, 202),
    ("GET", "/v1/audit/verify"): Rule(ADMIN, 200),
    ("GET", "/v1/audit/checkpoints"): Rule(AUDITS_ANY_TENANT, 200),
    ("POST", "/v1/scans/rescan"): Rule(ADMIN, 202),
    ("POST", "/v1/models/{tenant}/{name}/versions"): Rule("submit", 200, lambda w, t: {"json": w.resubmission(t)}),
    ("GET", "/v1/models/{tenant}/{name}/versions"): Rule("read", 200),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}"): Rule("read", 200),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/signature"): Rule("read", 200),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/scans"): Rule("read", 200),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/derive"): Rule(
        "submit", 202, lambda w, t: {"json": {"prompts": {"greeting": w.fresh("Hello {{ name }} ")}}},
        path={"number": lambda w, t: str(w.approved(t)[0])}),
    ("GET", "/v1/models/{tenant}/{name}/diff/{old}/{new}"): Rule(
        "read", 200, path={"old": lambda w, t: str(w.approved(t)[0]), "new": lambda w, t: str(w.approved(t)[1])}),
    # Chunk lists are served as the release's blob URLs are: of an approved version, to readers and nodes.
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/chunks/{digest}"): Rule(
        "read|fetch", 200, path={"number": lambda w, t: str(w.approved(t)[0]),
                                 "digest": lambda w, t: NOTES_DIGEST.removeprefix("sha256:")}),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/approvals"): Rule(
        APPROVER_IN_CAPACITY, 201, lambda w, t: {"json": {"decision": "approve", "capacity": "security"}}),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/approvals"): Rule("read", 200),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/approvals/preview"): Rule(
        APPROVER_IN_CAPACITY, 200, lambda w, t: {"json": {"decision": "approve", "capacity": "security"}},
        path={"number": lambda w, t: w.undecided(t)}),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/approvals/files"): Rule(
        APPROVER_IN_CAPACITY, 200, lambda w, t: {"json": {"files": ["config.json"]}},
        path={"number": lambda w, t: w.approved_by_approver(t)}),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/policy"): Rule("read", 200),
    ("PUT", "/v1/models/{tenant}/{name}/aliases/{alias}"): Rule("promote", 200, lambda w, t: w.promotion(t)),
    ("GET", "/v1/models/{tenant}/{name}/aliases"): Rule("read", 200),
    ("POST", "/v1/models/{tenant}/{name}/aliases/{alias}/rollback"): Rule("promote", 200,
                                                                         lambda w, t: w.rollbackable(t)),
    ("GET", "/v1/models/{tenant}/{name}/aliases/{alias}/resolve"): Rule("read|fetch", 200,
                                                                       lambda w, t: w.promoted(t)),
    ("GET", "/v1/models/{tenant}/{name}/manifest"): Rule(
        "read|fetch", 200, lambda w, t: {"params": {"ref": "prod", **w.promoted(t)["params"]}}),
    ("POST", "/v1/models/{tenant}/{name}/versions/{number}/revoke"): Rule(
        "revoke", 200, lambda w, t: {"json": {"reason": "matrix"}},
        path={"number": lambda w, t: w.revocable(t)}),
    ("PUT", "/v1/evalsets/{name}"): Rule(ADMIN, 201, lambda w, t: {"content": EVALSET},
                                         path={"name": lambda w, t: w.fresh("set")}),
    ("GET", "/v1/evalsets"): Rule(READS_ANY_TENANT, 200),
    ("GET", "/v1/evalsets/{name}"): Rule(READS_ANY_TENANT, 200, path={"name": "evalset"}),
    ("GET", "/v1/evalsets/{name}/versions/{number}"): Rule(READS_ANY_TENANT, 200, path={"name": "evalset"}),
    ("GET", "/v1/evalsets/{name}/versions/{number}/cases"): Rule(READS_ANY_TENANT, 200, path={"name": "evalset"}),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/evals"): Rule("read", 200),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/evals/{suite}"): Rule("read", 200),
    ("GET", "/v1/models/{tenant}/{name}/versions/{number}/evals/{suite}/log"): Rule("read", 200),
    ("GET", "/v1/provenance/{tenant}/{name}/versions/{number}/export"): Rule(
        "audit", 200, lambda w, t: {"params": {"format": "slsa"}}),
    ("GET", "/hf/api/models/{tenant}/{name}"): Rule("read|fetch", 200, lambda w, t: w.released(t)),
    ("GET", "/hf/api/models/{tenant}/{name}/revision/{revision}"): Rule("read|fetch", 200,
                                                                       lambda w, t: w.released(t)),
    ("GET", "/hf/api/models/{tenant}/{name}/tree/{revision}"): Rule("read|fetch", 200, lambda w, t: w.released(t)),
    ("GET", "/hf/api/models/{tenant}/{name}/tree/{revision}/{path:path}"): Rule(
        "read|fetch", 200, lambda w, t: w.released(t), path={"path": "folder"}),
    ("POST", "/hf/api/models/{tenant}/{name}/paths-info/{revision}"): Rule(
        "read|fetch", 200, lambda w, t: {**w.released(t), "data": {"paths": ["config.json"]}}),
    ("HEAD", "/hf/{tenant}/{name}/resolve/{revision}/{path:path}"): Rule("read|fetch", 200,
                                                                        lambda w, t: w.released(t)),
    ("GET", "/hf/{tenant}/{name}/resolve/{revision}/{path:path}"): Rule("read|fetch", 200,
                                                                       lambda w, t: w.released(t)),
    # The OCI endpoint (docs/oci.md): pulls need read or fetch in the tenant; writes are refused to all.
    ("GET", "/v2/"): Rule(AUTHENTICATED, 200),
    ("GET", "/v2/token"): Rule(AUTHENTICATED, 200, lambda w, t: {"params": {"scope": f"repository:{t}/x:pull"}}),
    # The OAuth2 form carries its credential in the body, never the header: a password that is no token is an
    # invalid grant for every caller (the grants themselves: tests/integration/test_oci_endpoint.py).
    ("POST", "/v2/token"): Rule(PUBLIC, 400, lambda w, t: {"data": {"grant_type": "password",
                                                                     "password": "not-a-token"}}),
    ("GET", "/v2/_catalog"): Rule(AUTHENTICATED, 200),
    ("GET", "/v2/{tenant}/{name}/tags/list"): Rule("read|fetch", 200, lambda w, t: w.released(t)),
    ("GET", "/v2/{tenant}/{name}/manifests/{reference}"): Rule("read|fetch", 200, lambda w, t: w.released(t),
                                                              path={"reference": lambda w, t: "prod"}),
    ("HEAD", "/v2/{tenant}/{name}/manifests/{reference}"): Rule("read|fetch", 200, lambda w, t: w.released(t),
                                                               path={"reference": lambda w, t: "prod"}),
    ("GET", "/v2/{tenant}/{name}/blobs/{digest}"): Rule("read|fetch", 200, lambda w, t: w.released(t),
                                                        path={"digest": lambda w, t: NOTES_DIGEST}),
    ("HEAD", "/v2/{tenant}/{name}/blobs/{digest}"): Rule("read|fetch", 200, lambda w, t: w.released(t),
                                                         path={"digest": lambda w, t: NOTES_DIGEST}),
    # Referrers of a digest no released version has: an empty index (the spec's 200, never a 404).
    ("GET", "/v2/{tenant}/{name}/referrers/{digest}"): Rule("read|fetch", 200, lambda w, t: w.released(t),
                                                            path={"digest": lambda w, t: NOTES_DIGEST}),
    ("GET", "/v2/{rest:path}"): Rule(PUBLIC, 404, path={"rest": lambda w, t: f"{t}/a/b/manifests/1"}),
    ("HEAD", "/v2/{rest:path}"): Rule(PUBLIC, 404, path={"rest": lambda w, t: f"{t}/a/b/manifests/1"}),
    **{(method, path): Rule(PUBLIC, 405, path={"rest": lambda w, t: f"{t}/model-{t}/manifests/1"})
       for method in ("POST", "PUT", "PATCH", "DELETE") for path in ("/v2/", "/v2/{rest:path}")},
    ("GET", "/v1/provenance/{tenant}/{name}/origin"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/files"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/scans"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/evals"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/license"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/approvals"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/nodes"): Rule("audit", 200, lambda w, t: version_ref()),
    ("GET", "/v1/provenance/{tenant}/{name}/aliases/{alias}"): Rule("audit", 200, lambda w, t: w.released(t)),
    ("GET", "/v1/provenance/revoked-nodes"): Rule("audit", 200, tenant_query),
    ("GET", "/v1/provenance/{tenant}/{name}/running"): Rule("audit", 200, lambda w, t: version_ref()),
    # Node programs report what they hold: the node identities of the tenant the body names.
    # Admission reviews and answered-review reports: administrators and the admission role (system-wide, none of
    # the matrix's callers holds it: tests/integration/test_admission_webhook.py checks it).
    ("POST", "/v1/admission/reviews"): Rule(ADMIN, 200, lambda w, t: {"json": {
        "object": {"kind": "Pod", "namespace": "matrix", "name": "p", "uid": "u", "operation": "CREATE"},
        "references": [{"uri": f"modelreg://{t}/{w.model[t]}@1", "path": "/spec/x", "kind": "init-fetch"}]}}),
    ("POST", "/v1/admission/answered"): Rule(ADMIN, 200, lambda w, t: {"json": {"reviews": [{
        "object": {"kind": "Pod", "namespace": "matrix", "name": "p", "uid": "u", "operation": "CREATE"},
        "references": [{"uri": f"modelreg://{t}/{w.model[t]}@1", "path": "/spec/x", "kind": "init-fetch",
                        "version": 1}], "decided_at": "2026-12-07T00:00:00+00:00"}]}}),
    ("POST", "/v1/receipts"): Rule("fetch", 200, lambda w, t: {"json": {
        "program": "fetch", "node": "matrix-node", "places": [
            {"model": f"{t}/{w.model[t]}", "version": 1, "where": "path", "path": "/srv/matrix"}]}}),
    ("GET", "/v1/provenance/blobs/sha256:{digest}"): Rule(AUDITS_ANY_TENANT, 200),
    ("GET", "/v1/provenance/{tenant}/{name}/components"): Rule("audit", 200, lambda w, t: version_ref()),
    # The "other" component of sub/notes.txt, in versions of both tenants: each auditor finds its own tenant's.
    ("GET", "/v1/provenance/components/sha256:{digest}"): Rule(AUDITS_ANY_TENANT, 200,
                                                               path={"digest": lambda w, t: w.shared_component()}),
    ("GET", "/v1/provenance/{tenant}/{name}/aliases/{alias}/components/{component}"): Rule(
        "audit", 200, lambda w, t: w.released(t), path={"component": lambda w, t: "config"}),
    # Adapters bound to these weights: none in the world, an empty list for every auditor (tenancy of the answer:
    # tests/integration/test_adapter_provenance.py).
    ("GET", "/v1/provenance/adapters/sha256:{digest}"): Rule(AUDITS_ANY_TENANT, 200),
    # The world's models are no adapters: an auditor asking which base one is bound to is told so (409).
    ("GET", "/v1/provenance/{tenant}/{name}/adapter-base"): Rule("audit", 409, lambda w, t: version_ref()),
    ("POST", "/v1/provenance/audit-log"): Rule(AUDITS_ANY_TENANT, 200, lambda w, t: {"json": {"checkpoints": []}}),
    ("GET", "/ui/sign-in"): Rule(PUBLIC, 200, console=True),
    ("POST", "/ui/sign-in"): Rule(SIGNS_IN, 303, console=True),
    # Single sign-on is not configured in this world: its routes say so to every caller (test_oidc_sign_in.py).
    ("GET", "/ui/sign-in/oidc"): Rule(PUBLIC, 404, console=True),
    ("GET", "/ui/sign-in/oidc/callback"): Rule(PUBLIC, 404, console=True),
    ("GET", "/v1/auth/oidc"): Rule(PUBLIC, 404),
    ("POST", "/v1/auth/oidc/token"): Rule(PUBLIC, 404, lambda w, t: {"json": {
        "code": "c", "code_verifier": "v" * 43, "redirect_uri": "http://127.0.0.1:1/callback", "nonce": "n" * 16}}),
    ("POST", "/ui/sign-out"): Rule(PUBLIC, 303, console=True),
    ("GET", "/ui/static/{name}"): Rule(PUBLIC, 200, path={"name": lambda w, t: "console.css"}, console=True),
    ("GET", "/ui"): Rule(SIGNED_IN, 200, console=True),
    ("GET", "/ui/approvals"): Rule(SIGNED_IN, 200, console=True),
    ("GET", "/ui/models/{tenant}/{name}"): Rule("read", 200, console=True),
    ("GET", "/ui/models/{tenant}/{name}/versions/{number}"): Rule("read", 200, console=True),
    ("GET", "/ui/models/{tenant}/{name}/versions/{number}/progress"): Rule("read", 200, console=True),
    ("GET", "/ui/models/{tenant}/{name}/versions/{number}/signature"): Rule("read", 200, console=True),
    ("POST", "/ui/models/{tenant}/{name}/versions/{number}/decision"): Rule(
        APPROVER_IN_CAPACITY, 303, lambda w, t: {"data": {"decision": "approve", "capacity": "security"}},
        path={"number": lambda w, t: w.awaiting(t)}, console=True),
    ("POST", "/ui/models/{tenant}/{name}/versions/{number}/approval-files"): Rule(
        APPROVER_IN_CAPACITY, 303, lambda w, t: {"data": {"files": ["config.json"]}},
        path={"number": lambda w, t: w.approved_by_approver(t)}, console=True),
    ("POST", "/ui/models/{tenant}/{name}/versions/{number}/revoke"): Rule(
        "revoke", 303, lambda w, t: {"data": {"reason": "matrix"}}, path={"number": lambda w, t: w.revocable(t)},
        console=True),
    ("GET", "/ui/models/{tenant}/{name}/versions/{number}/export"): Rule(
        "audit", 200, lambda w, t: {"params": {"format": "cyclonedx"}}, console=True),
    ("POST", "/ui/models/{tenant}/{name}/aliases"): Rule(
        "promote", 303, lambda w, t: {"data": {"alias": "prod", "version": str(w.approved(t)[0])}}, console=True),
    ("POST", "/ui/models/{tenant}/{name}/aliases/{alias}/rollback"): Rule(
        "promote", 303, lambda w, t: {"data": w.rollbackable(t)["json"]}, console=True),
    ("GET", "/ui/audit"): Rule("audit", 200, tenant_query, console=True),
    ("GET", "/ui/provenance"): Rule(AUDITS_ANY_TENANT, 200, lambda w, t: {"params": {"digest": w.digest[t]}},
                                    console=True),
    ("HEAD", "/v1/blobs/sha256/{digest}"): Rule("submit", 200, tenant_query),
    ("PUT", "/v1/blobs/sha256/{digest}"): Rule("submit", 201, lambda w, t: {**tenant_query(w, t),
                                                                             "content": w.blob_bytes[t]}),
    ("PUT", "/v1/tenants/{tenant}/quota"): Rule(ADMIN, 200, lambda w, t: {"json": {"bytes": 1 << 40}}),
    ("GET", "/v1/tenants/{tenant}/quota"): Rule("read", 200),
    ("PUT", "/v1/models/{tenant}/{name}/retention"): Rule(TENANT_ADMIN, 200,
                                                          lambda w, t: {"json": {"keep_last": 1000}}),
    ("GET", "/v1/models/{tenant}/{name}/retention"): Rule("read", 200),
    ("POST", "/v1/models/{tenant}/{name}/retention/apply"): Rule(TENANT_ADMIN, 200),
    ("GET", "/v1/usage"): Rule("audit", 200, tenant_query),
}

# Callers that must be refused on every route that needs a token (all administrators otherwise).
REFUSED_TOKENS = ("no token", "unknown token", "expired token", "revoked token", "disabled principal")


def route_keys(app) -> set[tuple[str, str]]:
    """Every (method, path template) the app answers, routers included."""
    keys = set()
    for entry in app.routes:
        # FastAPI keeps an included router as one entry that expands to its routes, prefix applied.
        if hasattr(entry, "effective_route_contexts"):
            routes = [(c.original_route, c.path) for c in entry.effective_route_contexts()]
        else:
            routes = [(entry, getattr(entry, "path", repr(entry)))]
        for route, path in routes:
            methods = set(getattr(route, "methods", None) or {"*"})
            if not isinstance(route, APIRoute):
                # Starlette answers HEAD on every plain GET route (the docs pages): part of that GET.
                methods.discard("HEAD")
            keys |= {(method, path) for method in methods}
    return keys


# --- the world ----------------------------------------------------------------------------------


@dataclass
class World:
    container: Any
    root: Any  # the administrator the services act as
    tokens: dict[str, str] = field(default_factory=dict)  # caller -> bearer token
    blob_bytes: dict[str, bytes] = field(default_factory=dict)
    digest: dict[str, str] = field(default_factory=dict)
    model: dict[str, str] = field(default_factory=dict)
    throwaway_token_id: int = 0
    releasable: dict[str, tuple[int, int]] = field(default_factory=dict)
    to_revoke: dict[str, int] = field(default_factory=dict)
    awaiting_versions: dict[str, int] = field(default_factory=dict)
    undecided_versions: dict[str, int] = field(default_factory=dict)
    amendable_versions: dict[str, int] = field(default_factory=dict)
    console_sessions: dict[str, tuple[str, str] | None] = field(default_factory=dict)
    counter: itertools.count = field(default_factory=itertools.count)
    webhooks: dict[str, int] = field(default_factory=dict)

    def fresh(self, kind: str) -> str:
        return f"{kind}-{next(self.counter)}"

    def path_values(self, tenant: str) -> dict[str, str]:
        return {"tenant": tenant, "name": self.model[tenant], "number": "1", "digest": self.digest[tenant],
                "token_id": str(self.throwaway_token_id), "target": "target", "alias": "prod",
                "evalset": "matrix-set", "suite": "matrix", "revision": "prod", "path": "config.json",
                "folder": "sub", "webhook_id": self.webhook(tenant)}

    def version(self, tenant: str, approved: bool) -> int:
        """A new version of the tenant's model, through the pipeline (approved by the stand-in if asked)."""
        # A file in a folder too, for the /hf tree of a folder.
        files = {"config.json": json.dumps({"model_type": "matrix", "tenant": tenant,
                                            "n": next(self.counter)}).encode(),
                 "sub/notes.txt": b"notes\n"}
        entries = []
        with self.container.session_factory() as session:
            for path, data in files.items():
                digest = hashlib.sha256(data).hexdigest()
                versions.upload_blob(session, self.root, tenant, digest, io.BytesIO(data), len(data),
                                     blob_store=self.container.blob_store)
                entries.append(FileEntry(path, len(data), digest))
            version, _ = versions.submit_uploaded(
                session, self.root, tenant, self.model[tenant], entries,
                label="matrix", limits=self.container.limits(), ports=self.container.ports)
            number = version.number
        drain(self.container)
        if approved:
            approve_standin(self.container, tenant, self.model[tenant], number)
        return number

    def approved(self, tenant: str) -> tuple[int, int]:
        """Two approved versions of the tenant's model, made once."""
        if tenant not in self.releasable:
            self.releasable[tenant] = (self.version(tenant, True), self.version(tenant, True))
        return self.releasable[tenant]

    def _promote(self, tenant: str, number: int) -> None:
        with self.container.session_factory() as session:
            aliases.promote(session, self.root, tenant, self.model[tenant], "prod", make_target(number),
                            policy=self.container.policy, clock=self.container.clock)

    def shared_component(self) -> str:
        """The digest of the ``other`` component (``sub/notes.txt`` alone) of approved versions in both tenants."""
        self.approved(OWN), self.approved(OTHER)
        return component_digest([Member("sub/notes.txt", NOTES_DIGEST.removeprefix("sha256:"))])

    def promotion(self, tenant: str) -> dict[str, Any]:
        return {"json": {"version": self.approved(tenant)[0], "comment": "matrix"}}

    def promoted(self, tenant: str) -> dict[str, Any]:
        self._promote(tenant, self.approved(tenant)[0])
        return {"params": {"for_tenant": OTHER}}

    def released(self, tenant: str) -> dict[str, Any]:
        """prod points at an approved version (whichever): what the /hf routes serve."""
        self._promote(tenant, self.approved(tenant)[0])
        return {}

    def rollbackable(self, tenant: str) -> dict[str, Any]:
        """prod's newest move not undone is first -> second, whatever the calls before did."""
        first, second = self.approved(tenant)
        self._promote(tenant, first)
        self._promote(tenant, second)
        return {"json": {"comment": "matrix"}}

    def awaiting(self, tenant: str) -> str:
        """A version awaiting approval that no one decided on through the JSON API (made once)."""
        if tenant not in self.awaiting_versions:
            self.awaiting_versions[tenant] = self.version(tenant, False)
        return str(self.awaiting_versions[tenant])

    def undecided(self, tenant: str) -> str:
        """A version awaiting approval that no call decides on (made once)."""
        if tenant not in self.undecided_versions:
            self.undecided_versions[tenant] = self.version(tenant, False)
        return str(self.undecided_versions[tenant])

    def approved_by_approver(self, tenant: str) -> str:
        """A version awaiting approval that the matrix's (security) approver approved, where it approves (made
        once): the one approval it may add file reviews to."""
        if tenant not in self.amendable_versions:
            number = self.version(tenant, False)
            if tenant == OWN:
                with self.container.session_factory() as session:
                    approvals.decide(session, authenticate(session, self.tokens["approver"]), tenant,
                                     self.model[tenant], number, approvals.ApprovalRequest("approve", "security"),
                                     ports=self.container.ports)
            self.amendable_versions[tenant] = number
        return str(self.amendable_versions[tenant])

    def console_session(self, app, caller: str) -> tuple[str, str] | None:
        """The caller's console session cookie and its CSRF token, signed in through the form once (None:
        the sign-in is refused)."""
        if caller not in self.console_sessions:
            self.console_sessions[caller] = None
            if caller != "no token":
                with TestClient(app) as browser:
                    form = browser.get("/ui/sign-in")
                    csrf = re.search(r'name="csrf" value="([^"]*)"', form.text).group(1)
                    r = browser.post("/ui/sign-in", data={"token": self.tokens[caller], "csrf": csrf},
                                     follow_redirects=False)
                    if r.status_code == 303:
                        page = browser.get("/ui")
                        self.console_sessions[caller] = (
                            browser.cookies["mr_session"],
                            re.search(r'name="csrf" value="([^"]*)"', page.text).group(1))
        return self.console_sessions[caller]

    def revocable(self, tenant: str) -> str:
        """A version that is not revoked yet (a new one once a call revoked the last)."""
        with self.container.session_factory() as session:
            number = self.to_revoke.get(tenant)
            state = session.scalar(select(Version.state).join(Model).where(
                Model.name == self.model[tenant], Version.number == number)) if number else None
        if state in (None, "revoked"):
            self.to_revoke[tenant] = self.version(tenant, False)
        return str(self.to_revoke[tenant])

    def presigned(self, tenant: str) -> dict[str, str]:
        url = self.container.blob_store.presign_get(self.digest[tenant], dt.timedelta(minutes=10))
        return dict(parse_qsl(urlsplit(url).query))

    def resubmission(self, tenant: str) -> dict[str, Any]:
        data = self.blob_bytes[tenant]
        return {"source": "upload:matrix",
                "files": [{"path": "config.json", "size": len(data), "sha256": self.digest[tenant]}]}

    def bound_node(self, tenant: str) -> dict[str, Any]:
        """A binding of a fresh service account in ``tenant``: what ``DELETE /v1/node-bindings`` names."""
        subject = {"issuer": MATRIX_ISSUER, "namespace": "serving", "service_account": self.fresh("sa"),
                   "tenant": tenant}
        with self.container.session_factory() as session:
            node_bindings.bind(session, self.root, **subject, trusted=self.container.settings.workload_issuers)
        return {"params": subject}

    def webhook(self, tenant: str) -> str:
        """The id of the tenant's standing webhook, made again if a call removed it."""
        with self.container.session_factory() as session:
            standing = self.webhooks.get(tenant)
            if standing is None or session.get(WebhookSubscription, standing) is None:
                sub, _ = webhook_service.create(session, self.root, tenant=tenant, url=WEBHOOK_URL,
                                                types=["version.approved"],
                                                egress_policy=EgressPolicy.from_entries(
                                                    self.container.settings.egress_allow),
                                                clock=self.container.clock)
                self.webhooks[tenant] = sub.id
        return str(self.webhooks[tenant])

    def granted_role(self, tenant: str) -> dict[str, Any]:
        with self.container.session_factory() as session:
            identity.grant_role(session, self.root, "target", tenant, "auditor")
        return {"json": {"tenant": tenant, "role": "auditor"}}


def build_world(container) -> World:
    # Binding a service account names a trusted issuer; nothing here fetches its keys.
    container.settings.workload_issuers = [WorkloadIssuer(issuer=MATRIX_ISSUER)]
    container.settings.egress_allow = ["127.0.0.1/32"]  # the webhooks' (unlistened) loopback target
    with container.session_factory() as session:
        root_row = Principal(name="root", is_admin=True)
        session.add(root_row)
        session.commit()
        root = load_principal(root_row)
    world = World(container, root)
    with container.session_factory() as session:
        for tenant in (OWN, OTHER):
            identity.create_tenant(session, root, tenant)
        for role in ROLE_MAY:
            identity.create_principal(session, root, role)
            if role != "none":
                identity.grant_role(session, root, role, OWN, role, "security" if role == "approver" else "")
        identity.create_principal(session, root, "sysadmin", is_admin=True)
        identity.create_principal(session, root, "target")
        for name in ("expired", "revoked", "disabled"):
            identity.create_principal(session, root, name, is_admin=True)
        principals = {p.name: p for p in session.query(Principal)}
        for name in (*ROLE_MAY, "sysadmin", "disabled"):
            world.tokens[name] = issue_token(session, principals[name]).token
        world.tokens["expired token"] = issue_token(session, principals["expired"],
                                                    expires_in=dt.timedelta(seconds=-1)).token
        revoked = issue_token(session, principals["revoked"])
        world.tokens["revoked token"] = revoked.token
        world.tokens["disabled principal"] = world.tokens.pop("disabled")
        world.tokens["unknown token"] = "mr_" + "x" * 43
        world.throwaway_token_id = issue_token(session, principals["target"]).id
        principals["disabled"].disabled = True
        session.commit()
        identity.revoke_token(session, root, revoked.id, clock=container.clock)

    for tenant in (OWN, OTHER):
        data = json.dumps({"model_type": "matrix", "tenant": tenant}).encode()
        digest = hashlib.sha256(data).hexdigest()
        world.blob_bytes[tenant], world.digest[tenant], world.model[tenant] = data, digest, f"model-{tenant}"
        with container.session_factory() as session:
            versions.upload_blob(session, root, tenant, digest, io.BytesIO(data), len(data),
                                 blob_store=container.blob_store)
            versions.submit_uploaded(session, root, tenant, world.model[tenant],
                                     [FileEntry("config.json", len(data), digest)], label="matrix",
                                     limits=container.limits(), ports=container.ports)
    drain(container)
    with container.session_factory() as session:
        states = {v.state for v in session.query(Version)}
        evals.add_evalset(session, root, "matrix-set", EVALSET, "", blob_store=container.blob_store,
                          clock=container.clock)
        # An eval result of each tenant's version (the matrix's models are a config.json: no suite applies).
        for version in session.query(Version):
            session.add(EvalResult(version_id=version.id, suite="matrix", suite_version="0" * 64, runner="command",
                                   runner_version="1.0.0", definition={}, status="completed", metrics={"x": 1.0},
                                   log_digest=world.digest[version.model.tenant.name], duration_ms=1,
                                   created_at=container.clock.now(), finished_at=container.clock.now()))
        session.commit()
    assert states == {"awaiting_approval"}, states
    return world


# --- expectations ---------------------------------------------------------------------------------


def expected_status(rule: Rule, caller: str, tenant: str) -> int:
    if rule.who == PUBLIC:
        return rule.ok
    if rule.who == SIGNS_IN:
        return 401 if caller in REFUSED_TOKENS else 403 if caller in ("node", "none") else rule.ok
    if rule.console and (caller in REFUSED_TOKENS or caller in ("node", "none")):
        return 303  # no session: sent to the sign-in page
    if caller in REFUSED_TOKENS:
        return 401
    if rule.who == SIGNED_IN:
        return rule.ok
    if rule.who == APPROVER_IN_CAPACITY:
        return rule.ok if caller == "approver" and tenant == OWN else 403
    if rule.who == AUTHENTICATED or caller == "sysadmin":
        return rule.ok
    if rule.who == TENANT_ADMIN:
        return rule.ok if tenant == OWN and "admin" in ROLE_MAY[caller] else 403
    if rule.who == TENANT_ADMIN_ELSE_NOT_FOUND:
        return rule.ok if tenant == OWN and "admin" in ROLE_MAY[caller] else 404
    if rule.who == ADMIN:
        return 403
    if rule.who == AUDITS_ANY_TENANT:
        return rule.ok if "audit" in ROLE_MAY[caller] else 403
    if rule.who == READS_ANY_TENANT:
        return rule.ok if "read" in ROLE_MAY[caller] else 403
    held = ROLE_MAY[caller] if tenant == OWN else frozenset()
    return rule.ok if held & set(rule.who.split("|")) else 403


def call(client: TestClient, world: World, key: tuple[str, str], rule: Rule, caller: str, tenant: str,
         **overrides: str):
    method, template = key
    template = template.replace(":path}", "}")
    values = {**world.path_values(tenant), **overrides}
    values.update({param: source(world, tenant) if callable(source) else values[source]
                   for param, source in rule.path.items()})
    extra = rule.request(world, tenant) if rule.request else {}
    if rule.console:
        return console_call(client, world, method, template.format(**values), caller, extra)
    headers = {"Authorization": f"Bearer {world.tokens[caller]}"} if caller != "no token" else {}
    return client.request(method, template.format(**values), headers=headers, **extra)


def console_call(client: TestClient, world: World, method: str, path: str, caller: str, extra: dict[str, Any]):
    """A console request as the caller's browser makes it: its session cookie, a form's CSRF token."""
    client.cookies.clear()
    if path == "/ui/sign-in" and method == "POST":
        # The sign-in form itself: its pre-session cookie and token, and the caller's API token.
        form = client.get("/ui/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]*)"', form.text).group(1)
        token = world.tokens[caller] if caller != "no token" else ""
        r = client.post(path, data={"token": token, "csrf": csrf}, follow_redirects=False)
        client.cookies.clear()
        return r
    opened = world.console_session(client.app, caller)
    headers = {"Cookie": f"mr_session={opened[0]}"} if opened else {}
    if method == "POST":
        extra = {**extra, "data": {**extra.get("data", {}), "csrf": opened[1] if opened else ""}}
    r = client.request(method, path, headers=headers, follow_redirects=False, **extra)
    if path == "/ui/sign-out":
        world.console_sessions.pop(caller, None)  # signing out ended it server-side: the next call signs in again
    return r


# --- families: the matrix's share-out over modules ------------------------------------------------

# (family, path prefixes) in order; a route falls in the first family one of whose prefixes its path starts
# with, and in "deployment" (health, documents, identity, tenants, webhooks, evals...) when none does.
FAMILIES: list[tuple[str, tuple[str, ...]]] = [
    ("models", ("/v1/models/", "/v1/blobs/")),
    ("provenance", ("/v1/provenance/", "/v1/audit/", "/log/")),
    # The OCI and Hugging Face routes apart: each call of theirs promotes prod first (World.released).
    ("oci", ("/v2",)),
    ("hf", ("/hf/",)),
    ("console", ("/ui",)),
]
DEPLOYMENT = "deployment"


def family_of(key: tuple[str, str]) -> str:
    """The family of a route key, ``(method, path template)``."""
    return next((name for name, prefixes in FAMILIES if key[1].startswith(prefixes)), DEPLOYMENT)


def check_matrix(container, family: str) -> None:
    """Call every route of ``family`` as every caller on its own and the other tenant: each answers its rule's
    status, and no refusal on the other tenant tells its resources apart from absent ones."""
    world = build_world(container)
    callers = [*ROLE_MAY, "sysadmin", *REFUSED_TOKENS]
    wrong: list[str] = []
    leaks: list[str] = []
    secrets = [world.model[OTHER], world.digest[OTHER], world.blob_bytes[OTHER].decode()]
    rules = {key: rule for key, rule in RULES.items() if family_of(key) == family}
    assert rules, f"no route in family {family}"
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        for key, rule in rules.items():
            for caller, tenant in itertools.product(callers, (OWN, OTHER)):
                want = expected_status(rule, caller, tenant)
                r = call(client, world, key, rule, caller, tenant)
                if r.status_code != want:
                    wrong.append(f"{key[0]} {key[1]} as {caller} on tenant {tenant}: {r.status_code}, want {want}"
                                 f" {r.text[:120]}")
                    continue
                if want in (401, 403) and key[0] != "HEAD":
                    # The OCI endpoint answers with the distribution spec's error JSON (docs/oci.md).
                    media = ("text/html; charset=utf-8" if rule.console else
                             "application/json" if key[1].startswith("/v2/") else "application/problem+json")
                    assert r.headers["content-type"] == media, (key, caller)
                # (The sign-in form names no tenant; each of its answers carries a fresh CSRF token.)
                if tenant == OTHER and want in (401, 403, 404) and rule.who != SIGNS_IN:
                    # A refusal says nothing of what tenant b holds: not its names, digests or bytes,
                    # and it reads the same whether the resource exists or not.
                    found = [s for s in secrets if s in r.text]
                    absent = call(client, world, key, rule, caller, tenant, name="no-such-model", number="99",
                                  digest="f" * 64, webhook_id=ABSENT_WEBHOOK)
                    # A webhook id is the caller's own word, echoed back: the same answer names either id.
                    told = absent.content.replace(ABSENT_WEBHOOK.encode(), str(world.webhooks[tenant]).encode())
                    if found or (absent.status_code, told) != (r.status_code, r.content):
                        leaks.append(f"{key[0]} {key[1]} as {caller}: {r.status_code} {r.text[:160]!r} vs "
                                     f"absent {absent.status_code} {absent.text[:160]!r}, names {found}")
    assert not wrong, f"{len(wrong)} unexpected statuses:\n" + "\n".join(wrong)
    assert not leaks, "refusals that tell tenant b's resources apart:\n" + "\n".join(leaks)
