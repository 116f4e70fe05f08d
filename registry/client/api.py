"""One typed client of the registry API for serving nodes: trust roots, release manifests, blob bytes.

Paths are built here and nowhere else; answers come back as small dataclasses, and problems as the
errors of :mod:`registry.client.errors`. Transport URLs (presigned, possibly another host) are read with a
second HTTP client that never sends the node's bearer token: a presigned S3 URL carries its own
authorisation, and the registry's token must not travel to a bucket.

Example:
    >>> api = RegistryApi("http://127.0.0.1:1", "token")
    >>> api.manifest_path("acme", "tiny")
    '/v1/models/acme/tiny/manifest'
    >>> api.close()
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urljoin

import httpx

from registry.client.errors import NetworkError, from_problem
from registry.client.http import RegistryClient, RemoteError, tls_context
from registry.client.token_file import TokenFile
from registry.client.transfer import USER_AGENT, RangeReader, check_range_answer, redact
from registry.domain.errors import ChunksNotRecordedError, RegistryError, SizeMismatchError
from registry.domain.limits import MAX_RELEASE_BYTES, MAX_ROOT_BYTES

MAX_MANIFEST_RESPONSE_BYTES = 2 * MAX_RELEASE_BYTES + (4 << 20)
"""The manifest response: the envelope (base64, so 4/3 of the payload), transport URLs and the bundle."""


MANIFEST_RETRIES = 3
"""How many times a manifest request answered 503 with ``Retry-After`` is asked again before its error is raised."""
MAX_RETRY_AFTER_SECONDS = 10.0
"""The longest a node waits on one ``Retry-After``, whatever the registry asks."""


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a 503 answer asks the caller to wait (its ``Retry-After``: delay-seconds or an HTTP date),
    at most :data:`MAX_RETRY_AFTER_SECONDS`; None for any other answer, or a 503 that names no time.

    Example:
        >>> retry_after(httpx.Response(503, headers={"Retry-After": "2"}))
        2.0
        >>> retry_after(httpx.Response(500, headers={"Retry-After": "2"})) is None
        True
    """
    value = response.headers.get("retry-after", "").strip()
    if response.status_code != 503 or not value:
        return None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _seg(value: str) -> str:
    return quote(value, safe="")


@dataclasses.dataclass(frozen=True)
class ManifestResponse:
    """What ``GET .../manifest`` answers: the signed release and the unsigned things beside it."""

    envelope: dict[str, Any]
    transport: dict[str, str]
    signature_bundle: dict[str, Any]
    trust_root_version: int | None
    etag: str | None
    log: Any = None
    """The checkpoint and inclusion proofs of the release's events (unsigned; checked by ``log_proofs``)."""

    @classmethod
    def from_json(cls, body: Any, etag: str | None) -> "ManifestResponse":
        if not isinstance(body, dict) or not isinstance(body.get("envelope"), dict) \
                or not isinstance(body.get("transport"), dict) or not isinstance(body.get("signature_bundle"), dict):
            raise RegistryError("the manifest response has no envelope, transport and signature_bundle objects")
        transport = body["transport"]
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in transport.items()):
            raise RegistryError("the manifest's transport maps paths to URL strings")
        version = body.get("trust_root_version")
        return cls(body["envelope"], dict(transport), body["signature_bundle"],
                   version if type(version) is int else None, etag, body.get("log"))


@dataclasses.dataclass(frozen=True)
class EventPage:
    """What ``GET /v1/events`` answers: CloudEvents (JSON objects, unchecked) and the cursor to read on from."""

    events: list[dict[str, Any]]
    cursor: int

    @classmethod
    def from_json(cls, body: Any, after: int) -> "EventPage":
        if not isinstance(body, dict) or not isinstance(body.get("events"), list) \
                or type(body.get("cursor")) is not int:
            raise RegistryError("the event stream's answer has no events list and integer cursor")
        if body["cursor"] < after:
            raise RegistryError(f"the event stream's cursor went back, from {after} to {body['cursor']}")
        return cls([e for e in body["events"] if isinstance(e, dict)], body["cursor"])


