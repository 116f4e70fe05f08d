"""Deriving a unit (``modelreg derive``): a new version of a model made from one of its versions, with new
registry-held parts (prompt templates, a serving profile) and every other file shared by digest.

Nothing is uploaded again or mirrored again: the new version lists the base's files (the tenant owns their
blobs already), the new parts are stored by their digest, and the version goes through the pipeline like an
upload. Verdicts carry over by digest (a blob scanned once is not scanned again); the component diff against
the base (its lineage, ``derived_from``) decides what policy makes the approver look at again.

The parts are checked before the version exists (``registry/domain/unit_parts.py``): a bad template, a
malformed profile or one that does not fit its GPUs (with the arithmetic, against the base's facts: the
weights are the base's) is refused at once, and nothing is stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.db.models import Version, VersionFacts
from registry.domain.components import SERVING_PROFILE
from registry.domain.errors import ConflictError, InvalidInputError
from registry.domain.files import FileEntry
from registry.domain.serving_profile import parse_serving_profile
from registry.domain.unit_parts import (
    MAX_PROMPTS,
    prompt_path,
    read_held_parts,
    serving_config,
)
from registry.services import versions
from registry.services.loaders import find_version_unchecked
from registry.services.ports import Ports
from registry.services.units import check_parts
from registry.storage.base import BlobStore


@dataclass(frozen=True)
class DeriveRequest:
    """What a derive changes in the base unit.

    Attributes:
        prompts: name -> Jinja text: prompt templates added, or replacing the base's of that name.
        remove_prompts: names of the base's prompt templates the new unit leaves out.
        serving_profile: the profile (a JSON-like mapping) the new unit serves with, replacing the base's.
        remove_serving_profile: the new unit has no serving profile.
    """

    prompts: Mapping[str, str] = field(default_factory=dict)
    remove_prompts: tuple[str, ...] = ()
    serving_profile: Mapping[str, Any] | None = None
    remove_serving_profile: bool = False


class DeriveConflictError(ConflictError):
    """The base cannot be derived from: revoked, deleted, or its files not all stored yet."""

    code = "derive-base-not-ready"


def derive(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
           request: DeriveRequest, *, blob_store: BlobStore, limits: versions.Limits,
           ports: Ports) -> tuple[Version, bool]:
    """Make a new version of ``tenant/name`` from version ``number`` with the request's parts.

    Returns:
        The version and whether it is new (the same parts derived from the same base again give the one
        version made the first time).

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        VersionNotFoundError, ModelNotFoundError, TenantNotFoundError: no such base.
        DeriveConflictError: the base is revoked, deleted, or still being mirrored.
        InvalidInputError: nothing would change, a prompt removed that the base lacks, a bad name.
        PromptTemplateError, InvalidServingProfileError: a part that does not check.
        ServingProfileDoesNotFitError: the profile does not fit its GPUs (the arithmetic in its details).
    """
    require(principal, tenant, Permission.SUBMIT)
    base = find_version_unchecked(session, tenant, name, number)
    ref = f"{tenant}/{name}@{number}"
    if base.deleted_at is not None or base.revoked_at is not None:
        raise DeriveConflictError(f"{ref} is {'deleted' if base.deleted_at else 'revoked'}: derive from another "
                                  "version", version=number)
    if not base.files or any(f.sha256 is None for f in base.files):
        raise DeriveConflictError(f"{ref} still has files to mirror: derive once it is sealed", version=number)
    files = {f.path: FileEntry(f.path, f.size, f.sha256) for f in base.files}
    new_parts = _new_parts(files, request)
    if all(files.get(path) is not None and files[path].sha256 == _sha256(data) for path, data in new_parts.items()) \
            and not _removed(files, request):
        raise InvalidInputError(f"nothing to derive: the parts given are {ref}'s own", reason="derive-no-change")
    for path in _removed(files, request):
        del files[path]
    for path, data in new_parts.items():
        files[path] = FileEntry(path, len(data), _sha256(data))
    held = read_held_parts(files.values(), lambda digest, size: b"".join(blob_store.open_range(digest, 0, size)),
                           given=new_parts)
    facts_row = session.get(VersionFacts, base.id)
    gpus, margin = serving_config(ports.policy.data())
    check_parts(held, facts_row.facts if facts_row is not None else None, gpus, runtime_margin_bytes=margin)
    session.rollback()
    for data in new_parts.values():
        versions.upload_blob(session, principal, tenant, _sha256(data), iter([data]), len(data),
                             blob_store=blob_store)
    base = find_version_unchecked(session, tenant, name, number)
    # A unit derived from an adapter is an adapter of the same base version.
    binding = base.adapter_binding
    return versions.submit_uploaded(session, principal, tenant, name, sorted(files.values(), key=lambda e: e.path),
                                    label=f"derived from {ref}", limits=limits, ports=ports,
                                    license=base.declared_license, derived_from=base,
                                    adapter_of=None if binding is None else f"sha256:{binding.base_manifest_digest}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _new_parts(files: Mapping[str, FileEntry], request: DeriveRequest) -> dict[str, bytes]:
    """path -> bytes of the parts the request adds or replaces (checked for shape, not yet for content)."""
    if len(request.prompts) > MAX_PROMPTS or len(request.remove_prompts) > MAX_PROMPTS:
        raise InvalidInputError(f"at most {MAX_PROMPTS} prompt templates at once", reason="too-many-prompts")
    if request.serving_profile is not None and request.remove_serving_profile:
        raise InvalidInputError("give a serving profile or remove it, not both", reason="derive-conflicting-parts")
    clash = set(request.prompts) & set(request.remove_prompts)
    if clash:
        raise InvalidInputError(f"prompt templates both given and removed: {sorted(clash)[:4]}",
                                reason="derive-conflicting-parts")
    parts: dict[str, bytes] = {}
    for prompt, text in sorted(request.prompts.items()):
        if not isinstance(text, str):
            raise InvalidInputError(f"prompt template {prompt!r} must be text", reason="bad-prompt")
        parts[prompt_path(prompt)] = text.encode("utf-8", "surrogatepass")
    if request.serving_profile is not None:
        parts[SERVING_PROFILE] = parse_serving_profile(request.serving_profile).canonical_json().encode()
    return parts


def _removed(files: Mapping[str, FileEntry], request: DeriveRequest) -> list[str]:
    removed = []
    for prompt in request.remove_prompts:
        path = prompt_path(prompt)
        if path not in files:
            raise InvalidInputError(f"the base has no prompt template {prompt!r} to remove",
                                    reason="derive-no-such-part")
        removed.append(path)
    if request.remove_serving_profile:
        if SERVING_PROFILE not in files:
            raise InvalidInputError("the base has no serving profile to remove", reason="derive-no-such-part")
        removed.append(SERVING_PROFILE)
    return removed
