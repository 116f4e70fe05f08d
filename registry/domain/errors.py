"""The error hierarchy of modelreg.

Every error the registry raises on purpose descends from :class:`RegistryError`. Each class has a
stable ``code`` (the last segment of its problem ``type`` on the wire) and carries its data as
attributes, so callers never parse messages. ``api/problems.py`` maps the branches to HTTP statuses.

Example:
    >>> err = DigestMismatchError("model.safetensors", expected="ab" * 32, actual="cd" * 32)
    >>> err.code, err.details["path"]
    ('digest-mismatch', 'model.safetensors')
"""

from __future__ import annotations

from typing import Any


class RegistryError(Exception):
    """Root of every deliberate modelreg error.

    Attributes:
        code: Stable machine-readable identifier, used as the problem type slug.
        details: Structured data about the failure (JSON-serializable).
    """

    code = "registry-error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message

    @classmethod
    def from_wire(cls, message: str, **details: Any) -> RegistryError:
        """The error as a client rebuilds it from a problem answer: the message and details as sent.

        Subclasses' constructors take the data they format their message from; a client only has the
        message the server formatted, so this skips them.

        Example:
            >>> err = RevokedError.from_wire("acme/tiny@2 was revoked: bad", version=2)
            >>> err.code, err.details, str(err)
            ('revoked', {'version': 2}, 'acme/tiny@2 was revoked: bad')
        """
        err = cls.__new__(cls)
        RegistryError.__init__(err, message, **details)
        return err


# --- branches -------------------------------------------------------------------------------


class NotFoundError(RegistryError):
    code = "not-found"


class ConflictError(RegistryError):
    code = "conflict"


class AuthenticationError(RegistryError):
    """No credentials, or credentials that are unknown, expired or revoked."""

    code = "unauthenticated"


class WorkloadTokenRejectedError(AuthenticationError):
    """A Kubernetes service-account token refused; ``reason`` says which check (``audience``, ``expired``,
    ``not-yet-valid``, ``unknown-key``, ``algorithm``, ``signature``, ``issuer``, ``unbound``, ``malformed``...)."""

    code = "workload-token-rejected"

    def __init__(self, message: str, *, reason: str, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason


class PermissionDeniedError(RegistryError):
    code = "permission-denied"


class PolicyViolationError(RegistryError):
    code = "policy-violation"


class IntegrityError(RegistryError):
    """Bytes, signatures or records are not what they must be."""

    code = "integrity"


class UpstreamError(RegistryError):
    """An upstream (hub, bucket, directory) failed or could not be reached."""

    code = "upstream"


class InvalidInputError(RegistryError):
    code = "invalid-input"


class LimitExceededError(InvalidInputError):
    code = "limit-exceeded"


class QuotaExceededError(LimitExceededError):
    """Storing ``needed`` more bytes would take a tenant over its byte quota (``used`` of ``limit``)."""

    code = "quota-exceeded"

    def __init__(self, tenant: str, *, used: int, limit: int, needed: int) -> None:
        super().__init__(
            f"tenant {tenant!r} would exceed its quota: {used} of {limit} bytes used, {needed} more needed",
            tenant=tenant, used=used, limit=limit, needed=needed)


# --- leaves ---------------------------------------------------------------------------------


class TenantNotFoundError(NotFoundError):
    code = "tenant-not-found"

    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant!r} does not exist", tenant=tenant)


class ModelNotFoundError(NotFoundError):
    code = "model-not-found"

    def __init__(self, model: str) -> None:
        super().__init__(f"model {model!r} does not exist", model=model)


class VersionNotFoundError(NotFoundError):
    code = "version-not-found"

    def __init__(self, model: str, number: int) -> None:
        super().__init__(f"model {model!r} has no version {number}", model=model, version=number)


class BlobNotFoundError(NotFoundError):
    code = "blob-not-found"

    def __init__(self, digest: str) -> None:
        super().__init__(f"blob sha256:{digest} does not exist", digest=digest)


