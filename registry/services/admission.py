"""Admission reviews: may a pod or KServe resource start on the model references it carries? Decided here.

The webhook (``modelreg admission``, ``registry/node/admission.py``) finds the references of an object
(``registry/domain/admission_refs.py``) and asks :func:`review`. Each reference is parsed
(:mod:`registry.domain.admission`); one of the registry's shape is looked up (the version an alias, number,
commit or ``/v2`` digest names, and whether it is served: :mod:`registry.domain.serving`); then the admission
policy (``policies/admission.rego``, ADR 0019) decides every reference from those facts and the namespace's
policy data (its tenant and mode), failing closed. A reference allowed to the registry is answered with its
pinned form (a number, a commit, a manifest digest) and its signed release, issued as a serving node's would be
(:func:`registry.services.manifests.issue_to`, recorded as an issuance to the caller), which the webhook verifies
with its pinned trust root before it caches it: so the webhook can answer from what it proved while the
registry is unreachable. A reference whose caller says it already holds that very version's release
(``held``) is answered without a new one.

Who may ask: a principal holding the ``admission`` role in any tenant (a system-wide role: only administrators
grant it), or an administrator; node and reader tokens are refused. Facts of a model are only ever said for
the namespace's own tenant: a reference to another tenant's model is denied as such, unlooked-at.

Every review is appended to the audit log (``admission.decided``, or ``admission.denied`` when a reference
was denied), and is an event of the namespace's tenant's stream. An admitted pod is recorded as a place holding
each version it was admitted with (:func:`registry.services.receipts.record_admission`), dropped on its DELETE.
A review the webhook answered from its own proof is reported afterwards (:func:`record_answered`) and gets the
same record, marked ``answered`` (ADR 0019).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import urllib.parse
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Role
from registry.clock import Clock
from registry.db.models import AdmissionAnsweredUid, OciArtifact, Version
from registry.db.session import begin_write, is_postgres
from registry.domain import serving
from registry.domain.admission import HF, IMAGE, OCI, ModelTarget, target_of
from registry.domain.errors import (
    AliasNotFoundError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    RegistryError,
    RevokedError,
)
from registry.policy import AdmissionDecision, PolicyEngine
from registry.services import aliases, loaders, manifests, receipts
from registry.signing.keyring import KeyRing
from registry.storage.base import BlobStore

MAX_REFERENCES = 64
"""The most references one review judges (a pod with more is refused whole)."""
KINDS = frozenset({"storage-uri", "adapter-uri", "local-model-cache", "image-volume", "init-fetch"})
OPERATIONS = frozenset({"CREATE", "UPDATE", "CONNECT", "DELETE"})
K8S_NAME_RE = re.compile(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
K8S_KIND_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9]{0,62}\Z")
MAX_PATH_LENGTH = 1024
DECIDED, DENIED = "admission.decided", "admission.denied"


@dataclass(frozen=True)
class ReviewedObject:
    """The object under review, as the API server names it."""

    kind: str
    namespace: str
    name: str
    uid: str
    operation: str


@dataclass(frozen=True)
class ReferenceInput:
    """One reference of the object (:class:`registry.domain.admission_refs.ModelReference`).

    Attributes:
        held: The version the caller already holds a verified release for (its cache): when the reference is
            allowed and resolves to that very version, no release is signed and issued for it.
    """

    uri: str
    path: str
    kind: str
    held: int | None = None


@dataclass(frozen=True)
class ReferenceDecision:
    """What the registry says of one reference.

    Attributes:
        outcome: ``allowed``, ``denied`` or ``warned`` (admitted, with ``message`` as a warning).
        rule: The rule that decided (``admission.approved``, ``admission.revoked``, ``admission.elsewhere``...).
        message: The reference, where it is, why, and the rule.
        version: The version the reference resolved to (registry references that are served).
        pinned: The reference naming exactly that version, in its own form.
        release_ref: ``tenant/name@ref`` the release was issued for; ``release``: that signed release
            (the manifest answer without its transport URLs).
    """

    uri: str
    path: str
    kind: str
    outcome: str
    rule: str
    message: str
    version: int | None = None
    pinned: str | None = None
    release_ref: str | None = None
    release: dict[str, Any] | None = None


@dataclass(frozen=True)
class Review:
    """A review's answer: the namespace's tenant and mode, and one decision per reference, in order."""

    tenant: str | None
    mode: str
    references: list[ReferenceDecision]

    @property
    def allowed(self) -> bool:
        return all(r.outcome != "denied" for r in self.references)


@dataclass(frozen=True)
class _Facts:
    """What the registry found for a reference of its own shape."""

    status: str | None = None
    reason: str = ""
    version: Version | None = None
    digest: str | None = None


def may_review(principal: AuthenticatedPrincipal) -> bool:
    """Whether ``principal`` may ask for admission reviews: an administrator, or the ``admission`` role anywhere."""
    return principal.is_admin or any(role is Role.ADMISSION for roles in principal.roles.values()
                                     for role, _capacity in roles)


def review(session: Session, principal: AuthenticatedPrincipal, obj: ReviewedObject,
           references: Sequence[ReferenceInput], *, engine: PolicyEngine, registry_hosts: Collection[str],
           keyring: KeyRing, blob_store: BlobStore, clock: Clock, config: manifests.ReleaseConfig,
           cache: manifests.ReleaseCache | None = None) -> Review:
    """Decide every reference of ``obj`` (module docstring) and record the review.

    Args:
        registry_hosts: The hosts of the registry's ``/v2`` (``host[:port]``); the policy data's
            ``admission.registry_hosts`` are added.

    Raises:
        PermissionDeniedError: the caller may not ask (:func:`may_review`).
        InvalidInputError: a malformed object identity, too many references, an unknown kind.
    """
    if not may_review(principal):
        raise PermissionDeniedError(f"{principal.name!r} may not ask for admission reviews (role admission)",
                                    principal=principal.name, permission="admission")
    _check(obj, references)
    hosts = set(registry_hosts) | _policy_hosts(engine)
    targets = [target_of(r.uri, r.kind, hosts) for r in references]
    facts = [_facts(session, principal, t) for t in targets]
    decision = engine.admission(policy_input(obj.namespace, references, targets, facts))
    decided: list[ReferenceDecision] = []
    for index, (ref, target, fact) in enumerate(zip(references, targets, facts)):
        decided.append(_decide(session, principal, obj, ref, target, fact, decision, index, keyring=keyring,
                               blob_store=blob_store, clock=clock, config=config, cache=cache))
    result = Review(decision.tenant, decision.mode, decided)
    _record(session, principal, obj, result, decision, clock.now())
    return result


def policy_input(namespace: str, references: Sequence[ReferenceInput], targets: Sequence[ModelTarget],
                 facts: Sequence[_Facts]) -> dict[str, Any]:
    """The admission policy's input (``policies/admission.rego`` says what each field means)."""
    return {"namespace": namespace, "references": [
        {"uri": r.uri, "kind": r.kind, "path": r.path, "scheme": t.scheme, "registry_host": t.registry_host,
         "model": t.model, "tenant": t.tenant, "problem": t.problem, "status": f.status}
        for r, t, f in zip(references, targets, facts)]}


