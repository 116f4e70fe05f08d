"""Serving an adapter with its base: which base version a release of an adapter names, and when none may.

The serving rule (ADR 0018), failing closed. An adapter version is bound to a base version's weights
(``registry/services/adapters.py``). Its release is served with:

- asked for through one of its own aliases (``acme/llm-support@prod``): the base model's alias of the same name
  (``acme/llm@prod``, resolved for the tenant served, canary included) when that alias's version has the bound
  weights; when it points at other weights, nothing (:class:`AdapterBaseMovedError`, 409 ``adapter-base-moved``)
  until an adapter version bound to the new base is approved and the adapter's alias moved to it; when the base
  model has no such alias, the bound base version itself;
- asked for by its number: the bound base version.

Revocation follows the binding: the bound version revoked, or the one it would be served with, refuses the
release (:class:`AdapterBaseRevokedError`, 409 ``adapter-base-revoked``); a base not approved (or deleted) refuses
it as the base's own release would. :func:`served_base` decides; ``registry/services/manifests.py`` asks it for
every release of an adapter and signs its answer as the release's ``adapter_of``.

The event stream says so, in the transaction of the change: :func:`after_alias_move` appends an
``adapter.unservable`` audit event (``reason`` ``base-moved``) for each adapter alias a base alias move leaves
unservable, and :func:`after_base_revoked` one (``reason`` ``base-revoked``) for each approved adapter version
bound to a revoked base, each in the adapter's own tenant; the base's ``version.revoked`` lists those of its tenant
(:func:`bound_adapters`).

The base's served name (the name an engine serves it under, which a node writes into the adapter's
``adapter_config.json``) is ``tenant/name`` of the base model: a serving profile cannot name one (vLLM's
``--served-model-name`` stays on the command line, ``registry/domain/serving_profile.py``).

Usage (a sketch, not run as a doctest)::

    binding = binding_of(session, version)        # None: not an adapter
    base = served_base(session, binding, "prod", is_alias=True, for_tenant="acme")
    base.document(statement_digest)               # the release's adapter_of
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, aliased

from registry import audit
from registry.db.models import AdapterBinding, Alias, Model, Tenant, Version, VersionComponent
from registry.domain import aliases as alias_rules
from registry.domain import serving
from registry.domain.errors import AdapterBaseMovedError, AdapterBaseRevokedError
from registry.domain.serving import Channel, ReleaseFacts
from registry.domain.states import VersionState
from registry.services.loaders import version_ref

UNSERVABLE_ACTION = "adapter.unservable"
"""The audit action (and event type) of an adapter left unservable by its base."""
MAX_LISTED_ADAPTERS = 100
"""Adapter versions a ``version.revoked`` event names at most (each has its own ``adapter.unservable`` event)."""


@dataclass(frozen=True)
class BoundBase:
    """What never changes of an adapter version's binding: kept per process with its release parts."""

    adapter: str
    """``tenant/name`` of the adapter."""
    adapter_version: int
    base_model_id: int
    base_model: str
    """``tenant/name`` of the base, which is also its served name."""
    bound_version_id: int
    bound_number: int
    weights_digest: str


@dataclass(frozen=True)
class ServedBase:
    """The base version a release of an adapter is served with."""

    binding: BoundBase
    version_id: int
    number: int
    ref: str
    """The base's alias it is served through, or its number as text."""
    target: dict[str, Any]
    """What the release's serial follows of the base (the alias's whole value, or the bound version)."""
    watch: tuple[str, ...]
    """The audit subjects whose events may change the answer (the base alias, the bound and served versions)."""

    @property
    def served_name(self) -> str:
        return self.binding.base_model

    def document(self, statement_digest: str) -> dict[str, Any]:
        """The release's ``adapter_of`` (``registry/signing/release.py``), with the served base's statement digest."""
        return {"model": self.binding.base_model, "ref": self.ref, "version": self.number,
                "bound_version": self.binding.bound_number, "weights_digest": self.binding.weights_digest,
                "statement_digest": statement_digest, "served_name": self.served_name}


def binding_of(session: Session, version: Version) -> BoundBase | None:
    """The binding of ``version`` as :func:`served_base` needs it; None when it is not an adapter."""
    row = session.execute(
        select(AdapterBinding.weights_digest, Version.id, Version.number, Model.id.label("model_id"), Model.name,
               Tenant.name.label("tenant"))
        .join(Version, Version.id == AdapterBinding.base_version_id).join(Model, Model.id == Version.model_id)
        .join(Tenant, Tenant.id == Model.tenant_id).where(AdapterBinding.version_id == version.id)).one_or_none()
    if row is None:
        return None
    return BoundBase(f"{version.model.tenant.name}/{version.model.name}", version.number, row.model_id,
                     f"{row.tenant}/{row.name}", row.id, row.number, row.weights_digest)