class RepoNotFoundError(NotFoundError):
    """The upstream repository (or bucket, prefix, directory) does not exist."""

    code = "repo-not-found"

    def __init__(self, repo: str) -> None:
        super().__init__(f"upstream repository {repo!r} not found", repo=repo)


class RevisionNotFoundError(NotFoundError):
    code = "revision-not-found"

    def __init__(self, repo: str, revision: str) -> None:
        super().__init__(
            f"revision {revision!r} of upstream repository {repo!r} not found", repo=repo, revision=revision
        )


class EntryNotFoundError(NotFoundError):
    code = "entry-not-found"

    def __init__(self, repo: str, path: str) -> None:
        super().__init__(f"file {path!r} not found in upstream {repo!r}", repo=repo, path=path)


class ReleaseNotFoundError(RevisionNotFoundError):
    """A revision of a model this registry serves (alias, version number or commit) that names no release.

    ``reason`` says why: no such alias, version or commit; the version is not approved; it is revoked.
    A revision, like the Hub's, so clients of the Hugging Face-compatible endpoint see ``RevisionNotFound``.
    """

    code = "release-not-found"

    def __init__(self, model: str, revision: str, reason: str) -> None:
        RegistryError.__init__(self, f"{model}@{revision} names no released version: {reason}",
                               model=model, revision=revision, reason=reason)


class ReleaseFileNotFoundError(EntryNotFoundError):
    """A path that is neither a file nor a folder of a released version."""

    code = "file-not-found"

    def __init__(self, model: str, revision: str, path: str, *, commit: str | None = None) -> None:
        RegistryError.__init__(self, f"{model}@{revision} has no file or folder {path!r}",
                               model=model, revision=revision, path=path, commit=commit)


class UpstreamChangedError(ConflictError):
    """An upstream object changed (or vanished) after it was resolved; resolve the source again."""

    code = "upstream-changed"

    def __init__(self, repo: str, path: str, *, expected: str | None, actual: str | None = None) -> None:
        super().__init__(
            f"{path} in upstream {repo!r} changed since it was resolved (expected {expected}, now {actual})",
            repo=repo,
            path=path,
            expected=expected,
            actual=actual,
        )


class DigestMismatchError(IntegrityError):
    """Bytes whose digest differs from the one expected (published upstream, or in a manifest)."""

    code = "digest-mismatch"

    def __init__(self, path: str, *, expected: str, actual: str, algorithm: str = "sha256") -> None:
        super().__init__(
            f"{path}: expected {algorithm}:{expected}, got {algorithm}:{actual}",
            path=path,
            expected=expected,
            actual=actual,
            algorithm=algorithm,
        )


class SizeMismatchError(IntegrityError):
    code = "size-mismatch"

    def __init__(self, path: str, *, expected: int, actual: int) -> None:
        super().__init__(
            f"{path}: expected {expected} bytes, got {actual}", path=path, expected=expected, actual=actual
        )


class ChunkMismatchError(IntegrityError):
    """A chunk of a file, or a file's chunk list, that is not what the signed release says."""

    code = "chunk-mismatch"

    def __init__(self, path: str, *, chunk: int | None, expected: str, actual: str) -> None:
        what = "chunk list" if chunk is None else f"chunk {chunk}"
        super().__init__(f"{path}: {what}: expected {expected}, got {actual}", path=path, chunk=chunk,
                         expected=expected, actual=actual)


class ChunksNotRecordedError(NotFoundError):
    """The chunk digests of a file are not recorded (yet): a node fetches the whole file instead."""

    code = "chunks-not-recorded"

    def __init__(self, path: str, digest: str) -> None:
        super().__init__(f"{path}: no chunk digests are recorded for sha256:{digest}", path=path, digest=digest)


