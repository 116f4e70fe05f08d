"""Whether an adapter's bound base lets it be served through ``/hf`` and ``/v2``: revocation follows the binding.

An adapter version (``registry/services/adapters.py``) is served through ``/hf`` and ``/v2`` only beside a base
that is itself served: its bound base version approved, sealed, not revoked and not deleted by retention
(:mod:`registry.domain.serving`'s rule, asked of the base). Revocation follows the binding to its version, as
for releases (``registry/services/adapter_serving.py``, ADR 0018): another version holding the same weights,
revoked, decides nothing, so a version that mends a revoked base's other parts (its tokenizer, its template) with
the same weights can carry adapters again; weights that must go are revoked in every version that holds them.
This comes on top of the rule every version meets itself.

A channel asks :func:`base_refusal` of the one version it resolved; ``/v2``'s listings, digests and blobs filter
their released set with :func:`served_base_clause`, the same rule as SQL, so the tags, manifests, blobs and
referrers of such an adapter vanish together, as a revoked version's do, and come back if the base is served
again (an approval, never an unrevocation: revocation is final).

An adapter asked for by one of its aliases (``acme/llm-support@prod``) is served only while the base model's
alias of the same name, where it has one, gives a version with the bound weights (:func:`alias_refusal`): a
serving stack that loads the base by that alias (vLLM with ``--revision prod``, KServe's ``hf://`` adapters beside
``hf://acme/llm``) would otherwise run the adapter on weights it was never checked or evaluated on. Until an
adapter version bound to the new weights is approved and its alias moved, only the pinned names (a version
number, a commit, a digest) serve the old pair, whose served config names its own base exactly.

Usage (a sketch, not run as a doctest)::

    reason = adapter_bases.base_refusal(version)   # None, or "its base acme/llm@1 is ..."
    reason = adapter_bases.alias_refusal(session, principal, version, "prod")
    select(Version.id).where(adapter_bases.served_base_clause())
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session, aliased

from registry.auth import AuthenticatedPrincipal
from registry.db.models import AdapterBinding, Alias, Version
from registry.domain import serving
from registry.domain.states import VersionState
from registry.services.adapters import weights_digest_of
from registry.services.loaders import release_facts, version_ref


def base_refusal(version: Version) -> str | None:
    """Why ``version`` is not served because of its base, in words; None when it is no adapter or its base is
    served. The caller asked :mod:`registry.domain.serving` of ``version`` itself, and checked that its reader may
    be served it. The bound base is named (the adapter's version shows it)."""
    binding = version.adapter_binding
    if binding is None:
        return None
    base = binding.base
    why = serving.unreleased_reason(release_facts(base))
    if why:
        return f"its base {version_ref(base)} is not served: {why}"
    return None


def _model_of(version: Version) -> str:
    return f"{version.model.tenant.name}/{version.model.name}"


def _may_read_base(reader: AuthenticatedPrincipal, base: Version) -> bool:
    return serving.may_be_served(reader.permissions(base.model.tenant.name))


def served_base_clause() -> ColumnElement[bool]:
    """A condition on ``Version`` (the enclosing query's): not an adapter, or one whose base is served
    (:func:`base_refusal` as SQL). One correlated ``NOT EXISTS`` on the binding's primary key."""
    base = aliased(Version)
    unserved = (
        select(AdapterBinding.version_id).join(base, base.id == AdapterBinding.base_version_id)
        .where(AdapterBinding.version_id == Version.id,
               or_(base.state != VersionState.APPROVED.value, base.deleted_at.is_not(None),
                   base.manifest_digest.is_(None)))
        .correlate(Version))
    return ~unserved.exists()


def alias_refusal(session: Session, principal: AuthenticatedPrincipal, version: Version, alias: str) -> str | None:
    """Why adapter ``version``, reached through its alias ``alias``, is not served with the base model's alias of
    that name: it gives ``principal`` (its canary where the principal holds a role in a canary tenant, as the
    channels resolve aliases) a version whose weights are not the bound ones. None: no adapter, the base model
    has no such alias, or its version has the bound weights. The caller checked ``principal``'s rights to the
    adapter; the base alias is read for the rule only (nothing of it is served)."""
    binding = version.adapter_binding
    if binding is None:
        return None
    base_model = binding.base.model
    row = session.scalar(select(Alias).where(Alias.model_id == base_model.id, Alias.name == alias))
    if row is None:
        return None
    canary = row.canary_version is not None and any(t in (row.canary_tenants or []) for t in principal.roles)
    given = row.canary_version if canary else row.version
    assert given is not None
    digest = weights_digest_of(session, given)
    if digest == binding.weights_digest:
        return None
    gives = f"gives {version_ref(given)}, whose weights are" if _may_read_base(principal, binding.base) \
        else "gives weights that are"
    return (f"its base's alias {_model_of(binding.base)}@{alias} {gives} not the ones it is bound to "
            f"(sha256:{binding.weights_digest}): an adapter version bound to them is served once approved and its "
            f"alias moved; a version number still names this pair")