def _check(obj: ReviewedObject, references: Sequence[ReferenceInput]) -> None:
    if not K8S_NAME_RE.match(obj.namespace) or len(obj.namespace) > 63:
        raise InvalidInputError(f"namespace {obj.namespace[:80]!r} is no Kubernetes namespace name", field="namespace")
    if not K8S_KIND_RE.match(obj.kind):
        raise InvalidInputError(f"kind {obj.kind[:80]!r} is no Kubernetes kind", field="kind")
    if obj.operation not in OPERATIONS:
        raise InvalidInputError(f"operation {obj.operation[:20]!r} is none of {', '.join(sorted(OPERATIONS))}",
                                field="operation")
    if len(references) > MAX_REFERENCES:
        raise InvalidInputError(f"{len(references)} references; at most {MAX_REFERENCES} are judged in one review",
                                field="references")
    for ref in references:
        if ref.kind not in KINDS:
            raise InvalidInputError(f"reference kind {ref.kind[:40]!r} is none of {', '.join(sorted(KINDS))}",
                                    field="kind")
        if not ref.path.startswith("/") or len(ref.path) > MAX_PATH_LENGTH:
            raise InvalidInputError(f"path {ref.path[:80]!r} is no JSON pointer of at most {MAX_PATH_LENGTH} "
                                    "characters", field="path")


def _policy_hosts(engine: PolicyEngine) -> set[str]:
    admission = engine.data().get("modelreg", {}).get("config", {}).get("admission", {})
    hosts = admission.get("registry_hosts", []) if isinstance(admission, dict) else []
    return {h for h in hosts if isinstance(h, str)} if isinstance(hosts, list) else set()