class BlobsNotUploadedError(InvalidInputError):
    """Files of an upload whose blobs the tenant has not uploaded (or mirrored) itself.

    Another tenant's copy of the same bytes does not count and is never mentioned. Only the first
    paths are listed, with the count of all.
    """

    code = "blobs-not-uploaded"
    LISTED = 10

    def __init__(self, tenant: str, paths: list[str]) -> None:
        listed = paths[: self.LISTED]
        more = f" and {len(paths) - len(listed)} more" if len(paths) > len(listed) else ""
        super().__init__(
            f"{len(paths)} file(s) were not uploaded to tenant {tenant!r}: {', '.join(listed)}{more}",
            tenant=tenant, missing=listed, missing_count=len(paths),
        )


class SignatureError(IntegrityError):
    code = "bad-signature"


class AuditChainError(IntegrityError):
    """The audit log's hash chain is broken; ``details['event_id']`` names the first bad event."""

    code = "audit-chain-broken"


class AuditCheckpointError(IntegrityError):
    """A saved audit checkpoint cannot be trusted: malformed, or not signed by the registry's key.

    ``details['checkpoint']`` is its index in the list given; ``details['problem']`` is
    ``bad-signature`` or ``malformed``.
    """

    code = "audit-checkpoint-invalid"


class ReservedNameError(InvalidInputError):
    """A name the registry keeps for itself (the audit log's ``system`` actor)."""

    code = "reserved-name"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} name {name!r} is reserved for the registry itself", field=kind, value=name)


class ManifestMismatchError(IntegrityError):
    """A model directory differs from its signed manifest; every difference is listed, per file.

    Attributes:
        missing: Paths the manifest lists that are not in the directory.
        extra: Paths in the directory that the manifest does not list.
        mismatched: ``{"path", "expected", "actual"}`` sha256 hex digests of files whose bytes differ.
        not_regular: Paths that are symbolic links or special files, which a model never contains.
    """

    code = "manifest-mismatch"

    def __init__(
        self,
        *,
        missing: list[str],
        extra: list[str],
        mismatched: list[dict[str, str]],
        not_regular: list[str] | None = None,
    ) -> None:
        not_regular = not_regular or []
        parts = [
            f"{len(items)} {label} ({', '.join(items[:5])}{', ...' if len(items) > 5 else ''})"
            for label, items in (
                ("missing", missing),
                ("extra", extra),
                ("mismatched", [m["path"] for m in mismatched]),
                ("not regular files", not_regular),
            )
            if items
        ]
        super().__init__(
            "model directory does not match its manifest: " + "; ".join(parts),
            missing=missing,
            extra=extra,
            mismatched=mismatched,
            not_regular=not_regular,
        )
        self.missing = missing
        self.extra = extra
        self.mismatched = mismatched
        self.not_regular = not_regular


class BlobStoreError(UpstreamError):
    """The blob store (a bucket, a directory) failed or could not be reached; the cause is chained."""

    code = "blob-store-unavailable"

    def __init__(self, operation: str, reason: str, *, key: str | None = None) -> None:
        super().__init__(f"blob store {operation} failed: {reason}", operation=operation, reason=reason, key=key)


class PresignedUrlError(PermissionDeniedError):
    """A presigned blob URL whose signature does not match, or that has expired."""

    code = "bad-presigned-url"

    def __init__(self, digest: str, reason: str) -> None:
        super().__init__(f"presigned URL for blob sha256:{digest} rejected: {reason}", digest=digest, reason=reason)


class InvalidPathError(InvalidInputError):
    code = "invalid-path"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"invalid file path {path!r}: {reason}", path=path, reason=reason)


class InvalidRefError(InvalidInputError):
    """A model or version reference that is not ``[modelreg://]tenant/name[@version|@alias]``."""

    code = "invalid-ref"

    def __init__(self, ref: str, reason: str) -> None:
        super().__init__(f"invalid reference {ref!r}: {reason}", ref=ref, reason=reason)


