"""Models and versions: submission, status, signature."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import ModelName, Sha256Hex, TenantName, VersionNumber
from api.problems import AUTHENTICATED, responses
from api.schemas import FilePublic, RevocationPublic, VersionCreate, VersionDerive, VersionDetail, VersionPublic
from registry.db.models import Version
from registry.domain.errors import (
    AdapterBaseUnusableError,
    ConflictError,
    InvalidInputError,
    InvalidStateError,
    LimitExceededError,
    NotFoundError,
    PolicyViolationError,
)
from registry.domain.files import FileEntry
from registry.domain.states import shown_state
from registry.services import adapters, chunks, derive, facts, units, versions

router = APIRouter(prefix="/v1/models", tags=["models"],
                   responses=responses(*AUTHENTICATED, NotFoundError))


def licenses_public(v: Version) -> dict[str, Any]:
    """The ``licenses`` key of a version: resolved and declared license, each finding, gated access."""
    card = v.upstream_card or {}
    return {"resolved": v.license, "declared": v.declared_license,
            "findings": [f.as_dict() for f in v.license_findings],
            "conflicts": sum(f.source == "conflict" for f in v.license_findings),
            "gated": card.get("gated"), "access": card.get("access")}


def version_public(v: Version) -> VersionPublic:
    files = [FilePublic(path=f.path, size=f.size, sha256=f.sha256, mirrored=f.sha256 is not None) for f in v.files]
    return VersionPublic(
        model=f"{v.model.tenant.name}/{v.model.name}",
        version=v.number,
        state=shown_state(v.state, v.deleted_at is not None),
        failure_reason=v.failure_reason,
        failure_detail=v.failure_detail,
        source={"kind": v.source_kind, "repo": v.source_repo, "endpoint": v.source_endpoint,
                "include": v.include, "exclude": v.exclude},
        requested_revision=v.requested_revision,
        resolved_revision=v.resolved_revision,
        license=v.license,
        licenses=licenses_public(v),
        manifest_digest=v.manifest_digest,
        signing_key_id=v.signing_key_id,
        created_at=v.created_at,
        sealed_at=v.sealed_at,
        files=files,
        progress={
            "files": len(files), "files_mirrored": sum(f.mirrored for f in files),
            "bytes": sum(f.size for f in files), "bytes_mirrored": sum(f.size for f in files if f.mirrored),
        },
        revocation=RevocationPublic(at=v.revoked_at, by=v.revoked_by or "", reason=v.revoke_reason or "")
        if v.revoked_at is not None else None,
        derived_from=v.derived_from,
        adapter_of=adapters.binding_document(v),
    )


@router.post("/{tenant}/{name}/versions", status_code=status.HTTP_202_ACCEPTED, response_model=VersionPublic,
             responses={200: {"model": VersionPublic, "description": "the live version of the same source"},
                        **responses(LimitExceededError, NotFoundError, AdapterBaseUnusableError)})
def submit_version(
    tenant: TenantName, name: ModelName, body: VersionCreate, response: Response, session: SessionDep,
    principal: PrincipalDep, container: ContainerDep,
) -> VersionPublic:
    """Submit a version: 202 with the new version, or 200 with the live version of the same source."""
    if body.source.startswith("upload:"):
        if body.files is None:
            raise InvalidInputError("an upload: source needs `files`", field="files")
        version, created = versions.submit_uploaded(
            session, principal, tenant, name, [FileEntry(f.path, f.size, f.sha256) for f in body.files],
            label=body.source.removeprefix("upload:") or "upload", limits=container.limits(),
            ports=container.ports, license=body.license, adapter_of=body.adapter_of,
        )
    elif body.files is not None:
        raise InvalidInputError("`files` goes only with an upload: source", field="files")
    else:
        version, created = versions.submit(
            session, principal, tenant, name,
            versions.SubmitRequest(source=body.source, revision=body.revision, include=tuple(body.include),
                                   exclude=tuple(body.exclude), hf_endpoint=body.hf_endpoint,
                                   license=body.license, adapter_of=body.adapter_of),
            open_source=container.open_source, limits=container.limits(), ports=container.ports,
        )
    if not created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/v1/models/{tenant}/{name}/versions/{version.number}"
    session.refresh(version)
    return version_public(version)


@router.post("/{tenant}/{name}/versions/{number}/derive", status_code=status.HTTP_202_ACCEPTED,
             response_model=VersionPublic,
             responses={200: {"model": VersionPublic, "description": "the version these parts made from it before"},
                        **responses(InvalidInputError, ConflictError, PolicyViolationError)})
def derive_version(
    tenant: TenantName, name: ModelName, number: VersionNumber, body: VersionDerive, response: Response,
    session: SessionDep, principal: PrincipalDep, container: ContainerDep,
) -> VersionPublic:
    """Derive a new version of the unit from version ``number``: new prompt templates or serving profile, every
    other file shared by digest (nothing uploaded or mirrored again). 202 with the new version; 200 with the one
    the same parts made before. A serving profile that does not fit its GPUs is refused with the arithmetic."""
    version, created = derive.derive(
        session, principal, tenant, name, number,
        derive.DeriveRequest(prompts=body.prompts, remove_prompts=tuple(body.remove_prompts),
                             serving_profile=body.serving_profile, remove_serving_profile=body.remove_serving_profile),
        blob_store=container.blob_store, limits=container.limits(), ports=container.ports)
    if not created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/v1/models/{tenant}/{name}/versions/{version.number}"
    session.refresh(version)
    return version_public(version)


@router.get("/{tenant}/{name}/versions", response_model=list[VersionPublic])
def list_versions(tenant: TenantName, name: ModelName, session: SessionDep,
                  principal: PrincipalDep) -> list[VersionPublic]:
    return [version_public(v) for v in versions.list_versions(session, principal, tenant, name)]


@router.get("/{tenant}/{name}/versions/{number}", response_model=VersionDetail)
def get_version(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                principal: PrincipalDep, container: ContainerDep) -> VersionDetail:
    version, found = facts.read_version_with_facts(session, principal, tenant, name, number)
    return VersionDetail(**version_public(version).model_dump(), facts=found,
                         components=units.components_document(session, version),
                         unit_parts=units.unit_parts_document(session, version, blob_store=container.blob_store,
                                                              policy_data=lambda: container.policy.data()))


@router.get("/{tenant}/{name}/diff/{old}/{new}", responses=responses(InvalidStateError))
def diff_versions(tenant: TenantName, name: ModelName, old: VersionNumber, new: VersionNumber, session: SessionDep,
                  principal: PrincipalDep, container: ContainerDep) -> dict[str, Any]:
    """The release-unit diff from version ``old`` to ``new``: which components changed, member by member,
    the files whose chat or prompt templates changed, and each changed chat template rendered old and new
    on the standard conversations (``templates``); 409 until both versions' files are stored."""
    return units.unit_diff(session, principal, tenant, name, old, new, blob_store=container.blob_store)


