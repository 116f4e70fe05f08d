"""Request and response bodies of the HTTP API (``<Thing>Create``, ``<Thing>Public``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from api.params import NAME_PATTERN, ByteCount, PrincipalName, TenantName
from registry.auth import Role


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TenantCreate(Strict):
    name: TenantName


class TenantPublic(BaseModel):
    name: str
    created_at: dt.datetime


class PrincipalCreate(Strict):
    name: PrincipalName
    is_admin: StrictBool = False


class RoleGrant(Strict):
    tenant: TenantName
    role: Role
    capacity: str = Field("", pattern=f"^$|{NAME_PATTERN}", description="approvers: security, legal, ml...")


class RoleBindingPublic(BaseModel):
    tenant: str
    role: str
    capacity: str


class PrincipalPublic(BaseModel):
    name: str
    is_admin: bool
    disabled: bool
    roles: list[RoleBindingPublic]


class TokenCreate(Strict):
    description: str = Field("", max_length=256)
    expires_in_days: int | None = Field(90, ge=1, le=3650)


class TokenIssued(BaseModel):
    id: int
    token: str = Field(description="The secret. It is shown only this once.")
    prefix: str
    expires_at: dt.datetime | None


class WhoAmI(BaseModel):
    name: str
    is_admin: bool
    roles: dict[str, list[dict[str, Any]]]


class UploadedFile(Strict):
    path: str = Field(max_length=1024)
    size: ByteCount
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class VersionCreate(Strict):
    source: str = Field(description="hf://org/repo, s3://bucket/prefix, an absolute directory path, "
                                    "or upload:LABEL with `files` already uploaded to /v1/blobs")
    files: list[UploadedFile] | None = Field(None, max_length=100_000,
                                             description="for upload: the files, each uploaded beforehand")
    revision: str | None = Field(None, max_length=256, description="branch, tag or commit; default main")
    include: list[str] = Field(default_factory=list, max_length=100)
    exclude: list[str] = Field(default_factory=list, max_length=100)
    hf_endpoint: str | None = Field(None, max_length=1024)


class FilePublic(BaseModel):
    path: str
    size: int
    sha256: str | None
    mirrored: bool


class VersionPublic(BaseModel):
    model: str
    version: int
    state: str
    failure_reason: str | None
    failure_detail: dict[str, Any] | None
    source: dict[str, Any]
    requested_revision: str | None
    resolved_revision: str | None
    license: str | None
    manifest_digest: str | None
    signing_key_id: str | None
    created_at: dt.datetime
    sealed_at: dt.datetime | None
    files: list[FilePublic]
    progress: dict[str, int]