class InvalidTextError(InvalidInputError):
    """Text a person typed (a label, revision, description, glob, comment) that is too long or holds a
    control or bidirectional formatting character; ``details['field']`` names the field."""

    code = "invalid-text"

    def __init__(self, field: str, reason: str, **details: Any) -> None:
        super().__init__(f"invalid {field}: {reason}", field=field, reason=reason, **details)


class InvalidGlobError(InvalidInputError):
    """An include/exclude glob that is malformed, or one too many (a too long one is InvalidTextError)."""

    code = "invalid-glob"

    def __init__(self, pattern: str, reason: str, **details: Any) -> None:
        super().__init__(f"invalid glob {pattern!r}: {reason}", pattern=pattern, reason=reason, **details)


class InvalidKeyError(InvalidInputError):
    """A key that cannot be used: unreadable, wrongly encrypted, missing, or not ECDSA P-256."""

    code = "invalid-key"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"invalid key: {reason}", reason=reason, **details)


class InvalidStateError(ConflictError):
    """A version cannot move from its current state to the one asked for."""

    code = "invalid-state"


class AlreadyExistsError(ConflictError):
    code = "already-exists"


class ServiceUnavailableError(RegistryError):
    """A dependency (database, blob store) cannot be reached right now."""

    code = "unavailable"


class ReleaseNotLoggedError(ServiceUnavailableError):
    """A release whose events no signed checkpoint covers yet (the verifiable log is catching up): it is
    not served without its proof, which a node would refuse as unproven. Transient: ask again after
    ``retry_after`` seconds (the API sends it as ``Retry-After``)."""

    code = "release-not-logged-yet"

    def __init__(self, model: str, ref: str, event_id: int, retry_after: int) -> None:
        super().__init__(f"the audit log does not cover {model}@{ref} yet (event {event_id}); "
                         f"ask again in {retry_after} s", model=model, ref=ref, event_id=event_id,
                         retry_after=retry_after)
        self.retry_after = retry_after


class BlobVanishedError(ServiceUnavailableError):
    """Bytes just put were deleted by garbage collection before their row was recorded: put them again.

    Transient (a job is retried); see ``registry/services/gc.py``.
    """

    code = "blob-vanished"

    def __init__(self, digest: str) -> None:
        super().__init__(f"blob {digest} was garbage-collected while it was being stored; store it again",
                         digest=digest)


class UnstorableDataError(InvalidInputError):
    """The database refused a value (longer than its column, past an integer's range, a NUL on
    PostgreSQL); the same value is refused again, so the job that tried is not retried."""

    code = "unstorable-data"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the database refused a value: {reason}", reason=reason)


class ScanFailedError(RegistryError):
    """A file could not be scanned (the scan job ran out of attempts)."""

    code = "scan-error"


class RangeNotSatisfiableError(InvalidInputError):
    """A byte range outside the blob, or one the server does not support."""

    code = "range-not-satisfiable"


class SourceNotAllowedError(PermissionDeniedError):
    """A submission names an upstream this registry is not configured to read from."""

    code = "source-not-allowed"


class UnrecognizedLicenseError(InvalidInputError):
    """A declared license that normalizes to no SPDX expression and no ``other:<name>``."""

    code = "unrecognized-license"

    def __init__(self, license: str, problem: str) -> None:
        super().__init__(f"license {license[:80]!r} is not recognized: {problem}", license=license[:256],
                         problem=problem)


class SeparationOfDutiesError(PermissionDeniedError):
    """The submitter of a version tried to decide on it (approve or reject)."""

    code = "separation-of-duties"


class CapacityNotHeldError(PermissionDeniedError):
    """A decision in a capacity (security, legal, ml) the principal is not an approver in, in the tenant."""

    code = "capacity-not-held"


class NotAwaitingApprovalError(InvalidStateError):
    """A decision on a version that is not awaiting approval (still in the pipeline, or decided)."""

    code = "not-awaiting-approval"


