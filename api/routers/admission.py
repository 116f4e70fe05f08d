"""Admission reviews: the registry decides the model references of a Kubernetes object (``modelreg admission``
asks; the role ``admission`` is checked in the service), and records the reviews the webhook answered from its
own proof (reported in batches, ADR 0019)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.problems import AUTHENTICATED, responses
from api.schemas import Strict, ZonedDateTime
from registry.domain.admission import MAX_URI_LENGTH
from registry.domain.errors import InvalidInputError
from registry.domain.text import FreeText, Label
from registry.services import admission, manifests

router = APIRouter(prefix="/v1/admission", tags=["admission"])

ReferenceKind = Literal["storage-uri", "adapter-uri", "local-model-cache", "image-volume", "init-fetch"]


class AdmissionObject(Strict):
    kind: Label(63) = Field(min_length=1, description="Pod, InferenceService, ...")
    namespace: Label(63) = Field(min_length=1)
    name: Label(253) = Field(default="", description="empty for a pod named by generateName")
    uid: Label(64) = Field(description="the AdmissionReview request's uid")
    operation: Label(16) = Field(description="CREATE, UPDATE, ...")


class AdmissionReference(Strict):
    uri: FreeText(MAX_URI_LENGTH) = Field(min_length=1, description="the reference as written")
    path: FreeText(admission.MAX_PATH_LENGTH) = Field(min_length=1, description="its RFC 6901 pointer")
    kind: ReferenceKind
    held: int | None = Field(default=None, ge=1, strict=True, description=(
        "the version the caller holds a verified release for: allowed and resolved to it, the reference is "
        "answered without a release"))


class AdmissionReviewCreate(Strict):
    object: AdmissionObject
    references: list[AdmissionReference] = Field(max_length=admission.MAX_REFERENCES)


class AdmissionReferenceDecision(BaseModel):
    uri: str
    path: str
    kind: str
    outcome: Literal["allowed", "denied", "warned"]
    rule: str
    message: str
    version: int | None = None
    pinned: str | None = None
    release_ref: str | None = None
    release: dict[str, Any] | None = Field(default=None, description=(
        "the signed release proving an allowed registry reference (a manifest answer, without transport)"))


class AdmissionReviewPublic(BaseModel):
    tenant: str | None
    mode: str
    allowed: bool
    references: list[AdmissionReferenceDecision]


@router.post("/reviews", response_model=AdmissionReviewPublic,
             responses=responses(*AUTHENTICATED, InvalidInputError))
def create_review(body: AdmissionReviewCreate, session: SessionDep, principal: PrincipalDep,
                        container: ContainerDep) -> AdmissionReviewPublic:
    """Decide each model reference of a pod or KServe resource (role ``admission``): allowed, denied or warned,
    with the rule, and for an allowed registry reference its pinned form and signed release."""
    settings = container.settings
    obj = admission.ReviewedObject(**body.object.model_dump())
    refs = [admission.ReferenceInput(r.uri, r.path, r.kind, r.held) for r in body.references]
    config = manifests.ReleaseConfig.from_settings(
        settings, log_key=container.log_key,
        cosign=container.collect_cosignatures if settings.log_witnesses else None)
    result = admission.review(
        session, principal, obj, refs, engine=container.policy,
        registry_hosts=admission.host_of(settings.public_url), keyring=container.keyring,
        blob_store=container.blob_store, clock=container.clock, config=config, cache=container.release_cache)
    return AdmissionReviewPublic(tenant=result.tenant, mode=result.mode, allowed=result.allowed,
                                 references=[AdmissionReferenceDecision(**r.__dict__) for r in result.references])


class AnsweredReferenceReport(Strict):
    uri: FreeText(MAX_URI_LENGTH) = Field(min_length=1)
    path: FreeText(admission.MAX_PATH_LENGTH) = Field(min_length=1)
    kind: ReferenceKind
    version: int = Field(ge=1, strict=True, description="the version the registry last decided the reference to")
    pinned: FreeText(MAX_URI_LENGTH) | None = None


class AnsweredReviewReport(Strict):
    object: AdmissionObject
    references: list[AnsweredReferenceReport] = Field(min_length=1, max_length=admission.MAX_REFERENCES)
    decided_at: ZonedDateTime = Field(description="when the webhook answered (with its offset)")


class AnsweredReviewsCreate(Strict):
    reviews: list[AnsweredReviewReport] = Field(min_length=1, max_length=admission.MAX_ANSWERED)


class RefusedReport(BaseModel):
    index: int
    reason: str


class AnsweredReviewsPublic(BaseModel):
    recorded: int
    refused: list[RefusedReport]
    already_recorded: int = Field(description="reviews whose request uid an earlier report had recorded (a batch "
                                              "sent again): not recorded twice")


@router.post("/answered", response_model=AnsweredReviewsPublic,
             responses=responses(*AUTHENTICATED, InvalidInputError))
def record_answered(body: AnsweredReviewsCreate, session: SessionDep, principal: PrincipalDep,
                    container: ContainerDep) -> AnsweredReviewsPublic:
    """Record reviews the webhook answered from its own proof (role ``admission``): each becomes the same
    ``admission.decided`` record and event as a decided review, marked as answered from the webhook's proof; a
    review the registry cannot confirm (not the namespace's tenant's, not approved by its policy now, no such
    version) is refused and named."""
    reviews = []
    for item in body.reviews:
        reviews.append(admission.AnsweredReview(
            admission.ReviewedObject(**item.object.model_dump()),
            [admission.AnsweredReference(**r.model_dump()) for r in item.references], item.decided_at))
    result = admission.record_answered(
        session, principal, reviews, engine=container.policy,
        registry_hosts=admission.host_of(container.settings.public_url), clock=container.clock)
    return AnsweredReviewsPublic(recorded=result.recorded,
                                 refused=[RefusedReport(index=i, reason=r) for i, r in result.refused],
                                 already_recorded=result.already_recorded)