def host_of(url: str | None) -> set[str]:
    """The ``/v2`` host of the registry's public URL (``host[:port]``), as an image reference names it."""
    if not url:
        return set()
    netloc = urllib.parse.urlsplit(url).netloc
    return {netloc} if netloc else set()


def _on_behalf(principal: AuthenticatedPrincipal, tenant: str) -> AuthenticatedPrincipal:
    """The reviewer as a serving node of ``tenant``: what looking a reference up and issuing its release need.

    Only :func:`review` makes one, after :func:`may_review`, for a reference to the namespace's own tenant."""
    return AuthenticatedPrincipal(principal.id, principal.name, False, {tenant: frozenset({(Role.NODE, "")})})


def _facts(session: Session, principal: AuthenticatedPrincipal, target: ModelTarget) -> _Facts:
    if target.problem is not None or target.model is None:
        return _Facts()
    tenant, name, selector = target.tenant, target.name, target.selector
    assert tenant is not None and name is not None and selector is not None
    try:
        model = loaders.load_model_unchecked(session, tenant, name)
    except NotFoundError:
        return _Facts("unknown", f"the registry has no model {target.model}")
    version: Version | None
    digest: str | None = None
    try:
        if target.selector_kind == "version":
            version = loaders.load_version_unchecked(session, model, int(selector))
        elif target.selector_kind == "commit":
            version = session.scalar(select(Version).where(Version.model_id == model.id,
                                                           Version.manifest_digest.startswith(selector)))
        elif target.selector_kind == "digest":
            artifact = session.scalar(select(OciArtifact).where(OciArtifact.model_id == model.id,
                                                                OciArtifact.manifest_digest == selector))
            version = session.get(Version, artifact.version_id) if artifact is not None else None
            digest = selector if artifact is not None else None
        else:
            version = aliases.resolve(session, _on_behalf(principal, tenant), tenant, name, selector).version
    except AliasNotFoundError:
        return _Facts("unknown", f"{target.model} has no alias {selector!r}")
    except RevokedError as exc:
        return _Facts("revoked", exc.message)
    except NotFoundError:
        version = None
    if version is None:
        return _Facts("unknown", f"{target.model} has no version {selector}")
    facts = loaders.release_facts(version)
    why = serving.unreleased(facts)
    if why is not None:
        status = "revoked" if why is serving.Unreleased.REVOKED else (
            "deleted" if why is serving.Unreleased.DELETED else "not-approved")
        return _Facts(status, f"{target.model}: {serving.unreleased_reason(facts, with_revoke_reason=True)}",
                      version)
    if target.scheme in (OCI, IMAGE) and digest is None:
        shape = "image" if target.image else "raw"
        digest = session.scalar(select(OciArtifact.manifest_digest).where(OciArtifact.version_id == version.id,
                                                                          OciArtifact.shape == shape))
        if digest is None:
            return _Facts("not-approved", f"{target.model}@{version.number}: its {shape} OCI manifest is not built "
                                          "yet", version)
    return _Facts("served", "", version, digest)


def _reason(rule: str, obj: ReviewedObject, target: ModelTarget, fact: _Facts, decision: AdmissionDecision) -> str:
    ns = obj.namespace
    if rule == "admission.approved" and fact.version is not None:
        return f"{target.model}@{fact.version.number} is approved and not revoked"
    if rule == "admission.off":
        return f"admission is off in namespace {ns}"
    if rule == "admission.elsewhere":
        return f"is not the registry's, and namespace {ns} allows no models from elsewhere (mode {decision.mode})"
    if rule == "admission.malformed":
        return f"is no reference the registry serves: {target.problem}"
    if rule == "admission.no-tenant":
        return f"namespace {ns} serves no tenant's models"
    if rule == "admission.tenant":
        return f"names a model of tenant {target.tenant}, not of {decision.tenant} (the tenant of namespace {ns})"
    return fact.reason or rule