class AlreadyDecidedError(ConflictError):
    """A principal decided on this version before: one person counts once."""

    code = "already-decided"


class AliasNotFoundError(NotFoundError):
    code = "alias-not-found"

    def __init__(self, model: str, alias: str) -> None:
        super().__init__(f"model {model!r} has no alias {alias!r}", model=model, alias=alias)


class ComponentNotFoundError(NotFoundError):
    """No version the caller may see has a release-unit component with this digest, or the version named has
    no such component."""

    code = "component-not-found"


class RevokedError(ConflictError):
    """An alias points at a revoked version: it does not resolve until it is moved.

    A conflict with the alias's current state (409), not a gone resource: moving the alias clears it.
    """

    code = "revoked"

    def __init__(self, model: str, version: int, reason: str, *, alias: str | None = None) -> None:
        through = f" (alias {alias!r} points at it; move the alias)" if alias else ""
        super().__init__(f"{model}@{version} was revoked: {reason}{through}",
                         model=model, version=version, reason=reason, alias=alias)


class VersionDeletedError(ConflictError):
    """A version that retention deleted: its record stays, its bytes may be gone, it is never released."""

    code = "version-deleted"

    def __init__(self, model: str, version: int) -> None:
        super().__init__(f"{model}@{version} was deleted by retention: it is not released", model=model,
                         version=version)


class NotApprovedError(ConflictError):
    """A release asked of a version that is not approved (still in the pipeline, rejected or failed).

    A conflict with the version's state (409), as :class:`RevokedError` is: only approved, unrevoked
    versions are released.
    """

    code = "not-approved"

    def __init__(self, model: str, version: int, state: str) -> None:
        super().__init__(f"{model}@{version} is {state}, not approved: it is not released", model=model,
                         version=version, state=state)


class NothingToRollBackError(ConflictError):
    """An alias whose every move was undone already, or that was only ever set once."""

    code = "nothing-to-roll-back"

    def __init__(self, model: str, alias: str) -> None:
        super().__init__(f"alias {alias!r} of {model!r} has no earlier target to roll back to",
                         model=model, alias=alias)


class PromotionDeniedError(PolicyViolationError):
    """The promotion policy refused to move an alias; ``unmet`` says why, the digests say by which
    rules on which input (the decision is stored)."""

    code = "promotion-denied"

    def __init__(self, model: str, alias: str, unmet: list[dict[str, Any]], *, bundle_digest: str,
                 input_digest: str) -> None:
        reasons = "; ".join(str(u.get("message", u.get("code"))) for u in unmet) or "denied"
        super().__init__(f"moving alias {alias!r} of {model!r} is not allowed: {reasons}", model=model,
                         alias=alias, unmet=unmet, bundle_digest=bundle_digest, input_digest=input_digest)


class InvalidServingProfileError(InvalidInputError):
    """A serving profile (``registry/domain/serving_profile.py``) that is malformed, names an unknown engine,
    setting or GPU type, or holds a value of the wrong type or out of range; ``details['field']`` names the
    offending field (``engine``, ``gpu.type``, ``settings.max_model_len``...)."""

    code = "invalid-serving-profile"

    def __init__(self, field: str, reason: str, **details: Any) -> None:
        super().__init__(f"invalid serving profile: {field}: {reason}", field=field, reason=reason, **details)


class ServingProfileDoesNotFitError(PolicyViolationError):
    """A serving profile that cannot be shown to fit its GPUs: the estimate exceeds the budget, or a fact it
    needs is unknown (failing closed). ``details['arithmetic']`` holds the lines of the computation."""

    code = "serving-profile-does-not-fit"

    def __init__(self, gpu: str, reason: str, *, arithmetic: list[str], **details: Any) -> None:
        super().__init__(f"the serving profile does not fit {gpu}: {reason}", gpu=gpu, reason=reason,
                         arithmetic=arithmetic, **details)