@router.get("/{tenant}/{name}/versions/{number}/signature", responses=responses(InvalidStateError))
def get_signature(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                  principal: PrincipalDep) -> dict[str, Any]:
    """The version's OpenSSF model-signing bundle (save it as ``model.sig``); 409 until it is sealed."""
    return versions.read_signature(session, principal, tenant, name, number)


@router.get("/{tenant}/{name}/versions/{number}/chunks/{digest}", response_class=Response, responses={
    200: {"description": "the file's chunk list: the 32-byte sha256 of each aligned chunk, concatenated",
          "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
    **responses(ConflictError)})
def get_chunk_list(tenant: TenantName, name: ModelName, number: VersionNumber, digest: Sha256Hex,
                   session: SessionDep, principal: PrincipalDep) -> Response:
    """The chunk digests of the released file with ``digest`` (role ``node``, or ``read`` in the tenant).

    A node checks the list against the chunk root its signed release names (docs/adr/0013-chunk-digests.md);
    ``X-Chunk-Size`` says the chunk size. 404 ``chunks-not-recorded`` until the list is recorded.
    """
    found = chunks.read_chunk_list(session, principal, tenant, name, number, digest)
    return Response(found.digests, media_type="application/octet-stream",
                    headers={"X-Chunk-Size": str(found.chunk_size), "ETag": f'"{found.root}"',
                             "Cache-Control": "private, no-cache"})


@router.get("/{tenant}/{name}/versions/{number}/scans")
def get_scans(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
              principal: PrincipalDep) -> dict[str, Any]:
    """Per file: the verdict of modelreg's scanner and every scanner's record (modelscan beside it)."""
    from registry.services import scans

    version = versions.read_version(session, principal, tenant, name, number)
    return {"model": f"{tenant}/{name}", "version": number, "state": version.state,
            "flagged_at": version.flagged_at.isoformat() if version.flagged_at else None,
            "flag_reason": version.flag_reason, "files": scans.version_scans(session, principal, version)}