def _decide(session: Session, principal: AuthenticatedPrincipal, obj: ReviewedObject, ref: ReferenceInput,
            target: ModelTarget, fact: _Facts, decision: AdmissionDecision, index: int, **issue: Any
            ) -> ReferenceDecision:
    if decision.error is not None:
        return _decision(ref, "denied", "policy.error",
                         f"the admission policy failed, so it denies: {decision.error}")
    verdict = decision.references[index]
    outcome, rule = verdict["outcome"], verdict["rule"]
    if rule != "admission.approved":
        return _decision(ref, outcome, rule, _reason(rule, obj, target, fact, decision))
    assert fact.version is not None and target.tenant is not None and target.name is not None
    number = fact.version.number
    release_ref = target.selector if target.selector_kind == "alias" else str(number)
    if ref.held == number:
        # The caller proved this version's release a moment ago: signing another (a serial, an issuance row)
        # would tell it nothing new, and is the dearest part of a review.
        return _allowed(ref, target, fact, rule, _reason(rule, obj, target, fact, decision), release_ref, None)
    try:
        issued = manifests.issue_to(session, [_on_behalf(principal, target.tenant)], target.tenant, target.name,
                                    release_ref, **issue)
    except RegistryError as exc:
        # Served a moment ago, refused now (a revocation in between, an adapter's base): the release decides.
        refused = "warned" if decision.mode == "warn" else "denied"
        return _decision(ref, refused, "admission.not-approved", f"{target.model}@{release_ref}: {exc.message}")
    if issued.version != number:
        # The alias moved between the look-up and the release: pin what was signed.
        fact = dataclasses.replace(fact, version=loaders.load_version_unchecked(
            session, loaders.load_model_unchecked(session, target.tenant, target.name), issued.version))
        number = issued.version
    assert issued.body is not None and fact.version is not None
    if target.scheme in (OCI, IMAGE) and target.selector_kind != "digest":
        fact = dataclasses.replace(fact, digest=session.scalar(select(OciArtifact.manifest_digest).where(
            OciArtifact.version_id == fact.version.id, OciArtifact.shape == ("image" if target.image else "raw"))))
    release = {k: v for k, v in issued.body.items() if k != "transport"}
    return _allowed(ref, target, fact, rule, _reason(rule, obj, target, fact, decision), release_ref, release)


def _allowed(ref: ReferenceInput, target: ModelTarget, fact: _Facts, rule: str, reason: str, release_ref: str,
             release: dict[str, Any] | None) -> ReferenceDecision:
    """An allowed reference to ``fact.version``, with its pinned form (``fact.digest``: its OCI manifest's)."""
    assert fact.version is not None
    number = fact.version.number
    commit = fact.version.manifest_digest[:40] if fact.version.manifest_digest else ""
    digest = fact.digest
    pinned = target.pinned(number=number, commit=commit, digest=digest) if digest or target.scheme not in (
        OCI, IMAGE) else None
    if target.scheme == HF and not commit:
        pinned = None
    return _decision(ref, "allowed", rule, reason, version=number, pinned=pinned,
                     release_ref=f"{target.model}@{release_ref}", release=release)


def _decision(ref: ReferenceInput, outcome: str, rule: str, reason: str, **more: Any) -> ReferenceDecision:
    message = f"{ref.uri} at {ref.path}: {reason} (rule {rule})"
    return ReferenceDecision(ref.uri, ref.path, ref.kind, outcome, rule, message, **more)


def _record(session: Session, principal: AuthenticatedPrincipal, obj: ReviewedObject, result: Review,
            decision: AdmissionDecision, now: dt.datetime) -> None:
    begin_write(session)
    _append_record(session, principal, obj, result, decision, now)
    session.commit()


def _append_record(session: Session, principal: AuthenticatedPrincipal, obj: ReviewedObject, result: Review,
                   decision: AdmissionDecision, now: dt.datetime) -> None:
    """The review's audit record (and event) and places, in the caller's write transaction."""
    audit.append_many(session, [_record_entry(principal, obj, result, decision)])
    if obj.kind == "Pod" and result.tenant is not None:
        receipts.record_admission(session, principal=principal.name, tenant=result.tenant, namespace=obj.namespace,
                                  pod=obj.name, admitted=_admitted(session, result, {}),
                                  removed=obj.operation == "DELETE", now=now)


def _record_entry(principal: AuthenticatedPrincipal, obj: ReviewedObject, result: Review,
                  decision: AdmissionDecision, *, answered: dict[str, Any] | None = None) -> audit.Entry:
    """The review's audit record (and event); ``answered``: how the webhook answered a review it reported
    (:func:`record_answered`)."""
    action = DECIDED if result.allowed else DENIED
    details = {
        "namespace": obj.namespace, "tenant": result.tenant, "mode": result.mode,
        "outcome": "allowed" if result.allowed else "denied",
        "object": {"kind": obj.kind, "name": obj.name, "uid": obj.uid, "operation": obj.operation},
        "references": [{"uri": r.uri, "path": r.path, "kind": r.kind, "outcome": r.outcome, "rule": r.rule,
                        "version": r.version, "pinned": r.pinned} for r in result.references],
        "bundle_digest": decision.bundle_digest, "input_digest": decision.input_digest,
    }
    if answered is not None:
        details["answered"] = answered
    return audit.Entry(actor=principal.name, action=action, subject=f"k8s:{obj.namespace}/{obj.kind}/{obj.name}",
                       tenant=result.tenant, details=details)


