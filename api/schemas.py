"""Request and response bodies of the HTTP API (``<Thing>Create``, ``<Thing>Public``)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from api.params import NAME_PATTERN, ByteCount, PrincipalName, TenantName, VersionNumber
from registry.auth import Role
from registry.domain.adapters import MAX_BASE_REF_LENGTH
from registry.domain.aliases import MAX_CANARY_TENANTS
from registry.domain.events import NAMES as EVENT_TYPE_NAMES
from registry.domain.files import MAX_PATH_LENGTH
from registry.domain.licenses import MAX_LICENSE_LENGTH
from registry.domain.text import (
    MAX_COMMENT_LENGTH,
    MAX_DESCRIPTION_LENGTH,
    MAX_REVISION_LENGTH,
    MAX_SOURCE_LENGTH,
    FreeText,
    Label,
)
from registry.domain.unit_parts import MAX_PART_BYTES, MAX_PROMPTS
from registry.services.identity import CAPACITY_REQUIRED
from registry.sources.filters import MAX_GLOB_LENGTH, MAX_GLOBS

# A body's integers are JSON integers: pydantic's lax mode reads true, "1" and 1.0 as 1 (issue 18).
StrictVersionNumber = Annotated[VersionNumber, Field(strict=True)]
StrictByteCount = Annotated[ByteCount, Field(strict=True)]


def _rfc3339_text(value: Any) -> Any:
    # Lax pydantic reads a number as seconds since the epoch; a body's time is the RFC 3339 string it documents.
    if not isinstance(value, str):
        raise ValueError("a date-time is an RFC 3339 string")
    return value


def _with_offset(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        raise ValueError("a date-time needs its offset (Z or +hh:mm)")
    return value


# A point in time in a request body: an RFC 3339 string with its offset.
ZonedDateTime = Annotated[dt.datetime, BeforeValidator(_rfc3339_text), AfterValidator(_with_offset)]


class Strict(BaseModel):
    """A request body: unknown fields are refused. Text fields are FreeText (bounded, without control or
    bidirectional formatting characters); no string field of a body accepts a NUL (a test walks them)."""

    model_config = ConfigDict(extra="forbid")


class TenantCreate(Strict):
    name: TenantName


class TenantPublic(BaseModel):
    name: str
    created_at: dt.datetime
    oci_anonymous_pull: bool = False
    """Whether callers without credentials may pull its released versions through ``/v2`` (docs/oci.md)."""


class TenantAnonymousPullUpdate(Strict):
    enabled: StrictBool


class PrincipalCreate(Strict):
    name: PrincipalName
    is_admin: StrictBool = False


class RoleGrant(Strict):
    # Stated in the document as the service enforces it, so a client (and a fuzzer) can tell a valid grant.
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "if": {"properties": {"role": {"enum": sorted(r.value for r in CAPACITY_REQUIRED)}}, "required": ["role"]},
        "then": {"properties": {"capacity": {"minLength": 1}}, "required": ["capacity"]},
        "description": "an approver's role needs a capacity"})

    tenant: TenantName
    role: Role
    capacity: str = Field("", pattern=f"^$|{NAME_PATTERN}", description="approvers: security, legal, ml...")


class RoleBindingPublic(BaseModel):
    tenant: str
    role: str
    capacity: str


class PrincipalPublic(BaseModel):
    name: str
    is_admin: bool
    disabled: bool
    roles: list[RoleBindingPublic]


class TokenCreate(Strict):
    description: FreeText(MAX_DESCRIPTION_LENGTH) = ""
    expires_in_days: int | None = Field(90, ge=1, le=3650, strict=True)


class TokenIssued(BaseModel):
    id: int
    token: str = Field(description="The secret. It is shown only this once.")
    prefix: str
    expires_at: dt.datetime | None


class WhoAmI(BaseModel):
    name: str
    is_admin: bool
    roles: dict[str, list[dict[str, Any]]]


class UploadedFile(Strict):
    path: FreeText(MAX_PATH_LENGTH)
    size: StrictByteCount
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class VersionCreate(Strict):
    source: FreeText(MAX_SOURCE_LENGTH) = Field(
        description="hf://org/repo, s3://bucket/prefix, an absolute directory path, "
                    "or upload:LABEL with `files` already uploaded to /v1/blobs")
    files: list[UploadedFile] | None = Field(None, max_length=100_000,
                                             description="for upload: the files, each uploaded beforehand")
    revision: Label(MAX_REVISION_LENGTH) | None = Field(None,
                                                           description="branch, tag or commit; default main")
    include: list[FreeText(MAX_GLOB_LENGTH)] = Field(default_factory=list, max_length=MAX_GLOBS)
    exclude: list[FreeText(MAX_GLOB_LENGTH)] = Field(default_factory=list, max_length=MAX_GLOBS)
    hf_endpoint: FreeText(MAX_SOURCE_LENGTH) | None = None
    license: FreeText(MAX_LICENSE_LENGTH) | None = Field(None, description=(
        "a license the submitter declares: an SPDX id or expression (Apache-2.0, MIT OR Apache-2.0), a Hub id "
        "(llama3.1) or other:<name>; an unrecognized one is refused (unrecognized-license)"))
    adapter_of: FreeText(MAX_BASE_REF_LENGTH) | None = Field(None, description=(
        "the version is a LoRA adapter of this base version: TENANT/NAME@N, TENANT/NAME@ALIAS (resolved now) or "
        "sha256:<hex> (the base version's manifest_digest). The base must be readable, sealed, not revoked and no "
        "adapter itself (adapter-base-not-found, adapter-base-unusable); the adapter is bound to its weights "
        "digest and checked against it when sealed (adapter-incompatible)"))


PromptName = Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")]


class VersionDerive(Strict):
    """``POST .../versions/{number}/derive``: the parts the new unit changes; every other file is the base's."""

    prompts: dict[PromptName, Annotated[str, Field(max_length=MAX_PART_BYTES)]] = Field(
        default_factory=dict, max_length=MAX_PROMPTS,
        description="name -> Jinja text: prompt templates added or replaced (stored at prompts/NAME.jinja)")
    remove_prompts: list[PromptName] = Field(default_factory=list, max_length=MAX_PROMPTS)
    serving_profile: dict[str, Any] | None = Field(None, description=(
        "{engine, gpu: {type, count}, settings: {...}}: the engine settings the unit serves with, checked against "
        "its GPUs (refused with the arithmetic when it does not fit); stored as serving-profile.json"))
    remove_serving_profile: StrictBool = False


