"""The release unit of a version: its components and how they differ from the unit it replaces.

A version is one unit; its components (``registry/domain/components.py``) come from its files and the
parts sealing recorded with its facts. :func:`components_of` is the one place they are read;
:func:`unit_diff` compares two versions of a model (``modelreg diff``), and :func:`policy_unit` is the
``unit`` the approval and promotion policies judge: the components, the unit replaced (``base``) and what
changed, the files whose templates a security approval must name, and the suites that evaluate it.

Usage (a sketch, not run as a doctest)::

    doc = unit_diff(session, principal, "acme", "llm", 3, 4)
    doc["diff"]["changed"]   # -> ['tokenizer']
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.db.models import Version, VersionFacts
from registry.domain.components import Component, diff_components, template_review_files, unit_components
from registry.domain.errors import InvalidStateError
from registry.domain.files import FileEntry
from registry.services.loaders import version_ref
from registry.services.versions import read_version


def components_of(session: Session, version: Version) -> tuple[Component, ...] | None:
    """The version's components, or None while its files are not all stored (no unit yet)."""
    if any(f.sha256 is None for f in version.files):
        return None
    row = session.get(VersionFacts, version.id)
    parts = (row.facts.get("parts") if row is not None else None) or {}
    return unit_components([FileEntry(f.path, f.size, f.sha256) for f in version.files], parts)


def components_document(components: tuple[Component, ...] | None) -> list[dict[str, Any]] | None:
    """What ``version show`` and the API list: each component's name, digest and member count."""
    if components is None:
        return None
    return [{"name": c.name, "digest": c.digest, "members": len(c.members)} for c in components]


def read_components(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                    number: int) -> tuple[Version, tuple[Component, ...] | None]:
    """The version and its components, after the permission check of reading the version."""
    version = read_version(session, principal, tenant, name, number)
    return version, components_of(session, version)


def _sealed_components(session: Session, version: Version) -> tuple[Component, ...]:
    found = components_of(session, version)
    if found is None:
        raise InvalidStateError(f"{version_ref(version)} is {version.state}: its files are not all stored yet",
                                state=version.state)
    return found


def unit_diff(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, old: int,
              new: int) -> dict[str, Any]:
    """The component diff from ``tenant/name@old`` to ``@new``: what changed, member by member.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        VersionNotFoundError, ModelNotFoundError, TenantNotFoundError: no such version.
        InvalidStateError: either version's files are not all stored yet.
    """
    before = read_version(session, principal, tenant, name, old)
    after = read_version(session, principal, tenant, name, new)
    return {"model": f"{tenant}/{name}", **diff_document(session, before, after)}


def diff_document(session: Session, before: Version, after: Version) -> dict[str, Any]:
    """``{from, to, components: {from, to}, diff, template_review_files}`` of two versions (no permission
    check: the caller has read both).

    Raises:
        InvalidStateError: either version's files are not all stored yet.
    """
    old_components, new_components = _sealed_components(session, before), _sealed_components(session, after)
    diff = diff_components(old_components, new_components)
    return {"from": before.number, "to": after.number,
            "components": {"from": {c.name: c.digest for c in old_components},
                           "to": {c.name: c.digest for c in new_components}},
            "diff": diff.as_dict(), "template_review_files": list(template_review_files(diff))}


def policy_unit(session: Session, version: Version, base: Version | None, base_reason: str | None,
                suites: list[str]) -> dict[str, Any] | None:
    """``input.unit``: the version's components, the unit it replaces and the diff, for the policies.

    Args:
        version: The version judged (its files stored).
        base: The version it replaces (the alias's current target, or the baseline alias's), or None.
        base_reason: How ``base`` was chosen (``alias:prod``), shown in messages.
        suites: The names of the eval suites that apply to ``version``.

    Returns:
        None while the version's files are not all stored; else ``{components, base, changed,
        template_review_files, suites}``. With no base every component counts as changed, and no
        template is a *change* to review (a first version's templates are checked by the scanners).
    """
    components = components_of(session, version)
    if components is None:
        return None
    base_components = components_of(session, base) if base is not None and base.id != version.id else None
    diff = diff_components(base_components or (), components)
    return {
        "components": {c.name: c.digest for c in components},
        "base": None if base_components is None else {
            "version": base.number, "reason": base_reason, "components": {c.name: c.digest for c in base_components}},
        "changed": list(diff.changed),
        "template_review_files": [] if base_components is None else list(template_review_files(diff)),
        "suites": sorted(suites),
    }