def _admitted(session: Session, result: Review,
              found: dict[tuple[str, str, int], Version]) -> list[tuple[Version, str]]:
    """The versions a pod was admitted with, of the namespace's tenant, and the references' pointers (issue 36:
    "where does V run"); ``found``: the versions looked up already (one look-up each per batch)."""
    admitted: list[tuple[Version, str]] = []
    for r in result.references:
        if r.outcome == "denied" or r.version is None or not r.release_ref:
            continue
        tenant, _, name = r.release_ref.partition("@")[0].partition("/")
        if tenant != result.tenant:
            continue
        key = (tenant, name, r.version)
        if key not in found:
            found[key] = loaders.find_version_unchecked(session, *key)
        admitted.append((found[key], r.path))
    return admitted


@dataclass(frozen=True)
class AnsweredReference:
    """A reference the webhook answered allowed from its own proof (:class:`AnsweredReview`): the version it
    resolved to and its pinned form, as the registry last decided them."""

    uri: str
    path: str
    kind: str
    version: int
    pinned: str | None = None


@dataclass(frozen=True)
class AnsweredReview:
    """A review the webhook answered from its proof, reported afterwards (ADR 0019): the object, its references,
    and when the webhook answered."""

    object: ReviewedObject
    references: Sequence[AnsweredReference]
    decided_at: dt.datetime


@dataclass(frozen=True)
class Recorded:
    """What :func:`record_answered` did with a batch: how many reviews it recorded, how many it had recorded
    before (their uid was reported already), and why each other was refused (``(index, reason)``)."""

    recorded: int
    refused: list[tuple[int, str]]
    already_recorded: int = 0


MAX_ANSWERED = 256
"""The most answered reviews one report carries."""
ANSWERED_FROM_PROOF = "webhook-proof"
"""``details.answered.by`` of the record of a review the webhook answered from its proof."""
ANSWERED_UIDS_KEPT = dt.timedelta(days=1)
"""How long the uid of a recorded answered review is remembered: a report sent again within it records nothing
twice (the webhook sends a batch again after a timeout, within minutes)."""
ANSWERED_UIDS_PRUNED = 2 * MAX_ANSWERED
"""The most expired uids one report deletes: more than it adds, so the table stays at about a day's."""


def record_answered(session: Session, principal: AuthenticatedPrincipal, reviews: Sequence[AnsweredReview], *,
                    engine: PolicyEngine, registry_hosts: Collection[str], clock: Clock) -> Recorded:
    """Record the reviews the webhook answered from its own proof while the registry was reachable (ADR 0019):
    each as the same ``admission.decided`` record and event a decided review gets (and its places), marked
    ``answered: {by: webhook-proof, at}``, all in one transaction and one batched audit append.

    The report is the webhook's word, checked as far as the registry can: a review is recorded only when each
    reference is one of the registry's, the namespace's policy now allows it as approved for the namespace's
    tenant (the facts taken as served: the webhook holds the signed release), and names a version of that model
    that exists; any other is refused, with why, and not recorded. A review whose request uid was recorded
    already (the webhook sent the batch again after a timeout) is not recorded again, only counted.

    Raises:
        PermissionDeniedError: the caller may not ask for reviews (:func:`may_review`).
        InvalidInputError: more than :data:`MAX_ANSWERED` reviews.
    """
    if not may_review(principal):
        raise PermissionDeniedError(f"{principal.name!r} may not report admission reviews (role admission)",
                                    principal=principal.name, permission="admission")
    if len(reviews) > MAX_ANSWERED:
        raise InvalidInputError(f"{len(reviews)} reviews; at most {MAX_ANSWERED} are reported at once",
                                field="reviews")
    hosts = set(registry_hosts) | _policy_hosts(engine)
    refused: list[tuple[int, str]] = []
    confirmed: list[tuple[AnsweredReview, Review, AdmissionDecision]] = []
    versions: dict[tuple[str, str, int], bool] = {}
    now = clock.now()
    begin_write(session)
    for index, answered in enumerate(reviews):
        try:
            result, decision = _answered_result(session, answered, hosts, engine, versions)
        except RegistryError as exc:
            refused.append((index, exc.message))
            continue
        confirmed.append((answered, result, decision))
    new_uids = _claim_uids(session, {answered.object.uid for answered, _, _ in confirmed if answered.object.uid},
                           now)
    entries: list[audit.Entry] = []
    pods: dict[str, list[receipts.AdmittedPod]] = {}
    found: dict[tuple[str, str, int], Version] = {}
    for answered, result, decision in confirmed:
        obj = answered.object
        if obj.uid:
            if obj.uid not in new_uids:
                continue
            new_uids.discard(obj.uid)  # the same uid twice in one report: recorded once
        entries.append(_record_entry(principal, obj, result, decision,
                                     answered={"by": ANSWERED_FROM_PROOF, "at": answered.decided_at.isoformat()}))
        if obj.kind == "Pod" and result.tenant is not None:
            pods.setdefault(result.tenant, []).append(receipts.AdmittedPod(
                obj.namespace, obj.name, _admitted(session, result, found), obj.operation == "DELETE"))
    audit.append_many(session, entries)
    for tenant, decided in pods.items():
        receipts.record_admissions(session, principal=principal.name, tenant=tenant, pods=decided, now=now)
    session.commit()
    return Recorded(len(entries), refused, len(confirmed) - len(entries))