class AdapterBaseNotFoundError(NotFoundError):
    """``adapter_of`` names no version the submitter may read: no such model, version, alias or digest, or one in
    a tenant the submitter cannot read (which is not told apart, so nobody learns what another tenant holds)."""

    code = "adapter-base-not-found"

    def __init__(self, ref: str, why: str = "") -> None:
        super().__init__(f"no base version {ref!r} you may read" + (f": {why}" if why else ""), ref=ref)


class AdapterBaseUnusableError(ConflictError):
    """``adapter_of`` names a version that cannot be a base; ``details['reason']`` says why: ``not-sealed``,
    ``failed``, ``rejected``, ``revoked``, ``deleted``, ``adapter`` (it is an adapter itself), ``no-weights``
    or ``same-model`` (an adapter is a version of its own model)."""

    code = "adapter-base-unusable"

    def __init__(self, base: str, reason: str, message: str, **details: Any) -> None:
        super().__init__(f"{base} cannot be an adapter's base: {message}", base=base, reason=reason, **details)


class AdapterIncompatibleError(PolicyViolationError):
    """An adapter that does not fit its bound base (``registry/domain/adapters.py``): ``details['reasons']`` lists
    every refusal ``{code, message, ...}`` (the first 50; ``total`` counts them), ``details['findings']`` what was
    only told (a ``base_model_name_or_path`` naming another model, a pickle whose tensors are unchecked)."""

    code = "adapter-incompatible"

    def __init__(self, base: str, reasons: list[dict[str, Any]], findings: list[dict[str, Any]], *,
                 total: int) -> None:
        first = reasons[0]["message"] if reasons else "no reason given"
        more = f" (and {total - 1} more)" if total > 1 else ""
        super().__init__(f"the adapter does not fit its base {base}: {first}{more}", base=base, reasons=reasons,
                         findings=findings, total=total)


class AdapterBindingMismatchError(IntegrityError):
    """An adapter version's recorded binding to its base differs from the one its signature covers."""

    code = "adapter-binding-mismatch"

    def __init__(self, version: str, *, signed: Any, recorded: Any) -> None:
        super().__init__(f"{version}'s binding to its base is not the one its signature covers", version=version,
                         signed=signed, recorded=recorded)


class NotAnAdapterError(ConflictError):
    """A question about an adapter's base, asked of a version that is no adapter (it is bound to no base)."""

    code = "not-an-adapter"

    def __init__(self, version: str) -> None:
        super().__init__(f"{version} is no adapter: it is bound to no base", version=version)



class AdapterBaseMovedError(ConflictError):
    """An adapter asked for through one of its aliases, whose base model's alias of the same name now points at
    a version with other weights than the ones the adapter is bound to (the serving rule, ADR 0018): it is not
    served until an adapter version bound to the new base is approved and the adapter's alias moved to it."""

    code = "adapter-base-moved"

    def __init__(self, adapter: str, adapter_version: int, *, bound_base: str, bound_weights: str, base_alias: str,
                 base_version: int, base_weights: str | None) -> None:
        super().__init__(
            f"{adapter} (version {adapter_version}) is bound to the weights of {bound_base} "
            f"(sha256:{bound_weights[:12]}...), but {base_alias} now points at version {base_version}, whose "
            f"weights are other (sha256:{(base_weights or 'none')[:12]}...): approve an adapter version bound to "
            f"that base and move {adapter} to it",
            adapter=adapter, adapter_version=adapter_version, bound_base=bound_base, bound_weights=bound_weights,
            base_alias=base_alias, base_version=base_version, base_weights=base_weights)


class AdapterBaseRevokedError(RevokedError):
    """An adapter whose base (the version it is bound to, or the one it would be served with) is revoked:
    revocation follows the binding. A :class:`RevokedError`, so a node exits as for a revoked version."""

    code = "adapter-base-revoked"

    def __init__(self, adapter: str, adapter_version: int, base: str, base_version: int, reason: str) -> None:
        RegistryError.__init__(
            self, f"{adapter} (version {adapter_version}) is not served: its base {base}@{base_version} was "
                  f"revoked: {reason}",
            model=adapter, version=adapter_version, base=base, base_version=base_version, reason=reason)