class FilePublic(BaseModel):
    path: str
    size: int
    sha256: str | None
    mirrored: bool


class RevocationPublic(BaseModel):
    at: dt.datetime
    by: str
    reason: str


class VersionPublic(BaseModel):
    model: str
    version: int
    state: str
    failure_reason: str | None
    failure_detail: dict[str, Any] | None
    source: dict[str, Any]
    requested_revision: str | None
    resolved_revision: str | None
    license: str | None
    licenses: dict[str, Any] = Field(description=(
        "resolved (SPDX expression or other:<name>), declared, findings [{source: declared|card|readme|"
        "license_file:<path>|conflict, raw, raw_length, normalized, problem, detail}], conflicts, gated, access"))
    manifest_digest: str | None
    signing_key_id: str | None
    created_at: dt.datetime
    sealed_at: dt.datetime | None
    files: list[FilePublic]
    progress: dict[str, int]
    revocation: RevocationPublic | None = Field(None, description="set once the version is revoked")
    derived_from: int | None = Field(None, description="the version of the same model this unit was derived from")
    adapter_of: dict[str, Any] | None = Field(None, description=(
        "set for a LoRA adapter: the base it is bound to and signed with, {model, version, weights_digest (the "
        "base's weights component), manifest_digest (the base's signed statement)}, what was asked for "
        "(requested), and the check against the base at seal (check: {peft_type, refusals, findings}; null "
        "until sealed)"))


