"""May this version be served, to whom, through which channel: the one rule every distribution channel asks.

A caller may be served a model of a tenant where it holds ``read`` or ``fetch`` there; a version is served
only when it is approved, sealed, not revoked and not deleted by retention. Every channel asks
:func:`caller_refusal` and :func:`release_refusal` and raises what they return; each channel says no in the
words its clients understand, decided here from the same facts:

- ``manifest`` (signed release manifests, ``/v1/.../release``): ``RevokedError``, ``VersionDeletedError``,
  ``NotApprovedError`` (409 each).
- ``hf`` (``/hf``): ``ReleaseNotFoundError`` (the Hub's ``RevisionNotFound``), its reason saying which.
- ``oci`` (``/v2``): ``OciManifestUnknownError`` (``MANIFEST_UNKNOWN``), its reason saying which.
- ``s3`` (``modelreg serve-s3`` on a node): the node serves what a release manifest gave it, so the
  registry refuses it as ``manifest``.

A new channel adds its name to :class:`Channel` and, where its clients need other words, its refusal
to :func:`release_refusal`.

Example:
    >>> facts = ReleaseFacts("acme/llm", 3, "revoked", revoke_reason="leaked")
    >>> release_refusal(facts, Channel.HF, "prod").message
    'acme/llm@prod names no released version: version 3 is revoked: leaked'
    >>> release_refusal(ReleaseFacts("acme/llm", 3, "approved"), Channel.OCI, "3") is None
    True
"""

from __future__ import annotations

import enum
from collections.abc import Set
from dataclasses import dataclass

from registry.domain.errors import (
    NotApprovedError,
    OciManifestUnknownError,
    PermissionDeniedError,
    RegistryError,
    ReleaseNotFoundError,
    RevokedError,
    VersionDeletedError,
)
from registry.domain.states import VersionState

SERVING_PERMISSIONS = frozenset({"read", "fetch"})
"""Either of these in a model's tenant lets a caller be served its released versions."""


class Channel(str, enum.Enum):
    """A way released versions leave the registry; downloads are counted per channel."""

    MANIFEST = "manifest"
    HF = "hf"
    OCI = "oci"
    S3 = "s3"


class Unreleased(str, enum.Enum):
    """Why a version is not served (the first that holds, in this order)."""

    REVOKED = "revoked"
    DELETED = "deleted"
    NOT_APPROVED = "not-approved"


@dataclass(frozen=True, slots=True)
class ReleaseFacts:
    """What the rule needs to know of a version: whose it is and where it stands."""

    model: str
    """``tenant/name``."""
    number: int
    state: str
    revoke_reason: str | None = None
    deleted: bool = False
    """Retention deleted it (its record stays)."""
    sealed: bool = True
    """It has a signed statement (``manifest_digest``): every approved version has one."""


def may_be_served(permissions: Set[str]) -> bool:
    """Whether a caller holding ``permissions`` in a tenant may be served its models' released versions."""
    return bool(SERVING_PERMISSIONS & set(permissions))


def caller_refusal(principal: str, permissions: Set[str], tenant: str) -> PermissionDeniedError | None:
    """Why ``principal`` (holding ``permissions`` in ``tenant``) may not be served the tenant's models; None
    when it may. The same answer on every channel."""
    if may_be_served(permissions):
        return None
    return PermissionDeniedError(f"{principal!r} may neither read nor fetch in tenant {tenant!r}",
                                 principal=principal, tenant=tenant, permission="fetch")


def unreleased(facts: ReleaseFacts) -> Unreleased | None:
    """Why the version is not served, or None when it is."""
    if facts.state == VersionState.REVOKED.value:
        return Unreleased.REVOKED
    if facts.deleted:
        return Unreleased.DELETED
    if facts.state != VersionState.APPROVED.value or not facts.sealed:
        return Unreleased.NOT_APPROVED
    return None


def release_refusal(facts: ReleaseFacts, channel: Channel, ref: str, *,
                    is_alias: bool = False) -> RegistryError | None:
    """The error ``channel`` answers when asked for the version ``ref`` names, or None when it is served.

    Args:
        ref: what the caller asked for (an alias, a number, a commit, a tag).
        is_alias: ``ref`` is an alias (the manifest channel's revocation says to move it).
    """
    why = unreleased(facts)
    if why is None:
        return None
    if channel in (Channel.MANIFEST, Channel.S3):
        if why is Unreleased.REVOKED:
            return RevokedError(facts.model, facts.number, facts.revoke_reason or "revoked",
                                alias=ref if is_alias else None)
        if why is Unreleased.DELETED:
            return VersionDeletedError(facts.model, facts.number)
        return NotApprovedError(facts.model, facts.number, facts.state)
    reason = unreleased_reason(facts, with_revoke_reason=channel is Channel.HF)
    if channel is Channel.HF:
        return ReleaseNotFoundError(facts.model, ref, reason)
    return OciManifestUnknownError(facts.model, ref, reason)


def unreleased_reason(facts: ReleaseFacts, *, with_revoke_reason: bool = False) -> str:
    """Why the version is not served, in words (``version 3 is revoked``); "" when it is served."""
    why = unreleased(facts)
    if why is Unreleased.REVOKED:
        said = f"version {facts.number} is revoked"
        return f"{said}: {facts.revoke_reason or 'revoked'}" if with_revoke_reason else said
    if why is Unreleased.DELETED:
        return f"version {facts.number} is deleted"
    if why is Unreleased.NOT_APPROVED:
        return f"version {facts.number} is {facts.state}, not approved"
    return ""
