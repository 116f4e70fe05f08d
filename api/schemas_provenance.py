"""Answers of the provenance questions (``/v1/provenance``): one ``<Question>Public`` per route."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.schemas import Strict
from registry.services.provenance import MAX_CHECKPOINTS


class CanaryNote(BaseModel):
    version: int
    tenants: list[str]
    note: str


class RefPublic(BaseModel):
    """How the version was named: by its number, or by an alias (its main version; a canary is noted)."""

    ref: str
    alias: str | None
    version: int
    canary: CanaryNote | None = Field(description="set when the alias also serves a canary version to some "
                                                  "tenants: the answer is of its main version")


class VersionHead(BaseModel):
    model: str
    version: int
    state: str
    ref: RefPublic


class SourcePublic(BaseModel):
    kind: str
    repo: str
    endpoint: str | None


class RevocationNote(BaseModel):
    at: str | None
    by: str | None
    reason: str | None


class OriginPublic(VersionHead):
    source: SourcePublic
    requested_revision: str | None
    resolved_revision: str | None
    include: list[str]
    exclude: list[str]
    submitted_by: str | None
    submitted_at: str | None
    sealed_at: str | None
    revocation: RevocationNote | None


class FileRow(BaseModel):
    path: str
    size: int
    sha256: str | None


class SigningKeyPublic(BaseModel):
    key_id: str = Field(description="hex sha256 of the public key PEM")
    algorithm: str
    trust_root_versions: list[int] = Field(description="the published trust roots holding the key")
    public_key_pem: str | None
    fingerprint_sha256: str | None = Field(description="hex sha256 of the DER SubjectPublicKeyInfo")


class FilesPublic(VersionHead):
    files: list[FileRow]
    next_cursor: str | None
    manifest_digest: str | None
    statement_digest: str | None = Field(description="sha256 of the signed model-signing statement")
    signed_by: SigningKeyPublic | None


class ScanRecord(BaseModel):
    scanner: str
    scanner_version: str
    format: str
    verdict: str
    findings: list[Any]
    duration_ms: int
    scanned_at: str


class FileScans(BaseModel):
    path: str
    sha256: str | None
    verdict: str | None
    format: str | None
    scans: list[ScanRecord]


class ScansPublic(VersionHead):
    files: list[FileScans]
    next_cursor: str | None


class EvalsPublic(VersionHead):
    evals: list[dict[str, Any]] = Field(description="one per suite: suite, suite_version, runner, runner_version, "
                                                    "status, metrics...")


class DecisionRow(BaseModel):
    principal: str
    capacity: str
    decision: str
    comment: str
    files: list[str]
    at: str | None


class ApprovingDecision(BaseModel):
    outcome: str
    bundle_digest: str
    input_digest: str
    decided_at: str | None


class LicensePublic(VersionHead):
    license: str | None
    declared: str | None
    findings: list[dict[str, Any]] = Field(description="source: declared, card (the Hub card field), readme "
                                                       "(front matter), license_file:<path> or conflict")
    allow_listed: bool
    license_capacity: str
    approved_by: list[DecisionRow]
    policy_decision: ApprovingDecision | None


class SeparationOfDuties(BaseModel):
    held: bool
    reasons: list[str]
    required_capacities: list[str]
    submitter: str | None


class ApprovalsPublic(VersionHead):
    approvals: list[DecisionRow]
    policy_decision: ApprovingDecision | None
    separation_of_duties: SeparationOfDuties


class MoveRow(BaseModel):
    id: int
    action: str
    at: str | None
    by: str
    from_version: int | None
    from_canary: dict[str, Any] | None
    to_version: int
    to_canary: dict[str, Any] | None
    comment: str
    bundle_digest: str
    input_digest: str


class AliasAt(BaseModel):
    at: str
    version: int | None = Field(description="what the alias pointed at then (None: it did not exist yet)")
    canary: dict[str, Any] | None
    move: int | None


class AliasHistoryPublic(BaseModel):
    model: str
    alias: str
    version: int
    canary: dict[str, Any] | None
    moves: list[MoveRow]
    next_cursor: str | None
    at: AliasAt | None = None


class NodeRow(BaseModel):
    principal: str
    first_at: str | None
    last_at: str | None
    count: int = Field(description="release manifests received")
    refs: list[str]
    for_tenants: list[str]
    hf_downloads: int = Field(0, description="files downloaded through /hf (first_at and last_at span all)")
    oci_pulls: int = Field(0, description="manifests pulled through the OCI endpoint /v2")


class NodesPublic(VersionHead):
    nodes: list[NodeRow]
    next_cursor: str | None


class RevokedNodeRow(BaseModel):
    principal: str
    model: str
    version: int
    ref: str
    for_tenant: str
    last_received_at: str | None
    serial: int
    revocation: RevocationNote


class RunningPlace(BaseModel):
    """A place holding the version now, as its reporter said (``registry/services/receipts.py``)."""

    program: str = Field(description="fetch, cache-warm, serve-s3, cache-sweep, cluster-watch or admission")
    principal: str = Field(description="the node identity that reported it")
    node: str | None = Field(description="the node it is on (a pod's node), when known")
    reporter_node: str | None
    place: dict[str, Any] = Field(description="where: path (node, path), bucket (node, bucket, prefix) or pod "
                                              "(namespace, pod, uid, volume)")
    since: str = Field(description="when it was first reported held")
    last_reported_at: str
    reporter_last_report_at: str
    stale: bool = Field(description="its reporter has not reported for longer than the registry's stale period")


class RunningGroup(BaseModel):
    key: str | None = Field(description="the node, namespace or namespace/pod; null: places that are no pod")
    since: str
    stale: bool = Field(description="every place of the group is stale")
    places: list[RunningPlace]


class RunningPublic(VersionHead):
    by: str
    revocation: RevocationNote | None
    stale_after_seconds: float
    places: list[RunningPlace]
    groups: list[RunningGroup]
    next_cursor: str | None


class HoldingRevokedPlace(RunningPlace):
    model: str
    version: int


class RevokedNodesPublic(BaseModel):
    tenant: str
    holding: list[HoldingRevokedPlace] = Field(description="places reporting that they hold a revoked version "
                                                           "now (first page only)")
    nodes: list[RevokedNodeRow]
    next_cursor: str | None


class BlobVersionRow(BaseModel):
    model: str
    version: int
    state: str
    path: str
    size: int


class BlobVersionsPublic(BaseModel):
    digest: str
    versions: list[BlobVersionRow]
    next_cursor: str | None


class ComponentRow(BaseModel):
    name: str
    digest: str
    members: int = Field(description="how many files (or parts of files) the component holds")


class VersionComponentsPublic(VersionHead):
    components: list[ComponentRow]


class ComponentVersionRow(BaseModel):
    model: str
    version: int
    state: str
    component: str
    derived_from: int | None
    sealed_at: str | None


class ComponentVersionsPublic(BaseModel):
    digest: str
    component: str | None
    versions: list[ComponentVersionRow]
    next_cursor: str | None


class ComponentChangeRow(BaseModel):
    move: int
    at: str | None
    action: str
    by: str
    comment: str
    from_version: int | None
    to_version: int
    from_digest: str | None = Field(description="the component's digest before the move (None: absent)")
    to_digest: str | None = Field(description="its digest after the move (None: the version moved to lacks it)")
    approvals: list[DecisionRow] = Field(description="every decision on the version moved to")
    security_approvals: list[DecisionRow] = Field(description="its approvals in the security capacity")


class ComponentHistoryPublic(BaseModel):
    model: str
    alias: str
    component: str
    version: int
    digest: str | None = Field(description="the component's digest in the version the alias serves now")
    security_capacity: str
    changes: list[ComponentChangeRow]
    next_cursor: str | None


class BoundAdapterRow(BaseModel):
    model: str
    version: int
    state: str
    base: dict[str, Any] = Field(description="the base version the adapter names: {model, version}")
    requested: str = Field(description="what the submitter named as the base (acme/llm@prod, sha256:...)")
    peft_type: str | None = Field(description="the PEFT type the check at seal read (LORA...); None before the seal")
    sealed_at: str | None


class BoundAdaptersPublic(BaseModel):
    digest: str = Field(description="the base weights component digest asked about")
    adapters: list[BoundAdapterRow]
    next_cursor: str | None


class AdapterRefPublic(RefPublic):
    version: int | None = Field(description="the version named (None: the alias pointed at none at that time)")
    move: int | None = Field(None, description="with at: the alias move that set what it served then")


class AdapterBasePublic(BaseModel):
    model: str
    at: str | None = Field(description="the time asked about (UTC), or None: now")
    version: int | None = Field(description="the adapter version (None: the alias did not exist then)")
    state: str | None
    ref: AdapterRefPublic
    base: dict[str, Any] | None = Field(description="{model, version, weights_digest, manifest_digest, requested, "
                                                    "state}: the base the adapter is bound to (state None unless "
                                                    "you may read the base's tenant)")
    evals: list[dict[str, Any]] = Field(description="the adapter's eval results that ran on that base")
    elsewhere: list[dict[str, Any]] = Field(description="{suite, status, ran_on} of results that ran on another "
                                                        "base or on none: they cover nothing")


class AuditLogCheck(Strict):
    """The auditor's saved checkpoints, as ``GET /v1/audit/checkpoints`` served them."""

    checkpoints: list[dict[str, Any]] = Field(max_length=MAX_CHECKPOINTS)


class CheckpointNote(BaseModel):
    event_id: int
    event_hash: str
    at: str


class BrokenAt(BaseModel):
    event_id: int | None
    problem: str | None
    detail: str


class AuditLogPublic(BaseModel):
    intact: bool
    checkpoints: int
    newest_checkpoint: CheckpointNote | None
    events: int | None
    head_hash: str | None
    events_since_checkpoint: int | None
    broken: BrokenAt | None