def served_base(session: Session, binding: BoundBase, ref: str, *, is_alias: bool, for_tenant: str) -> ServedBase:
    """The base version a release of the adapter ``binding`` names, asked for by ``ref`` for ``for_tenant``.

    Raises:
        AdapterBaseRevokedError: the bound base version, or the one the base alias gives ``for_tenant``, is revoked.
        AdapterBaseMovedError: ``ref`` is an alias, and the base model's alias of that name gives ``for_tenant``
            a version with other weights.
        NotApprovedError, VersionDeletedError: the base version served is not approved, or was deleted.
    """
    bound_id, bound = _facts(session, binding.bound_version_id)
    _refuse_revoked(binding, bound)
    watch = [f"{binding.base_model}@{binding.bound_number}"]
    if is_alias:
        # Also while the base has no alias of that name: the one made later decides from then on.
        watch.append(f"{binding.base_model}@{ref}")
    row = _base_alias(session, binding.base_model_id, ref) if is_alias else None
    if row is None:
        served_id, served, served_ref = bound_id, bound, str(binding.bound_number)
        target: dict[str, Any] = {"model": binding.base_model, "version": binding.bound_number}
    else:
        canary = (alias_rules.Canary(row.c_number, frozenset(row.canary_tenants or ()))
                  if row.c_id is not None else None)
        resolution = alias_rules.resolve(binding.base_model, ref, alias_rules.AliasTarget(row.number, canary),
                                         for_tenant, {})
        served_id, served = _facts(session, row.c_id if resolution.canary else row.id)
        _refuse_revoked(binding, served, alias=ref)
        weights = row.c_weights if resolution.canary else row.weights
        if weights != binding.weights_digest:
            raise AdapterBaseMovedError(
                f"{binding.adapter}@{ref}", binding.adapter_version,
                bound_base=f"{binding.base_model}@{binding.bound_number}", bound_weights=binding.weights_digest,
                base_alias=f"{binding.base_model}@{ref}", base_version=served.number, base_weights=weights)
        served_ref = ref
        target = {"model": binding.base_model, "alias": ref, "version": row.number,
                  "canary": None if canary is None else {"version": canary.version,
                                                         "tenants": sorted(canary.tenants)}}
        watch.append(f"{binding.base_model}@{served.number}")
    refusal = serving.release_refusal(served, Channel.MANIFEST, served_ref, is_alias=row is not None)
    if refusal is not None:
        raise refusal
    return ServedBase(binding, served_id, served.number, served_ref, target, tuple(dict.fromkeys(watch)))


def _facts(session: Session, version_id: int) -> tuple[int, ReleaseFacts]:
    version = session.get(Version, version_id)
    return version.id, ReleaseFacts(f"{version.model.tenant.name}/{version.model.name}", version.number,
                                    version.state, revoke_reason=version.revoke_reason,
                                    deleted=version.deleted_at is not None)


def _refuse_revoked(binding: BoundBase, base: ReleaseFacts, *, alias: str | None = None) -> None:
    if base.state == VersionState.REVOKED.value:
        adapter = f"{binding.adapter}@{alias}" if alias else binding.adapter
        raise AdapterBaseRevokedError(adapter, binding.adapter_version, base.model, base.number,
                                      base.revoke_reason or "revoked")


def _base_alias(session: Session, model_id: int, alias: str) -> Any:
    """The base model's alias ``alias``: its versions (main, canary) with their weights digests; None if none."""
    canary = aliased(Version)
    weights, canary_weights = aliased(VersionComponent), aliased(VersionComponent)
    return session.execute(
        select(Alias.canary_tenants, Version.id, Version.number, weights.digest.label("weights"),
               canary.id.label("c_id"), canary.number.label("c_number"), canary_weights.digest.label("c_weights"))
        .select_from(Alias).join(Version, Version.id == Alias.version_id)
        .outerjoin(weights, and_(weights.version_id == Version.id, weights.name == "weights"))
        .outerjoin(canary, canary.id == Alias.canary_version_id)
        .outerjoin(canary_weights, and_(canary_weights.version_id == canary.id, canary_weights.name == "weights"))
        .where(Alias.model_id == model_id, Alias.name == alias)).one_or_none()


# --- the event stream ------------------------------------------------------------------------------------