class VersionDetail(VersionPublic):
    facts: dict[str, Any] | None = Field(
        description="what the headers of the version's files say (weights, architecture, quantization, "
                    "tokenizer); each fact is {value, source} or {value: null, unknown: why}; null until recorded")
    components: list[dict[str, Any]] | None = Field(
        None, description="the release unit's components ({name, digest, members}: weights, tokenizer, "
                          "chat_templates, generation_config, config, prompt_templates, serving_profile, other); "
                          "null until the files are stored")
    unit_parts: dict[str, Any] | None = Field(
        None, description="the registry-held parts: prompts [{name, variables}], serving_profile {engine, gpu, "
                          "settings, digest, capacity: {fits, per_gpu_needed, per_gpu_budget, arithmetic, reason}}, "
                          "error (a part that does not check); null when the unit holds none")


class ApprovalCreate(Strict):
    decision: Literal["approve", "reject"]
    capacity: str = Field(pattern=NAME_PATTERN, max_length=32,
                          description="the approver capacity decided in: security, legal, ml...")
    comment: FreeText(MAX_COMMENT_LENGTH) = ""
    files: list[FreeText(MAX_PATH_LENGTH)] = Field(
        default_factory=list, max_length=1000,
        description="paths of the version this decision vouches for "
                    "(suspicious files a security approval names)")


class ApprovalFilesAdd(Strict):
    files: list[FreeText(MAX_PATH_LENGTH)] = Field(
        min_length=1, max_length=1000,
        description="paths of the version your approval vouches for besides those it names already")


class ApprovalPublic(BaseModel):
    principal: str
    capacity: str
    decision: str
    comment: str
    files: list[str]
    at: dt.datetime


class PolicyDecisionPublic(BaseModel):
    outcome: str = Field(
        description="approved, pending, blocked, rejected or error (the policy failed: it denies)")
    allowed: bool
    unmet: list[dict[str, Any]]
    bundle_digest: str
    input_digest: str
    error: str | None
    decided_at: dt.datetime | None = Field(None, description="when it was stored (none for a dry evaluation)")


class ApprovalStatusPublic(BaseModel):
    model: str
    version: int
    state: str
    submitter: str | None
    unmet: list[dict[str, Any]] = Field(description="what the latest stored policy decision left unmet")
    met: list[dict[str, Any]] = Field(description="requirements unmet in an earlier decision, met since")
    decision: PolicyDecisionPublic | None = Field(description="the latest stored policy decision")
    approvals: list[ApprovalPublic]


class PolicyEvaluationPublic(BaseModel):
    model: str
    version: int
    state: str
    decision: PolicyDecisionPublic


class ApprovalPreviewPublic(BaseModel):
    model: str
    version: int
    state: str
    decision: PolicyDecisionPublic = Field(description="what the policy would say with the decision recorded")
    unmet: list[dict[str, Any]] = Field(description="what would remain unmet")
    yours: list[dict[str, Any]] = Field(
        description="what would remain unmet in the decision's capacity: what it could satisfy and leaves "
                    "(a suspicious file a security approval does not name)")


class CanaryCreate(Strict):
    version: StrictVersionNumber = Field(description="the canary version (not the main one)")
    tenants: list[TenantName] = Field(min_length=1, max_length=MAX_CANARY_TENANTS,
                                      description="the tenants served the canary version")


class AliasUpdate(Strict):
    version: StrictVersionNumber = Field(description="an approved version: every tenant not in the canary gets it")
    canary: CanaryCreate | None = None
    comment: FreeText(MAX_COMMENT_LENGTH) = ""


class RollbackCreate(Strict):
    comment: FreeText(MAX_COMMENT_LENGTH) = ""


class RevocationCreate(Strict):
    reason: FreeText(MAX_COMMENT_LENGTH) = Field(min_length=1, description="why it must never be released")


class CanaryPublic(BaseModel):
    version: int
    tenants: list[str]


class AliasMovePublic(BaseModel):
    action: str = Field(description="promote or rollback")
    at: dt.datetime
    by: str
    from_version: int | None
    from_canary: CanaryPublic | None
    to_version: int
    to_canary: CanaryPublic | None
    comment: str
    bundle_digest: str = Field(description="the promotion policy bundle that allowed the move")
    input_digest: str


