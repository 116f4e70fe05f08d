"""Node bindings: which Kubernetes service accounts of a trusted issuer are serving nodes of a tenant, or its
admission webhook (the ``admission`` role), administrators only. The token side is
``registry/workload_identity.py``.

A binding makes (once) the principal ``sa:<namespace>/<service account>@<issuer>`` (the issuer URL without
its scheme: one principal per issuer, namespace and service account); provenance
names the node by it. Removing the last binding leaves the principal (history names it) but refuses its
tokens from the next request.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from registry import audit
from registry.auth import AuthenticatedPrincipal, get_tenant, require_admin
from registry.db.models import NodeBinding, Principal, Tenant
from registry.db.session import begin_write
from registry.domain.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from registry.settings import WorkloadIssuer
from registry.workload_identity import BINDING_ROLES, principal_name, validate_subject


def _check_issuer(issuer: str, trusted: list[WorkloadIssuer]) -> None:
    if not any(i.issuer == issuer for i in trusted):
        raise InvalidInputError(
            f"issuer {issuer!r} is not trusted here (see MODELREG_WORKLOAD_ISSUERS): "
            f"{', '.join(i.issuer for i in trusted) or 'none is configured'}", field="issuer")


def bind(session: Session, actor: AuthenticatedPrincipal, *, issuer: str, namespace: str, service_account: str,
         tenant: str, trusted: list[WorkloadIssuer], role: str = "node") -> NodeBinding:
    """Bind a service account to ``role`` (``node`` or ``admission``) in ``tenant``; binding it again to the same
    role returns the binding.

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        InvalidInputError: an untrusted issuer, a bad namespace or service account name, another role.
        TenantNotFoundError: no such tenant.
        AlreadyExistsError: the service account is bound to the other role in ``tenant`` (unbind it first).
    """
    require_admin(actor)
    if role not in BINDING_ROLES:
        raise InvalidInputError(f"role {role!r}: a service account is bound as {' or '.join(BINDING_ROLES)}",
                                field="role")
    _check_issuer(issuer, trusted)
    validate_subject(issuer, namespace, service_account)
    begin_write(session)
    tenant_row = get_tenant(session, tenant)
    existing = _find(session, issuer, namespace, service_account, tenant_row)
    if existing is not None:
        if existing.role != role:
            raise AlreadyExistsError(f"{namespace}/{service_account} of {issuer} is bound as {existing.role} in "
                                     f"tenant {tenant!r}: unbind it first to bind it as {role}",
                                     issuer=issuer, namespace=namespace, service_account=service_account,
                                     tenant=tenant, role=existing.role)
        return existing
    name = principal_name(issuer, namespace, service_account)
    principal = session.scalar(select(Principal).where(Principal.name == name))
    if principal is None:
        principal = Principal(name=name, is_admin=False)
        session.add(principal)
        session.flush()
    binding = NodeBinding(issuer=issuer, namespace=namespace, service_account=service_account,
                          tenant_id=tenant_row.id, principal_id=principal.id, created_by=actor.name, role=role)
    session.add(binding)
    session.flush()
    audit.append(session, actor=actor.name, action="node.bound", subject=f"principal/{name}", tenant=tenant,
                 details={"issuer": issuer, "namespace": namespace, "service_account": service_account,
                          "role": role})
    session.commit()
    return binding


def unbind(session: Session, actor: AuthenticatedPrincipal, *, issuer: str, namespace: str, service_account: str,
           tenant: str) -> None:
    """Remove a binding: the service account's tokens are refused in ``tenant`` from the next request.

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        NotFoundError: no such binding (or tenant).
    """
    require_admin(actor)
    begin_write(session)
    tenant_row = get_tenant(session, tenant)
    binding = _find(session, issuer, namespace, service_account, tenant_row)
    if binding is None:
        raise NotFoundError(f"no binding of {namespace}/{service_account} of {issuer} in tenant {tenant!r}",
                            issuer=issuer, namespace=namespace, service_account=service_account, tenant=tenant)
    name = binding.principal.name
    session.delete(binding)
    audit.append(session, actor=actor.name, action="node.unbound", subject=f"principal/{name}", tenant=tenant,
                 details={"issuer": issuer, "namespace": namespace, "service_account": service_account,
                          "role": binding.role})
    session.commit()


def list_bindings(session: Session, actor: AuthenticatedPrincipal, *, tenant: str | None = None) -> list[NodeBinding]:
    """Every binding (of ``tenant`` only, when given), by issuer, namespace, service account, tenant."""
    require_admin(actor)
    query = (select(NodeBinding).join(NodeBinding.tenant)
             .options(joinedload(NodeBinding.tenant), joinedload(NodeBinding.principal))
             .order_by(NodeBinding.issuer, NodeBinding.namespace, NodeBinding.service_account, Tenant.name))
    if tenant is not None:
        query = query.where(Tenant.name == tenant)
    return list(session.scalars(query))


def _find(session: Session, issuer: str, namespace: str, service_account: str, tenant: Tenant) -> NodeBinding | None:
    return session.scalar(
        select(NodeBinding).where(NodeBinding.issuer == issuer, NodeBinding.namespace == namespace,
                                  NodeBinding.service_account == service_account,
                                  NodeBinding.tenant_id == tenant.id))
