"""What a fetch can fail on, and the exit code of each: one table for the CLI, its help and the deploy docs.

A serving node's init container is judged by its exit code alone, so every refusal a node must tell apart
has its own code (``python -m registry.cli fetch ...; echo $?``):

====  ==============  =======================================================================
code  kind            meaning
====  ==============  =======================================================================
0     ok              DEST holds the release (fetched, or already there)
1     error           anything else (a bug, a full disk, a bad argument value)
2     usage           the command line itself is wrong (DEST inside the node cache, too)
10    signature       the release or a trust root is not signed by the keys it must be, or malformed
11    expired         the release, or the newest trust root, has expired (or the release was issued
                      more than an hour after the node's clock: the clock is behind)
12    rollback        the release's serial is lower than one this node accepted before
13    digest          bytes differ from the signed digest or size (download, cache, or a fetched DIR)
14    revoked         the registry refuses: the version was revoked
15    not-approved    the registry refuses: the version is not approved (or not released to this node)
16    network         the registry or the blob store cannot be reached, or answered 5xx
17    destination     DEST holds something other than this release; it was left as it was
18    manifest        the release is signed but unusable: a path that is not clean, a reserved name,
                      or a signature bundle that does not match its files
19    log             the release is not proven in the verifiable log the trust root names: no proof,
                      a proof that does not verify, a checkpoint not signed or cosigned as required,
                      or one that does not extend the checkpoint this node accepted before
20    adapter-base    an adapter is not served with its base: the base model's alias moved to other
                      weights than the adapter is bound to (the registry refuses, until an adapter bound
                      to the new base is approved and its alias moved), or the base release the node
                      fetched is not the one the adapter's release names
====  ==============  =======================================================================

Example:
    >>> from registry.client.errors import exit_code
    >>> from registry.signing.release import ReleaseRollbackError
    >>> exit_code(ReleaseRollbackError("serial 3 < 7"))
    (12, 'rollback')
"""

from __future__ import annotations

from typing import Any

# The refusals the server and the client share are the domain's own classes (one code, one class); the
# domain's errors module imports nothing but the standard library.
from registry.domain.errors import (
    AdapterBaseMismatchError,
    AdapterBaseMovedError,
    IntegrityError,
    InvalidInputError,
    InvalidPathError,
    LogProofError,
    MalformedCheckpointError,
    MalformedNoteError,
    ManifestMismatchError,
    NotApprovedError,
    NoteSignatureError,
    RegistryError,
    ReleaseNotFoundError,
    RevokedError,
    SignatureError,
    UnverifiedNoteError,
    UpstreamError,
)

EXIT_CODES: dict[str, int] = {
    "ok": 0, "error": 1, "usage": 2, "signature": 10, "expired": 11, "rollback": 12, "digest": 13,
    "revoked": 14, "not-approved": 15, "network": 16, "destination": 17, "manifest": 18,
    "log": 19, "adapter-base": 20,
}


class NetworkError(UpstreamError):
    """The registry or a transport URL could not be reached, or answered with a server error."""

    code = "network"


class DestinationError(RegistryError):
    """DEST holds something that is not this release (or cannot be written); it was left as it was."""

    code = "destination-not-empty"


class DestinationInCacheError(InvalidInputError):
    """DEST is inside the node cache (or holds it): a pod's directory must never be the cache's storage."""

    code = "destination-in-cache"


class BadManifestError(IntegrityError):
    """A signed release that cannot be used as it is: a reserved path, or a bundle that does not match it."""

    code = "bad-manifest"


class TransportError(NetworkError):
    """A transport URL answered, but not with the bytes asked for (no range support, a wrong total size)."""

    code = "transport"


# Problem types the manifest endpoint answers with (the last segment of the RFC 9457 ``type``).
# Kept in one place so the server's names and the node's exit codes cannot drift apart silently.
REVOKED_PROBLEMS = frozenset({"revoked", "version-revoked", "adapter-base-revoked"})
NOT_APPROVED_PROBLEMS = frozenset({"not-approved", "version-not-approved", "not-released", "invalid-state",
                                   "not-awaiting-approval"})


def from_problem(status: int, problem_code: str, message: str, details: dict[str, Any]) -> RegistryError:
    """The client error for a problem the registry answered a manifest request with."""
    if problem_code in REVOKED_PROBLEMS:
        return RevokedError.from_wire(message, **details)
    if problem_code in NOT_APPROVED_PROBLEMS:
        return NotApprovedError.from_wire(message, **details)
    if problem_code == AdapterBaseMovedError.code:
        return AdapterBaseMovedError.from_wire(message, **details)
    details = {**details, "status": status}
    if status >= 500:
        return NetworkError(message, **details)
    if status == 404:
        return ReleaseNotFoundError.from_wire(message, **details)
    return RegistryError(message, **details)


def classify(exc: BaseException) -> str:
    """The kind (a key of :data:`EXIT_CODES`) of a failure."""
    # Imported here: release.py imports cryptography, which errors.py's importers may not need.
    from registry.signing.release import ReleaseExpiredError, ReleaseMismatchError, ReleaseRollbackError
    from registry.signing.trust_root import RootError

    if isinstance(exc, RootError):
        return "expired" if exc.details.get("reason") == "expired" else "signature"
    if isinstance(exc, AdapterBaseMovedError | AdapterBaseMismatchError):
        return "adapter-base"
    if isinstance(exc, ReleaseExpiredError):
        return "expired"
    if isinstance(exc, ReleaseRollbackError):
        return "rollback"
    if isinstance(exc, RevokedError):
        return "revoked"
    if isinstance(exc, NotApprovedError):
        return "not-approved"
    if isinstance(exc, NetworkError):
        return "network"
    if isinstance(exc, DestinationError):
        return "destination"
    if isinstance(exc, DestinationInCacheError):
        return "usage"
    if isinstance(exc, InvalidPathError | BadManifestError | ReleaseMismatchError):
        return "manifest"
    if isinstance(exc, LogProofError | MalformedNoteError | NoteSignatureError | UnverifiedNoteError
                  | MalformedCheckpointError):
        return "log"
    if isinstance(exc, SignatureError):
        return "signature"
    if isinstance(exc, ManifestMismatchError | IntegrityError):
        return "digest"
    return "error"


def exit_code(exc: BaseException) -> tuple[int, str]:
    """``(exit code, kind)`` of a failure."""
    kind = classify(exc)
    return EXIT_CODES[kind], kind