class AdapterBaseMismatchError(IntegrityError):
    """A node's check: the base release it fetched is not the one the adapter's signed release names
    (``adapter_of``: model, version, statement digest, weights digest); ``details['differ']`` lists which."""

    code = "adapter-base-mismatch"

    def __init__(self, adapter: str, base: str, differ: list[str]) -> None:
        super().__init__(f"the release of {adapter} names another base than the release of {base} the node "
                         f"fetched: {', '.join(differ)} differ", adapter=adapter, base=base, differ=differ)


class NoApprovalToAmendError(ConflictError):
    """File reviews added to an approval the principal never made (no decision of theirs, or a reject)."""

    code = "no-approval-to-amend"


class EgressRefusedError(InvalidInputError):
    """A URL the registry would call is refused by the egress guard (``registry/net/egress.py``): not
    http(s), carrying credentials, unresolvable, or resolving to an address the operator has not allowed;
    ``details['reason']`` says which."""

    code = "egress-refused"


class WebhookNotFoundError(NotFoundError):
    """No webhook subscription with this id that the caller may see."""

    code = "webhook-not-found"

    def __init__(self, subscription_id: int) -> None:
        super().__init__(f"no webhook {subscription_id}", subscription_id=subscription_id)


class WebhookPingsInFlightError(ConflictError):
    """The tenant has ``limit`` test pings waiting to be sent already: another waits until one is done."""

    code = "webhook-pings-in-flight"

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(f"tenant {tenant!r} has {limit} webhook test pings in flight, the most it may have; "
                         "read their deliveries and try again once one is done", tenant=tenant, limit=limit)


# --- the verifiable log (registry/tlog) -----------------------------------------------------


class LogProofError(IntegrityError):
    """A Merkle inclusion or consistency proof does not prove what it claims; ``details['reason']`` says
    which check failed (``index``, ``sizes``, ``length``, ``root``, ``old-root``, ``hash``...)."""

    code = "log-proof-invalid"

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason


class MalformedNoteError(IntegrityError):
    """Bytes that are not a well-formed C2SP signed note (or cosignature); ``details['reason']`` says why."""

    code = "note-malformed"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"malformed note: {reason}", reason=reason, **details)
        self.reason = reason


class NoteSignatureError(SignatureError):
    """A signature line from a known key (name and key ID match) does not verify over the note text."""

    code = "note-signature-invalid"

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"invalid signature for key {name}+{key_id:08x}", name=name, key_id=f"{key_id:08x}")


class UnverifiedNoteError(SignatureError):
    """A note lacks a verified signature it must carry: none from a known key, or not from each required
    one (``details['missing']``), or fewer cosignatures than a quorum asks (``details['needed']``)."""

    code = "note-unverified"


class MalformedCheckpointError(IntegrityError):
    """A note text that is not a C2SP tlog-checkpoint body, or the checkpoint of another log."""

    code = "checkpoint-malformed"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"malformed checkpoint: {reason}", reason=reason, **details)
        self.reason = reason


class InvalidVerifierKeyError(InvalidInputError):
    """A signed-note verifier or signer key string that cannot be used; ``details['reason']`` says why."""

    code = "verifier-key-invalid"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"invalid note key: {reason}", reason=reason, **details)
        self.reason = reason


class InvalidTileError(InvalidInputError):
    """A tlog-tiles path, tile or entry bundle that is not well formed (or not one a tree of that size has)."""

    code = "tile-invalid"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"invalid tile: {reason}", reason=reason, **details)
        self.reason = reason