def _claim_uids(session: Session, uids: set[str], now: dt.datetime) -> set[str]:
    """Remember ``uids`` as recorded; return those that were not already (in the caller's write transaction).

    A concurrent report of the same uid waits for this transaction on PostgreSQL (the primary key), then finds
    it taken; SQLite's writers take turns. Expired uids are forgotten here, a bounded number at a time.
    """
    table = AdmissionAnsweredUid
    expired = (select(table.uid).where(table.recorded_at < now - ANSWERED_UIDS_KEPT)
               .order_by(table.recorded_at).limit(ANSWERED_UIDS_PRUNED))
    session.execute(delete(table).where(table.uid.in_(expired)).execution_options(synchronize_session=False))
    if not uids:
        return set()
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    claimed = session.scalars(insert(table).values([{"uid": uid, "recorded_at": now} for uid in sorted(uids)])
                              .on_conflict_do_nothing().returning(table.uid))
    return set(claimed)


def _answered_result(session: Session, answered: AnsweredReview, hosts: Collection[str], engine: PolicyEngine,
                     versions: dict[tuple[str, str, int], bool]) -> tuple[Review, AdmissionDecision]:
    """The record of one reported review, or why it is refused (raises :class:`InvalidInputError`);
    ``versions``: whether each version exists, found once per batch."""
    refs = [ReferenceInput(r.uri, r.path, r.kind) for r in answered.references]
    if not refs:
        raise InvalidInputError("a reported review names no reference", field="references")
    _check(answered.object, refs)
    targets = [target_of(r.uri, r.kind, hosts) for r in refs]
    for target, ref in zip(targets, refs):
        if target.model is None or target.problem is not None:
            raise InvalidInputError(f"{ref.uri[:200]} is no reference to a model of the registry", field="uri")
    decision = engine.admission(policy_input(answered.object.namespace, refs, targets,
                                             [_Facts("served")] * len(refs)))
    if decision.error is not None:
        raise InvalidInputError(f"the admission policy failed: {decision.error}", field="references")
    decided: list[ReferenceDecision] = []
    for ref, target, reported, verdict in zip(refs, targets, answered.references, decision.references):
        if (verdict["outcome"], verdict["rule"]) != ("allowed", "admission.approved"):
            raise InvalidInputError(f"{ref.uri[:200]}: namespace {answered.object.namespace} does not allow it as "
                                    f"approved now (rule {verdict['rule']})", field="references")
        assert target.tenant is not None and target.name is not None
        found = (target.tenant, target.name, reported.version)
        if found not in versions:
            try:
                loaders.find_version_unchecked(session, *found)
                versions[found] = True
            except NotFoundError:
                versions[found] = False
        if not versions[found]:
            raise InvalidInputError(f"{target.model} has no version {reported.version}", field="version")
        decided.append(_decision(ref, "allowed", "admission.approved",
                                 f"{target.model}@{reported.version} answered from the webhook's proof",
                                 version=reported.version, pinned=reported.pinned,
                                 release_ref=f"{target.model}@{reported.version}"))
    return Review(decision.tenant, decision.mode, decided), decision