class AliasPublic(BaseModel):
    model: str
    name: str
    version: int
    canary: CanaryPublic | None
    updated_by: str
    updated_at: dt.datetime
    history: list[AliasMovePublic] = Field(description="every move, newest first")


class ResolutionPublic(BaseModel):
    model: str
    alias: str
    for_tenant: str
    version: int
    canary: bool = Field(description="whether the version came through the alias's canary")
    manifest_digest: str | None


class EnvelopeSignaturePublic(BaseModel):
    sig: str = Field(description="base64 DER ECDSA P-256 signature over the DSSE pre-authentication encoding")
    keyid: str = Field(description="the signing key's id: hex sha256 of its public key PEM")


class EnvelopePublic(BaseModel):
    """A DSSE envelope (https://github.com/secure-systems-lab/dsse): the signed payload, base64."""

    payload: str
    payloadType: str
    signatures: list[EnvelopeSignaturePublic]


class LogEntryProofPublic(BaseModel):
    index: int = Field(description="the event's leaf index (its id - 1)")
    event: dict[str, Any] = Field(description="the audit event's body, whose canonical JSON's SHA-256 is the leaf")
    inclusion_proof: list[str] = Field(description="RFC 9162 inclusion proof in the checkpoint's tree (base64)")


class ReleaseLogProofPublic(BaseModel):
    checkpoint: str = Field(description="a C2SP signed checkpoint (with the witness cosignatures collected)")
    entries: list[LogEntryProofPublic] = Field(description="the version's approval, and the alias move when "
                                                           "the ref is an alias")


class ReleasePublic(BaseModel):
    """A release manifest as served: the signed envelope, and beside it what is not signed."""

    envelope: EnvelopePublic = Field(description="DSSE envelope of application/vnd.modelreg.release+json: "
                                                 "model, ref, version, files, digests, serial, expiry")
    transport: dict[str, str] = Field(description="path -> a URL of the file's bytes (a presigned GET, or this "
                                                  "registry's ranged blob endpoint, maybe relative to it); "
                                                  "unsigned: the bytes are checked against the envelope's files")
    signature_bundle: dict[str, Any] | None = Field(
        description="the version's OpenSSF model-signing bundle, for DEST/model.sig")
    trust_root_version: int = Field(description="the trust root whose key signed the envelope")
    log: ReleaseLogProofPublic | None = Field(
        None, description="when the trust root names a verifiable log: the checkpoint this release was issued "
                          "against and the inclusion proofs of the events that made it (ADR 0011)")


class KeyPublic(BaseModel):
    key_id: str
    algorithm: str
    public_key_pem: str


class LogKeyPublic(BaseModel):
    """The verifiable audit log's key: its checkpoint origin and signed-note verifier key
    (``<origin>+<hex key ID>+<base64(0x01 || Ed25519 key)>``)."""

    origin: str
    verifier_key: str


class KeysPublic(BaseModel):
    keys: list[KeyPublic]
    log: LogKeyPublic | None = None


class InclusionProofPublic(BaseModel):
    """An RFC 9162 inclusion proof from ``/log/proof/inclusion``; hashes are base64 of 32 bytes."""

    index: int
    size: int
    leaf_hash: str
    root: str
    hashes: list[str]


class ConsistencyProofPublic(BaseModel):
    """An RFC 9162 consistency proof from ``/log/proof/consistency``; hashes are base64 of 32 bytes."""

    first: int
    second: int
    first_root: str
    second_root: str
    hashes: list[str]


# --- quotas, retention, usage ----------------------------------------------------------------


class QuotaUpdate(Strict):
    bytes: ByteCount | None = Field(strict=True, description="the tenant's byte quota; null removes it")


class QuotaPublic(BaseModel):
    tenant: str
    limit: int | None = Field(description="bytes the tenant may own; null: no quota")
    used: int = Field(description="bytes of the blobs the tenant owns, each counted once")
    available: int | None


class RetentionUpdate(Strict):
    keep_last: int = Field(ge=1, le=100_000, strict=True, description="keep the newest N versions")
    approved_within_days: int | None = Field(None, ge=0, le=36_500, strict=True,
                                             description="also keep versions approved within D days")


