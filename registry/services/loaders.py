"""Loading models and versions by name or id, without an authorization check.

The one place services read a model or version row for a caller they have checked already (or for a
job, which acts as the system), so that no use case imports another to reach a loader.

Usage (a sketch, not run as a doctest)::

    model = load_model_unchecked(session, "acme", "tiny")
    version_ref(load_version_unchecked(session, model, 1))
    # 'acme/tiny@1'
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.auth import get_tenant
from registry.db.models import Model, Tenant, Version
from registry.db.session import is_postgres
from registry.domain.errors import ModelNotFoundError, VersionNotFoundError
from registry.domain.serving import ReleaseFacts


def load_model_unchecked(session: Session, tenant: str, name: str) -> Model:
    """The model, for a service that has checked the principal itself (aliases, revocation).

    Raises:
        TenantNotFoundError, ModelNotFoundError.
    """
    model = session.scalar(select(Model).join(Model.tenant).where(Model.name == name, Tenant.name == tenant))
    if model is None:
        get_tenant(session, tenant)
        raise ModelNotFoundError(f"{tenant}/{name}")
    return model


def load_version_unchecked(session: Session, model: Model, number: int, *, lock: bool = False) -> Version:
    """Version ``number`` of ``model`` (locked for update on PostgreSQL with ``lock``), unchecked.

    Raises:
        VersionNotFoundError.
    """
    query = select(Version).where(Version.model_id == model.id, Version.number == number)
    if lock and is_postgres(session):
        query = query.with_for_update()
    version = session.scalar(query)
    if version is None:
        raise VersionNotFoundError(f"{model.tenant.name}/{model.name}", number)
    return version


def find_version_unchecked(session: Session, tenant: str, name: str, number: int) -> Version:
    """Version ``number`` of ``tenant/name``, unchecked (the public readers check the principal first).

    Raises:
        TenantNotFoundError, ModelNotFoundError, VersionNotFoundError.
    """
    return load_version_unchecked(session, load_model_unchecked(session, tenant, name), number)


def lock_version_unchecked(session: Session, version_id: int) -> Version | None:
    """The version, locked for update on PostgreSQL; no authorization check (for jobs, which act as the system)."""
    query = select(Version).where(Version.id == version_id)
    if is_postgres(session):
        query = query.with_for_update()
    return session.scalar(query)


def version_ref(version: Version) -> str:
    """``tenant/model@number``: how a version is named in audit subjects and messages."""
    return f"{version.model.tenant.name}/{version.model.name}@{version.number}"


def statement_binding(version: Version) -> dict[str, Any] | None:
    """What an adapter version's signed statement says of its base (``predicate.modelreg.adapter_of``: ``{model,
    version, weights_digest, manifest_digest}``), read from its binding; None for a version that is no adapter.
    The approval and promotion policies read the same document as ``input.adapter_of``."""
    binding = version.adapter_binding
    if binding is None:
        return None
    base = binding.base
    return {"model": f"{base.model.tenant.name}/{base.model.name}", "version": base.number,
            "weights_digest": binding.weights_digest, "manifest_digest": binding.base_manifest_digest}


def tenant_of(version: Version) -> str:
    """Whose work the jobs of ``version`` are: claims are fair between tenants (:mod:`registry.jobs`)."""
    return version.model.tenant.name


def release_facts(version: Version) -> ReleaseFacts:
    """What :mod:`registry.domain.serving` asks of a version to say whether it is served."""
    return ReleaseFacts(f"{version.model.tenant.name}/{version.model.name}", version.number, version.state,
                        revoke_reason=version.revoke_reason, deleted=version.deleted_at is not None,
                        sealed=version.manifest_digest is not None)
