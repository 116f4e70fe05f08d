"""Approvals of a version, and its policy evaluated on demand."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import ModelName, TenantName, VersionNumber
from api.problems import AUTHENTICATED, responses
from api.schemas import (
    ApprovalCreate,
    ApprovalFilesAdd,
    ApprovalPreviewPublic,
    ApprovalPublic,
    ApprovalStatusPublic,
    PolicyDecisionPublic,
    PolicyEvaluationPublic,
)
from registry.domain.errors import ConflictError, NotFoundError
from registry.services import approvals

router = APIRouter(prefix="/v1/models", tags=["approvals"],
                   responses=responses(*AUTHENTICATED, NotFoundError))


def status_public(s: approvals.ApprovalStatus) -> ApprovalStatusPublic:
    model, number = s.ref.rsplit("@", 1)
    d = s.decision
    return ApprovalStatusPublic(
        model=model, version=int(number), state=s.state, submitter=s.submitter, unmet=s.unmet, met=s.met,
        decision=None if d is None else PolicyDecisionPublic(
            outcome=d.outcome, allowed=d.allowed, unmet=d.unmet, bundle_digest=d.bundle_digest,
            input_digest=d.input_digest, error=d.error, decided_at=d.decided_at),
        approvals=[ApprovalPublic(principal=a.principal.name, capacity=a.capacity, decision=a.decision,
                                  comment=a.comment, files=a.files, at=a.at) for a in s.approvals],
    )


@router.post("/{tenant}/{name}/versions/{number}/approvals", status_code=status.HTTP_201_CREATED,
             response_model=ApprovalStatusPublic, responses=responses(ConflictError))
def decide(tenant: TenantName, name: ModelName, number: VersionNumber, body: ApprovalCreate,
           session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> ApprovalStatusPublic:
    """Approve or reject a version awaiting approval, in a capacity you hold; answers where it stands now."""
    request = approvals.ApprovalRequest(decision=body.decision, capacity=body.capacity, comment=body.comment,
                                        files=tuple(body.files))
    return status_public(approvals.decide(session, principal, tenant, name, number, request,
                                          ports=container.ports))


@router.post("/{tenant}/{name}/versions/{number}/approvals/preview", response_model=ApprovalPreviewPublic,
             responses=responses(ConflictError))
def preview(tenant: TenantName, name: ModelName, number: VersionNumber, body: ApprovalCreate, session: SessionDep,
            principal: PrincipalDep, container: ContainerDep) -> ApprovalPreviewPublic:
    """What would remain unmet if you made this decision now, and which of it your capacity could still
    satisfy (``yours``); records nothing. Refused exactly as the decision itself would be."""
    request = approvals.ApprovalRequest(decision=body.decision, capacity=body.capacity, comment=body.comment,
                                        files=tuple(body.files))
    p = approvals.preview(session, principal, tenant, name, number, request, engine=container.policy,
                          clock=container.clock)
    d = p.decision
    return ApprovalPreviewPublic(
        model=f"{tenant}/{name}", version=number, state=p.state, unmet=d.unmet, yours=p.yours,
        decision=PolicyDecisionPublic(outcome=d.outcome, allowed=d.allowed, unmet=d.unmet, error=d.error,
                                      bundle_digest=d.bundle_digest, input_digest=d.input_digest))


@router.post("/{tenant}/{name}/versions/{number}/approvals/files", response_model=ApprovalStatusPublic,
             responses=responses(ConflictError))
def add_files(tenant: TenantName, name: ModelName, number: VersionNumber, body: ApprovalFilesAdd,
              session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> ApprovalStatusPublic:
    """Add file reviews to your own earlier approval (audited as ``version.approval.files-added``); the policy
    judges the version again, and it becomes approved if that satisfies it. Answers where it stands now."""
    return status_public(approvals.add_files(session, principal, tenant, name, number, tuple(body.files),
                                             ports=container.ports))


@router.get("/{tenant}/{name}/versions/{number}/approvals", response_model=ApprovalStatusPublic)
def get_approvals(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                  principal: PrincipalDep) -> ApprovalStatusPublic:
    """The version's state, what its latest policy decision left unmet (and met), and the decisions so far."""
    return status_public(approvals.status(session, principal, tenant, name, number))


@router.get("/{tenant}/{name}/versions/{number}/policy", response_model=PolicyEvaluationPublic,
            responses=responses(ConflictError))
def evaluate_policy(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                    principal: PrincipalDep, container: ContainerDep) -> PolicyEvaluationPublic:
    """Evaluate the approval policy on the version as it stands, storing and changing nothing."""
    version, d = approvals.evaluate(session, principal, tenant, name, number, engine=container.policy)
    return PolicyEvaluationPublic(
        model=f"{tenant}/{name}", version=number, state=version.state,
        decision=PolicyDecisionPublic(outcome=d.outcome, allowed=d.allowed, unmet=d.unmet, error=d.error,
                                      bundle_digest=d.bundle_digest, input_digest=d.input_digest))