class LogTileNotFoundError(NotFoundError):
    """No such tile or entry bundle in the log: a path that is not a tlog-tiles path (``details['reason']``),
    or a tile of a tree larger than the log has integrated."""

    code = "log-tile-not-found"

    def __init__(self, path: str, reason: str = "the log has no such tile yet") -> None:
        super().__init__(f"no tile {path!r}: {reason}", path=path, reason=reason)


class LogCheckpointNotFoundError(NotFoundError):
    """The log has signed no checkpoint yet."""

    code = "log-checkpoint-not-found"


class LogTreeNotFoundError(NotFoundError):
    """A proof asked of a tree larger than the log has integrated (``details['size']``, ``details['log_size']``)."""

    code = "log-tree-not-found"

    def __init__(self, size: int, log_size: int) -> None:
        super().__init__(f"the log has no tree of size {size} (it has {log_size} leaves)", size=size,
                         log_size=log_size)


class LogProofRequestError(InvalidInputError):
    """A proof request that names no proof: a leaf outside the tree, sizes backwards or negative."""

    code = "log-proof-request-invalid"


# --- the OCI distribution endpoint (/v2) ------------------------------------------------------


class OciBlobUnknownError(NotFoundError):
    """A digest that no approved, unrevoked version of the repository references (the OCI ``BLOB_UNKNOWN``):
    the same answer whether or not the registry stores those bytes for someone else."""

    code = "oci-blob-unknown"

    def __init__(self, repository: str, digest: str) -> None:
        super().__init__(f"{repository} has no blob {digest}", repository=repository, digest=digest)


class OciManifestUnknownError(NotFoundError):
    """A reference (tag or digest) that names no manifest of the repository (the OCI ``MANIFEST_UNKNOWN``)."""

    code = "oci-manifest-unknown"

    def __init__(self, repository: str, reference: str, reason: str) -> None:
        super().__init__(f"{repository}:{reference} names no manifest: {reason}", repository=repository,
                         reference=reference, reason=reason)


class OciManifestTooLargeError(InvalidInputError):
    """A version whose OCI manifest would pass the clients' 4 MiB even with its small files packed (too many
    large files): its artifact is not built, and its tags answer ``MANIFEST_UNKNOWN`` saying so."""

    code = "oci-manifest-too-large"

    def __init__(self, version: str, size: int, limit: int) -> None:
        super().__init__(f"{version}: its OCI manifest would be {size} bytes, over the clients' {limit}",
                         version=version, size=size, limit=limit)


class PullTokenRejectedError(AuthenticationError):
    """An OCI pull token that is malformed, not signed by this registry, expired, or whose principal or
    modelreg token is no longer valid."""

    code = "pull-token-rejected"


class PullScopeDeniedError(PermissionDeniedError):
    """A pull token presented for a repository its scope does not name (the client asks for a new token)."""

    code = "pull-scope-denied"

    def __init__(self, repository: str) -> None:
        super().__init__(f"the pull token does not grant pull of {repository}", repository=repository)


class OAuthGrantError(InvalidInputError):
    """An OCI token request's OAuth2 form that grants nothing; ``error`` is RFC 6749's code (section 5.2:
    ``invalid_request``, ``invalid_grant``, ``unsupported_grant_type``)."""

    code = "oauth-grant-refused"

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description, error=error)


class TooManyRequestsError(RegistryError):
    """The caller asked too often: ask again after ``retry_after`` seconds (the API answers 429 with
    ``Retry-After``)."""

    code = "too-many-requests"


class ReceiptsRateLimitedError(TooManyRequestsError):
    """A principal sent more receipt reports in a minute than the registry takes (``receipts_rate_per_minute``)."""

    code = "receipts-rate-limited"

    def __init__(self, principal: str, per_minute: int, retry_after: int) -> None:
        super().__init__(f"{principal!r} sent more than {per_minute} receipt reports in a minute; "
                         f"send again in {retry_after} s", principal=principal, per_minute=per_minute,
                         retry_after=retry_after)
        self.retry_after = retry_after
