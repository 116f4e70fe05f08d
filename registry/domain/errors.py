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


# --- branches -------------------------------------------------------------------------------


class NotFoundError(RegistryError):
    code = "not-found"


class ConflictError(RegistryError):
    code = "conflict"


class AuthenticationError(RegistryError):
    """No credentials, or credentials that are unknown, expired or revoked."""

    code = "unauthenticated"


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


class SignatureError(IntegrityError):
    code = "bad-signature"


class AuditChainError(IntegrityError):
    """The audit log's hash chain is broken; ``details['event_id']`` names the first bad event."""

    code = "audit-chain-broken"


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