def after_alias_move(session: Session, model: Model, alias: str, actor: str) -> list[str]:
    """After ``model``'s alias ``alias`` moved (in the move's transaction): an ``adapter.unservable`` event for
    each adapter alias of that name, bound to a version of ``model``, that the move leaves unservable for some
    tenant. Returns the adapter aliases named (``tenant/name@alias``)."""
    adapter_version = aliased(Version)
    base_version = aliased(Version)
    # An alias whose main and canary versions are both bound comes twice: kept once (no DISTINCT over the row,
    # whose JSON column PostgreSQL cannot compare).
    rows = list(dict.fromkeys(session.scalars(
        select(Alias).join(adapter_version, or_(adapter_version.id == Alias.version_id,
                                                adapter_version.id == Alias.canary_version_id))
        .join(AdapterBinding, AdapterBinding.version_id == adapter_version.id)
        .join(base_version, base_version.id == AdapterBinding.base_version_id)
        .where(base_version.model_id == model.id, Alias.name == alias, Alias.model_id != model.id)
        .order_by(Alias.id))))
    if not rows:
        return []
    base = _base_alias(session, model.id, alias)
    named = []
    for row in rows:
        found = _unservable_pair(row, model.id, base)
        if found is None:
            continue
        adapter, base_number, base_weights, through_canary = found
        subject = f"{row.model.tenant.name}/{row.model.name}@{alias}"
        binding = adapter.adapter_binding
        audit.append(session, actor=actor, action=UNSERVABLE_ACTION, subject=subject, tenant=row.model.tenant.name,
                     details={"reason": "base-moved", "adapter_version": adapter.number,
                              "base": f"{model.tenant.name}/{model.name}@{alias}", "base_version": base_number,
                              "weights_digest": binding.weights_digest, "base_weights_digest": base_weights,
                              "canary": through_canary})
        named.append(subject)
    return named


def _unservable_pair(row: Alias, base_model_id: int, base: Any) -> tuple[Version, int, str | None, bool] | None:
    """The first (adapter version, base version, its weights, through a canary) that some tenant would get through
    the adapter alias ``row`` and the base alias ``base``, where the weights differ from the bound ones."""
    if base is None:
        return None
    adapter_canary = set(row.canary_tenants or ()) if row.canary_version is not None else set()
    base_canary = set(base.canary_tenants or ()) if base.c_id is not None else set()
    main_base = (base.number, base.weights)
    canary_base = (base.c_number, base.c_weights)
    pairs = [(row.version, main_base, False)]  # every tenant in neither canary list
    if row.canary_version is not None and (adapter_canary - base_canary):
        pairs.append((row.canary_version, main_base, True))
    if base.c_id is not None and (base_canary - adapter_canary):
        pairs.append((row.version, canary_base, True))
    if row.canary_version is not None and base.c_id is not None and (adapter_canary & base_canary):
        pairs.append((row.canary_version, canary_base, True))
    for adapter, (number, weights), through_canary in pairs:
        binding = adapter.adapter_binding
        if binding is None or binding.base.model_id != base_model_id:
            continue
        if weights != binding.weights_digest:
            return adapter, number, weights, through_canary
    return None


def bound_adapters(session: Session, base: Version) -> list[Version]:
    """The approved adapter versions bound to ``base``, oldest first (no authorization check: for services that
    checked their caller)."""
    return list(session.scalars(
        select(Version).join(AdapterBinding, AdapterBinding.version_id == Version.id)
        .where(AdapterBinding.base_version_id == base.id, Version.state == VersionState.APPROVED.value,
               Version.deleted_at.is_(None)).order_by(Version.id)))


def listed_in_revocation(base: Version, adapters: list[Version]) -> dict[str, Any]:
    """What the base's ``version.revoked`` says of its adapters: those of its own tenant (another tenant's are
    told in that tenant only), at most :data:`MAX_LISTED_ADAPTERS`, and how many there are in all."""
    tenant = base.model.tenant.name
    own = [version_ref(a) for a in adapters if a.model.tenant.name == tenant]
    return {"adapters": own[:MAX_LISTED_ADAPTERS], "adapters_total": len(own)}


def after_base_revoked(session: Session, base: Version, adapters: list[Version], actor: str, reason: str) -> None:
    """After ``base`` was revoked (in the revocation's transaction): an ``adapter.unservable`` event for each of
    ``adapters`` (:func:`bound_adapters`), in the adapter's tenant."""
    for adapter in adapters:
        audit.append(session, actor=actor, action=UNSERVABLE_ACTION, subject=version_ref(adapter),
                     tenant=adapter.model.tenant.name,
                     details={"reason": "base-revoked", "adapter_version": adapter.number,
                              "base": version_ref(base), "base_version": base.number,
                              "weights_digest": adapter.adapter_binding.weights_digest, "revoke_reason": reason})