def _model(tenant: str, name: str) -> str:
    return f"/v1/models/{_seg(tenant)}/{_seg(name)}"


def _version(tenant: str, name: str, number: int) -> str:
    return f"{_model(tenant, name)}/versions/{int(number)}"


class RegistryApi:
    """Every call of the registry's API that modelreg's own clients make: the ``modelreg`` commands and a
    serving node's fetch. ``url`` is the registry (``MODELREG_URL``), ``token`` the caller's.

    Answers are the API's JSON documents (the OpenAPI document at ``/openapi.json`` describes each);
    failures raise :class:`registry.client.http.RemoteError` with the problem's type and detail.
    """

    def __init__(self, url: str, token: "str | TokenFile | None", *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.client = RegistryClient(url, token, timeout=timeout, transport=transport)
        # No Authorization header, no base URL: transport URLs are absolute and carry their own credentials.
        self.blobs = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), follow_redirects=False,
                                  headers={"User-Agent": USER_AGENT}, transport=transport, verify=tls_context())
        # An injected transport (tests, an in-process app) carries every request: no direct path around it.
        self._ranges = RangeReader(timeout=timeout) if transport is None else None

    # --- identity ---------------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return self.client.get("/v1/whoami")

    def oidc_login_info(self) -> dict[str, Any]:
        """The identity provider and public client ``modelreg login`` signs in with."""
        return self.client.get("/v1/auth/oidc")

    def oidc_token(self, *, code: str, code_verifier: str, redirect_uri: str, nonce: str) -> dict[str, Any]:
        """Trade an authorization code (from the loopback redirect) for a short-lived registry token."""
        return self.client.post("/v1/auth/oidc/token", json={"code": code, "code_verifier": code_verifier,
                                                              "redirect_uri": redirect_uri, "nonce": nonce})

    def create_tenant(self, name: str) -> dict[str, Any]:
        return self.client.post("/v1/tenants", json={"name": name})

    def tenants(self) -> list[dict[str, Any]]:
        return self.client.get("/v1/tenants")

    def set_oci_anonymous_pull(self, tenant: str, enabled: bool) -> dict[str, Any]:
        return self.client.put(f"/v1/tenants/{_seg(tenant)}/oci-anonymous-pull", json={"enabled": enabled})

    def create_principal(self, name: str, *, admin: bool = False) -> dict[str, Any]:
        return self.client.post("/v1/principals", json={"name": name, "is_admin": admin})

    def grant_role(self, principal: str, tenant: str, role: str, capacity: str = "") -> dict[str, Any]:
        return self.client.post(f"/v1/principals/{_seg(principal)}/roles",
                                json={"tenant": tenant, "role": role, "capacity": capacity})

    def issue_token(self, principal: str, **body: Any) -> dict[str, Any]:
        return self.client.post(f"/v1/principals/{_seg(principal)}/tokens", json=body)

    def revoke_role(self, principal: str, tenant: str, role: str, capacity: str = "") -> None:
        self.client.delete(f"/v1/principals/{_seg(principal)}/roles",
                           json={"tenant": tenant, "role": role, "capacity": capacity})

    def tokens(self, principal: str) -> list[dict[str, Any]]:
        return self.client.get(f"/v1/principals/{_seg(principal)}/tokens")

    def revoke_token(self, token_id: int) -> None:
        self.client.delete(f"/v1/tokens/{int(token_id)}")

    def bind_node(self, *, issuer: str, namespace: str, service_account: str, tenant: str,
                  role: str = "node") -> dict[str, Any]:
        return self.client.post("/v1/node-bindings", json={
            "issuer": issuer, "namespace": namespace, "service_account": service_account, "tenant": tenant,
            "role": role})

    def unbind_node(self, *, issuer: str, namespace: str, service_account: str, tenant: str) -> None:
        self.client.delete("/v1/node-bindings", params={
            "issuer": issuer, "namespace": namespace, "service_account": service_account, "tenant": tenant})

    def node_bindings(self, tenant: str | None = None) -> list[dict[str, Any]]:
        return self.client.get("/v1/node-bindings", params={"tenant": tenant} if tenant else None)

    def set_disabled(self, principal: str, disabled: bool) -> dict[str, Any]:
        return self.client.post(f"/v1/principals/{_seg(principal)}/{'disable' if disabled else 'enable'}")

    # --- quotas, retention, usage ---------------------------------------------------------------

    def set_quota(self, tenant: str, limit: int | None) -> dict[str, Any]:
        return self.client.put(f"/v1/tenants/{_seg(tenant)}/quota", json={"bytes": limit})

    def quota(self, tenant: str) -> dict[str, Any]:
        return self.client.get(f"/v1/tenants/{_seg(tenant)}/quota")

    def set_retention(self, tenant: str, name: str, keep_last: int,
                      approved_within_days: int | None) -> dict[str, Any]:
        return self.client.put(f"{_model(tenant, name)}/retention",
                               json={"keep_last": keep_last, "approved_within_days": approved_within_days})

    def retention(self, tenant: str, name: str) -> dict[str, Any]:
        return self.client.get(f"{_model(tenant, name)}/retention")

    def apply_retention(self, tenant: str, name: str) -> dict[str, Any]:
        return self.client.post(f"{_model(tenant, name)}/retention/apply")

    def usage(self, tenant: str, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        params = {"tenant": tenant, **{k: v for k, v in (("since", since), ("until", until)) if v is not None}}
        return self.client.get("/v1/usage", params=params)

    # --- versions ---------------------------------------------------------------------------

    def submit(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        # The registry pins the revision before it answers: listing a hub is quick, but hashing a large
        # local directory to name its revision can take minutes.
        return self.client.post(f"{_model(tenant, name)}/versions", json=body,
                                timeout=httpx.Timeout(30.0, read=3600.0))

    def derive(self, tenant: str, name: str, number: int, body: dict[str, Any]) -> dict[str, Any]:
        """A new version of the unit from version ``number`` with new parts (``modelreg derive``)."""
        return self.client.post(f"{_version(tenant, name, number)}/derive", json=body)

    def has_blob(self, tenant: str, digest: str) -> bool:
        """Whether ``tenant`` owns the blob already (an uploader skips it)."""
        try:
            self.client.request("HEAD", f"/v1/blobs/sha256/{digest}", params={"tenant": tenant})
            return True
        except RemoteError as exc:
            if exc.status == 404:
                return False
            raise

    def put_blob(self, tenant: str, digest: str, data: Any, size: int) -> dict[str, Any]:
        return self.client.request("PUT", f"/v1/blobs/sha256/{digest}", params={"tenant": tenant}, content=data,
                                   headers={"Content-Length": str(size)})

    def version(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(_version(tenant, name, number))

    def diff(self, tenant: str, name: str, old: int, new: int) -> dict[str, Any]:
        """The release-unit diff from version ``old`` to ``new`` (``modelreg diff``)."""
        return self.client.get(f"{_model(tenant, name)}/diff/{int(old)}/{int(new)}")

    def signature(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/signature")

    def scans(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/scans")

    def rescan(self) -> dict[str, Any]:
        return self.client.post("/v1/scans/rescan")

    # --- approvals and policy -----------------------------------------------------------------

    def decide(self, tenant: str, name: str, number: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.client.post(f"{_version(tenant, name, number)}/approvals", json=body)

    def preview_decision(self, tenant: str, name: str, number: int, body: dict[str, Any]) -> dict[str, Any]:
        """What would remain unmet after the decision ``body`` (``yours``: what its capacity leaves)."""
        return self.client.post(f"{_version(tenant, name, number)}/approvals/preview", json=body)

    def add_approval_files(self, tenant: str, name: str, number: int, files: list[str]) -> dict[str, Any]:
        """Add file reviews to the caller's own approval of the version."""
        return self.client.post(f"{_version(tenant, name, number)}/approvals/files", json={"files": files})

    def approval_status(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/approvals")

    def policy(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/policy")

    # --- evals ---------------------------------------------------------------------------------

    def evals(self, tenant: str, name: str, number: int) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/evals")

    def eval(self, tenant: str, name: str, number: int, suite: str) -> dict[str, Any]:
        return self.client.get(f"{_version(tenant, name, number)}/evals/{_seg(suite)}")

    def eval_log(self, tenant: str, name: str, number: int, suite: str) -> bytes:
        return self.client.get_bytes(f"{_version(tenant, name, number)}/evals/{_seg(suite)}/log")

    def add_evalset(self, name: str, data: bytes, description: str = "") -> dict[str, Any]:
        return self.client.put(f"/v1/evalsets/{_seg(name)}", content=data, params={"description": description},
                               headers={"Content-Type": "application/x-ndjson"})

    def evalsets(self) -> dict[str, Any]:
        return self.client.get("/v1/evalsets")

    def evalset(self, name: str, number: int | None = None) -> dict[str, Any]:
        """Every version of the eval set, or version ``number``."""
        if number is None:
            return self.client.get(f"/v1/evalsets/{_seg(name)}")
        return self.client.get(f"/v1/evalsets/{_seg(name)}/versions/{int(number)}")

    def evalset_cases(self, name: str, number: int) -> bytes:
        return self.client.get_bytes(f"/v1/evalsets/{_seg(name)}/versions/{int(number)}/cases")

    # --- aliases, revocation, keys, audit --------------------------------------------------------

    def promote(self, tenant: str, name: str, alias: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.client.put(f"{_model(tenant, name)}/aliases/{_seg(alias)}", json=body)

    def rollback(self, tenant: str, name: str, alias: str, comment: str) -> dict[str, Any]:
        return self.client.post(f"{_model(tenant, name)}/aliases/{_seg(alias)}/rollback", json={"comment": comment})

    def aliases(self, tenant: str, name: str) -> list[dict[str, Any]]:
        return self.client.get(f"{_model(tenant, name)}/aliases")

    def revoke(self, tenant: str, name: str, number: int, reason: str) -> dict[str, Any]:
        return self.client.post(f"{_version(tenant, name, number)}/revoke", json={"reason": reason})

    def keys(self) -> dict[str, Any]:
        return self.client.get("/v1/keys")

    def log_checkpoint(self) -> bytes:
        """The verifiable audit log's newest signed checkpoint (a C2SP signed note)."""
        return self.client.get_bytes("/log/checkpoint", limit=1 << 20)

    def log_tile(self, tile: Any) -> bytes:
        """A tile (a ``registry.tlog.tiles.Tile``) of the verifiable audit log: at most 256 hashes."""
        return self.client.get_bytes(f"/log/{tile.path}", limit=256 * 32)

    def log_consistency(self, first: int, second: int) -> dict[str, Any]:
        return self.client.get("/log/proof/consistency", params={"first": first, "second": second})

    def log_inclusion(self, index: int, size: int) -> dict[str, Any]:
        return self.client.get("/log/proof/inclusion", params={"index": index, "size": size})

    def audit_checkpoints(self, after: int, limit: int) -> list[dict[str, Any]]:
        return self.client.get("/v1/audit/checkpoints", params={"after": after, "limit": limit})

    # --- provenance (auditors) ---------------------------------------------------------------------

    def _provenance(self, tenant: str, name: str, question: str, ref: str, **params: Any) -> dict[str, Any]:
        query = {"ref": ref, **{k: v for k, v in params.items() if v is not None}}
        return self.client.get(f"/v1/provenance/{_seg(tenant)}/{_seg(name)}/{question}", params=query)

    def provenance_origin(self, tenant: str, name: str, ref: str) -> dict[str, Any]:
        return self._provenance(tenant, name, "origin", ref)

    def provenance_files(self, tenant: str, name: str, ref: str, *, limit: int = 1000,
                         cursor: str | None = None) -> dict[str, Any]:
        return self._provenance(tenant, name, "files", ref, limit=limit, cursor=cursor)

    def provenance_scans(self, tenant: str, name: str, ref: str, *, limit: int = 1000,
                         cursor: str | None = None) -> dict[str, Any]:
        return self._provenance(tenant, name, "scans", ref, limit=limit, cursor=cursor)

    def provenance_evals(self, tenant: str, name: str, ref: str) -> dict[str, Any]:
        return self._provenance(tenant, name, "evals", ref)

    def provenance_license(self, tenant: str, name: str, ref: str) -> dict[str, Any]:
        return self._provenance(tenant, name, "license", ref)

    def provenance_approvals(self, tenant: str, name: str, ref: str) -> dict[str, Any]:
        return self._provenance(tenant, name, "approvals", ref)

    def provenance_nodes(self, tenant: str, name: str, ref: str, *, limit: int = 1000,
                         cursor: str | None = None) -> dict[str, Any]:
        return self._provenance(tenant, name, "nodes", ref, limit=limit, cursor=cursor)

    def provenance_alias(self, tenant: str, name: str, alias: str, *, at: str | None = None, limit: int = 1000,
                         cursor: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("at", at), ("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get(f"/v1/provenance/{_seg(tenant)}/{_seg(name)}/aliases/{_seg(alias)}", params=params)

    def provenance_running(self, tenant: str, name: str, ref: str, *, by: str = "node", limit: int = 1000,
                           cursor: str | None = None) -> dict[str, Any]:
        return self._provenance(tenant, name, "running", ref, by=by, limit=limit, cursor=cursor)

    def report_receipts(self, body: dict[str, Any]) -> dict[str, Any]:
        """Say which releases this node program holds and dropped (``POST /v1/receipts``)."""
        return self.client.post("/v1/receipts", json=body)

    def provenance_revoked_nodes(self, tenant: str, *, limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("tenant", tenant), ("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get("/v1/provenance/revoked-nodes", params=params)

    def provenance_blob(self, digest: str, *, limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
        """``digest``: 64 hex digits (without ``sha256:``)."""
        params = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get(f"/v1/provenance/blobs/sha256:{_seg(digest)}", params=params)

    def provenance_components(self, tenant: str, name: str, ref: str) -> dict[str, Any]:
        return self._provenance(tenant, name, "components", ref)

    def provenance_component(self, digest: str, *, component: str | None = None, limit: int = 1000,
                             cursor: str | None = None) -> dict[str, Any]:
        """``digest``: 64 hex digits (without ``sha256:``); ``component``: only versions whose component of
        that name has it."""
        params = {k: v for k, v in (("component", component), ("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get(f"/v1/provenance/components/sha256:{_seg(digest)}", params=params)

    def provenance_component_history(self, tenant: str, name: str, alias: str, component: str, *,
                                     limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get(f"/v1/provenance/{_seg(tenant)}/{_seg(name)}/aliases/{_seg(alias)}/components/"
                               f"{_seg(component)}", params=params)

    def provenance_adapters(self, digest: str, *, limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
        """``digest``: 64 hex digits (without ``sha256:``) of a base's ``weights`` component."""
        params = {k: v for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return self.client.get(f"/v1/provenance/adapters/sha256:{_seg(digest)}", params=params)

    def provenance_adapter_base(self, tenant: str, name: str, ref: str, *, at: str | None = None) -> dict[str, Any]:
        return self._provenance(tenant, name, "adapter-base", ref, at=at)

    def provenance_audit_log(self, checkpoints: list[Any]) -> dict[str, Any]:
        return self.client.post("/v1/provenance/audit-log", json={"checkpoints": checkpoints})

    def export(self, tenant: str, name: str, number: int, fmt: str) -> bytes:
        """A version's export (``cyclonedx`` or ``slsa``), byte for byte as the registry serves it."""
        return self.client.get_bytes(f"/v1/provenance/{_seg(tenant)}/{_seg(name)}/versions/{int(number)}/export",
                                     params={"format": fmt})

    # --- webhooks ---------------------------------------------------------------------------------

    def add_webhook(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.client.post("/v1/webhooks", json=body)

    def webhooks(self, tenant: str | None = None) -> list[dict[str, Any]]:
        return self.client.get("/v1/webhooks", params={"tenant": tenant} if tenant else None)

    def webhook(self, webhook_id: int) -> dict[str, Any]:
        return self.client.get(f"/v1/webhooks/{int(webhook_id)}")

    def remove_webhook(self, webhook_id: int) -> None:
        self.client.delete(f"/v1/webhooks/{int(webhook_id)}")

    def webhook_deliveries(self, webhook_id: int, limit: int = 100) -> list[dict[str, Any]]:
        return self.client.get(f"/v1/webhooks/{int(webhook_id)}/deliveries", params={"limit": limit})

    def redeliver_webhook(self, webhook_id: int, from_event: str | None = None) -> dict[str, Any]:
        return self.client.post(f"/v1/webhooks/{int(webhook_id)}/redeliver", json={"from_event": from_event})

    def test_webhook(self, webhook_id: int) -> dict[str, Any]:
        """Queue a test ping; the pending delivery (the workers send it: read it with :meth:`webhook_delivery`)."""
        return self.client.post(f"/v1/webhooks/{int(webhook_id)}/test")

    def webhook_delivery(self, webhook_id: int, delivery_id: int) -> dict[str, Any] | None:
        """One delivery of the webhook, by its id (None when there is none)."""
        found = self.client.get(f"/v1/webhooks/{int(webhook_id)}/deliveries",
                                params={"before": int(delivery_id) + 1, "limit": 1})
        return found[0] if found and found[0]["id"] == delivery_id else None

    def rotate_webhook_secret(self, webhook_id: int, keep_previous_seconds: float) -> dict[str, Any]:
        return self.client.post(f"/v1/webhooks/{int(webhook_id)}/rotate-secret",
                                json={"keep_previous_seconds": keep_previous_seconds})

    # --- serving nodes ---------------------------------------------------------------------------

    def admission_review(self, body: dict[str, Any]) -> dict[str, Any]:
        """The registry's decision on an object's model references (``POST /v1/admission/reviews``)."""
        return self.client.post("/v1/admission/reviews", json=body)

    def admission_answered(self, body: dict[str, Any]) -> dict[str, Any]:
        """Report reviews the webhook answered from its own proof (``POST /v1/admission/answered``): how many the
        registry recorded, and why it refused each other."""
        return self.client.post("/v1/admission/answered", json=body)

    def events(self, after: int, *, types: tuple[str, ...] = (), limit: int = 100,
               wait: float | None = None) -> EventPage:
        """Catalogue events after the cursor ``after`` (``GET /v1/events``), oldest first.

        Args:
            wait: Seconds the server may hold the request until an event arrives (long poll; a server
                that does not know ``wait`` answers at once).

        Raises:
            RemoteError: the registry refused (``status`` 401, 410...); NetworkError: unreachable.
        """
        params: dict[str, Any] = {"after": int(after), "limit": int(limit), "type": list(types)}
        if wait is not None:
            params["wait"] = int(wait)
        timeout = self.client.http.timeout.read or 60.0
        return EventPage.from_json(self.client.get("/v1/events", params=params, timeout=(wait or 0) + timeout),
                                   int(after))

    @staticmethod
    def manifest_path(tenant: str, name: str) -> str:
        return f"/v1/models/{_seg(tenant)}/{_seg(name)}/manifest"

    # --- trust roots -----------------------------------------------------------------------

    def trust_root_bytes(self, version: int | None = None) -> bytes | None:
        """The body of root ``version`` (the newest when None) exactly as received, or None on a 404.

        At most :data:`MAX_ROOT_BYTES` are read: a server cannot make a node read without end.
        """
        path = "/v1/trust-root" if version is None else f"/v1/trust-root/{int(version)}"
        try:
            return self.client.get_bytes(path, limit=MAX_ROOT_BYTES)
        except RemoteError as exc:
            if exc.status == 404:
                return None
            raise from_problem(exc.status, exc.problem_code, exc.message, {}) from None
        except RegistryError as exc:
            if isinstance(exc, NetworkError):
                raise
            raise NetworkError(str(exc)) from None  # over the size cap: the server misbehaves

    def trust_root(self, version: int | None = None) -> dict[str, Any] | None:
        """Root envelope ``version`` (the newest when None), or None when the registry has none (404)."""
        raw = self.trust_root_bytes(version)
        if raw is None:
            return None
        try:
            envelope = json.loads(raw)
        except ValueError:
            raise RegistryError(f"trust root {version or 'newest'} is not JSON") from None
        if not isinstance(envelope, dict):
            raise RegistryError(f"trust root {version or 'newest'} is not a JSON object")
        return envelope

    # --- release manifests -----------------------------------------------------------------

    def manifest(self, tenant: str, name: str, ref: str, *, etag: str | None = None,
                 wait: float | None = None) -> ManifestResponse | None:
        """The release of ``tenant/name@ref`` for this node, or None when unchanged since ``etag`` (304).

        A 503 with ``Retry-After`` (the registry's log not yet covering the release) is asked again after
        that wait, :data:`MANIFEST_RETRIES` times at most: the node waits instead of failing at once.

        Args:
            etag: The ETag of the manifest the node holds; sent as If-None-Match.
            wait: Seconds the server may hold the request until the alias moves (long poll).

        Raises:
            RevokedError, NotApprovedError, ReleaseNotFoundError: the registry refused.
            NetworkError: unreachable, or a 5xx (a 503 still so after the retries).
        """
        params: dict[str, Any] = {"ref": ref}
        if wait is not None:
            params["wait"] = int(wait)
        headers = {"If-None-Match": etag} if etag else {}
        timeout = self.client.http.timeout.read or 60.0
        for attempt in range(MANIFEST_RETRIES + 1):
            try:
                with self.client.http.stream("GET", self.manifest_path(tenant, name), params=params,
                                             headers=headers, timeout=(wait or 0) + timeout) as response:
                    if response.status_code == 304:
                        return None
                    body = _read_capped(response, MAX_MANIFEST_RESPONSE_BYTES)
                    delay = retry_after(response) if attempt < MANIFEST_RETRIES else None
                    if delay is None and response.status_code >= 400:
                        raise _problem(response.status_code, body)
                    if delay is None:
                        try:
                            data = json.loads(body)
                        except ValueError:
                            raise RegistryError("the manifest response is not JSON") from None
                        return ManifestResponse.from_json(data, response.headers.get("etag"))
            except httpx.HTTPError as exc:
                raise NetworkError(f"cannot reach the registry at {self.client.url}: {exc}") from exc
            # The registry said when to ask again (its log catching up with the release): wait, a few times.
            time.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

    def chunk_list(self, tenant: str, name: str, number: int, sha256: str, *, limit: int) -> bytes:
        """The chunk list of the file with ``sha256`` of ``tenant/name@number``, unchecked: at most ``limit``
        bytes (what the signed release says the file has) are read. Check it with
        :func:`registry.node.chunks.load_chunk_list`.

        Raises:
            ChunksNotRecordedError and the other refusals as :func:`registry.client.errors.from_problem`
            builds them; NetworkError: unreachable, a 5xx, or more than ``limit`` bytes.
        """
        path = f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{int(number)}/chunks/{_seg(sha256)}"
        try:
            return self.client.get_bytes(path, limit=limit)
        except RemoteError as exc:
            if exc.problem_code == ChunksNotRecordedError.code:
                raise ChunksNotRecordedError.from_wire(exc.message, digest=sha256) from None
            raise from_problem(exc.status, exc.problem_code, exc.message, {}) from None
        except RegistryError as exc:
            if isinstance(exc, NetworkError):
                raise
            raise NetworkError(str(exc)) from None  # over the cap: the server misbehaves

    # --- blob bytes ------------------------------------------------------------------------

    @contextmanager
    def blob_range(self, url: str, start: int, end: int, total: int) -> Iterator[httpx.Response]:
        """Stream bytes ``[start, end)`` of a blob of ``total`` bytes from a transport URL.

        The caller reads no more than ``end - start`` bytes from the response.

        Raises:
            TransportError: the server ignored the range, or the blob it holds has another size.
            NetworkError: unreachable, or an error status.
        """
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        # A registry serving its own blobs (a local store without a public URL) names them by path.
        url = urljoin(self.client.url + "/", url)
        try:
            with self.blobs.stream("GET", url, headers=headers) as response:
                _check_range_response(response, start, end, total)
                yield response
        except httpx.HTTPError as exc:
            raise NetworkError(f"cannot read {_redact(url)}: {exc}") from exc

    def read_range_into(self, url: str, start: int, end: int, total: int, into: memoryview,
                        advance: Callable[[int], None]) -> None:
        """Fill ``into`` (``end - start`` bytes) with bytes ``[start, end)`` of a blob of ``total`` bytes.

        ``advance(n)`` is called as bytes land, so a caller knows how far a failed read got. Straight
        into ``into`` over ``http.client`` where httpx would have gone straight to the server
        (:mod:`registry.client.transfer`); through httpx otherwise (a proxy, an injected transport).

        Raises:
            TransportError, SizeMismatchError: the server ignored the range, or holds another size.
            NetworkError: unreachable, an error status, or the stream ended early.
        """
        url = urljoin(self.client.url + "/", url)
        if self._ranges is not None and self._ranges.usable(url):
            self._ranges.read_into(url, start, end, total, into, advance)
            return
        wanted, got = end - start, 0
        with self.blob_range(url, start, end, total) as response:
            try:
                for chunk in response.iter_raw(1 << 20):
                    take = min(len(chunk), wanted - got)
                    if take < len(chunk) and response.status_code == 206:
                        # Never more than declared: the rest is not read, and the blob is not what was signed.
                        raise SizeMismatchError(_redact(url), expected=total, actual=start + got + len(chunk))
                    into[got:got + take] = chunk[:take]
                    got += take
                    advance(take)
                    if got == wanted:
                        break
            except httpx.HTTPError as exc:
                raise NetworkError(f"cannot read {_redact(url)}: {exc}") from exc
        if got < wanted:
            raise NetworkError(f"the stream of {_redact(url)} ended {wanted - got} bytes early")

    def close(self) -> None:
        self.client.close()
        self.blobs.close()
        if self._ranges is not None:
            self._ranges.close()

    def __enter__(self) -> "RegistryApi":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_redact = redact


def _read_capped(response: httpx.Response, limit: int) -> bytes:
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > limit:
            raise NetworkError(f"the registry's answer is over {limit} bytes")
    return bytes(data)


def _problem(status: int, body: bytes) -> RegistryError:
    try:
        problem = json.loads(body)
        if not isinstance(problem, dict):
            raise ValueError
    except ValueError:
        problem = {"detail": body[:200].decode("utf-8", "replace") or f"HTTP {status}"}
    remote = RemoteError(status, problem)
    return from_problem(status, remote.problem_code, remote.message,
                        {"status": status, "problem": remote.problem_code})


def _check_range_response(response: httpx.Response, start: int, end: int, total: int) -> None:
    if response.status_code >= 400:
        response.read()
    check_range_answer(_redact(str(response.url)), response.status_code, response.headers, start, end, total)