class RetentionRulePublic(BaseModel):
    keep_last: int
    approved_within_days: int | None
    updated_by: str
    updated_at: dt.datetime


class RetainedVersion(BaseModel):
    version: int
    reason: Literal["last", "alias", "in-pipeline", "approved-recently"]


class RetentionPublic(BaseModel):
    model: str
    rule: RetentionRulePublic | None
    kept: list[RetainedVersion] = Field(description="versions the rule keeps, and why")
    deleted: list[int] = Field(description="versions deleted by this call (apply), or that apply would delete")


class StoredVersion(BaseModel):
    version: int
    state: str
    deleted: bool
    bytes: int


class StoredModel(BaseModel):
    model: str
    bytes: int = Field(description="each blob once across the model's versions not deleted")
    versions: list[StoredVersion]


class StoredUsage(BaseModel):
    bytes: int = Field(description="each blob the tenant owns once (what its quota counts)")
    models: list[StoredModel]


class MirroredUsage(BaseModel):
    files: int
    bytes: int


class ServedVersion(BaseModel):
    version: int
    manifests: int
    bytes: int


class ServedModel(BaseModel):
    model: str
    manifests: int
    bytes: int
    versions: list[ServedVersion]


class ServedUsage(BaseModel):
    manifests: int = Field(description="release manifests issued (node fetches)")
    bytes: int = Field(description="bytes those manifests released")
    principals: int = Field(description="distinct principals (nodes) they were issued to")
    by_model: list[ServedModel]


class EvalUsage(BaseModel):
    suite: str
    runs: int
    duration_ms: int


class UsagePublic(BaseModel):
    tenant: str
    since: dt.datetime
    until: dt.datetime
    stored: StoredUsage
    mirrored: MirroredUsage
    served: ServedUsage
    evals: list[EvalUsage]


class TokenPublic(BaseModel):
    """A token as an administrator sees it when listing: never its secret."""

    id: int
    prefix: str
    description: str
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None


MAX_WEBHOOK_TYPES = 2 * len(EVENT_TYPE_NAMES)
"""The most event types one subscription names (each may be named in both forms; ``parse_types``' bound)."""


class WebhookCreate(Strict):
    tenant: TenantName
    url: FreeText(2048) = Field(min_length=1, description="http(s) URL the events are POSTed to; it passes "
                                                               "the egress guard (docs/webhooks.md)")
    types: list[Annotated[FreeText(128), Field(min_length=1)]] = Field(
        min_length=1, max_length=MAX_WEBHOOK_TYPES,
        description="event types (`version.approved`, or `*` for every type)")
    model_glob: FreeText(256) | None = Field(None, description="only events about models matching it")


class WebhookPublic(BaseModel):
    id: int
    tenant: str
    url: str
    types: list[str]
    model_glob: str | None
    state: Literal["active", "paused"]
    paused_reason: str | None
    paused_at: dt.datetime | None
    cursor: int = Field(description="the last audit id whose events are delivered")
    failing_since: dt.datetime | None
    failed_attempts: int
    next_attempt_at: dt.datetime | None
    last_error: str | None
    previous_secret_valid_until: dt.datetime | None
    created_by: str
    created_at: dt.datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="the signing secret (whsec_...), shown this once")


class WebhookDeliveryPublic(BaseModel):
    id: int
    event_id: str
    event_type: str
    attempt: int = Field(description="the attempt at this event (1 for the first)")
    state: Literal["pending", "delivered", "failed"] = Field(
        description="pending: a test ping the delivery workers have not sent yet; delivered: answered 2xx")
    status_code: int | None
    error: str | None
    duration_ms: int
    at: dt.datetime


class WebhookRedeliver(Strict):
    from_event: FreeText(128) | None = Field(None, description="send this event and all after it again; "
                                                                    "none: resume where the webhook stopped")


class WebhookRotate(Strict):
    keep_previous_seconds: float = Field(86400.0, ge=0, le=30 * 86400,
                                         description="how long the current secret keeps signing too")
