"""OCI serving: what the read-only ``/v2`` endpoint serves of released versions, decided here.

A repository is a model (``tenant/name``); each released version (approved, unrevoked, not deleted:
:mod:`registry.domain.serving`, the rule every channel asks) is a CNCF ModelPack artifact
(``registry/domain/modelpack.py``) whose tags are its number and the aliases that give it to the caller, and an
image-shaped artifact under the same tags with ``-image`` (an adapter only while its base is served, and its
manifests name the base's: ``registry/services/adapter_bases.py``). Both are built once, when the version is approved
(``registry/services/oci_builds.py``); serving returns the stored bytes. Its layers are the version's files,
served from the blob store as stored, or tar layers generated around them (:func:`tar_range`). Readers and
serving nodes of the tenant (``read`` or ``fetch``) may pull, as through ``/hf``; who the caller is, and which
repositories a pull token covers, is ``registry/services/oci_tokens.py``'s. Anything else is the same answer
whether it exists or not: no tag, manifest or blob answers for a repository the caller may not read, and a
blob answers only in a repository one of whose released versions references it.

Usage (a sketch, not run as a doctest)::

    caller = OciCaller(principal, repositories=None)
    pulled = manifest(session, caller, "acme", "llm", "prod", clock=container.clock)
    pulled.artifact.manifest_digest
    # -> 'sha256:...'
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import literal, select
from sqlalchemy.orm import Session

from registry.clock import Clock
from registry.db.models import Alias, Model, OciArtifact, OciTarLayer, Tenant, Version, VersionFile
from registry.db.session import is_postgres
from registry.domain import modelpack, serving
from registry.domain.errors import (
    InvalidInputError,
    OciBlobUnknownError,
    OciManifestUnknownError,
    PullScopeDeniedError,
    ReleaseNotFoundError,
    SizeMismatchError,
)
from registry.domain.modelpack import PackFile, TarLayer
from registry.domain.serving import Channel
from registry.domain.states import VersionState
from registry.jobs import DEAD
from registry.services import adapter_bases, downloads, hf, loaders
from registry.services.loaders import release_facts
from registry.services.oci_builds import enqueue_build, store_raw_if_cheap, stored
from registry.services.oci_tokens import OciCaller
from registry.storage.base import BlobStore

MAX_PAGE = 1000
"""The most tags or repositories one listing answers (``n`` above it is refused)."""
DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
TAG_RE = re.compile(r"\A[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}\Z")
REFERRER_SHAPE = "referrer"
"""The shape a referrer's manifest is served as (never stored: built from the documents as they are now)."""
IMAGE_SUFFIX = "-image"
"""A tag ending so names the image shape of what the rest names (``3-image``, ``prod-image``): ADR 0012."""


@dataclass(frozen=True, slots=True)
class StoredArtifact:
    """One shape of a released version as stored when it was approved: the bytes served, as they are."""

    shape: str
    media_type: str
    manifest_bytes: bytes
    manifest_digest: str
    config_digest: str


@dataclass(frozen=True, slots=True)
class Pulled:
    """A released version as an artifact."""

    repository: str
    version_id: int
    number: int
    artifact: StoredArtifact
    referrer: bool = False
    """A referrer of the version's model manifest (a document of it), not the model itself: no pull is counted."""


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A blob a repository references: a file (read from the store by ``sha256``) or the config (``data``)."""

    digest: str
    size: int
    sha256: str
    data: bytes | None = None
    """The stored config blob's bytes; None for a file, whose bytes are the store's."""
    tar: TarLayer | None = None
    """A tar layer, generated when read (:func:`tar_range`); None for a file or a config."""


@dataclass(frozen=True, slots=True)
class Page:
    items: list[str]
    more: bool
    """Whether items follow the last one (the next page starts after it)."""


# --- who ------------------------------------------------------------------------------------------


def require_pull(caller: OciCaller, tenant: str, name: str) -> None:
    """Raise unless ``caller`` may pull ``tenant/name`` (checked before anything is looked up).

    Raises:
        PullScopeDeniedError: a pull token whose scope does not name the repository.
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
    """
    if caller.repositories is not None and f"{tenant}/{name}" not in caller.repositories:
        raise PullScopeDeniedError(f"{tenant}/{name}")
    refusal = serving.caller_refusal(caller.principal.name, caller.principal.permissions(tenant), tenant)
    if refusal is not None:
        raise refusal


# --- manifests ------------------------------------------------------------------------------------


def manifest(session: Session, caller: OciCaller, tenant: str, name: str, reference: str, *,
             clock: Clock) -> Pulled:
    """The artifact ``reference`` names in ``tenant/name``: a version number or an alias (as it resolves for
    the caller, canary included), either with ``-image`` for the image shape, or the ``sha256:`` digest of a
    stored manifest (one indexed query). Referrers: ``registry/services/oci_referrers.py``.

    Args:
        clock: the time of a raw shape stored now, or of a build job queued again (the ports' clock).

    Raises:
        PullScopeDeniedError, PermissionDeniedError: see :func:`require_pull`.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        OciManifestUnknownError: the reference names no approved, unrevoked, not deleted version, or its
            image shape is not built yet (the reason says which).
    """
    require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    repository = f"{tenant}/{name}"
    if reference.startswith("sha256:"):
        if not DIGEST_RE.match(reference):
            raise OciManifestUnknownError(repository, reference[:80], "not a sha256 digest")
        row = session.execute(
            select(OciArtifact, Version.number).join(Version, OciArtifact.version_id == Version.id)
            .where(OciArtifact.model_id == model.id, OciArtifact.manifest_digest == reference,
                   Version.id.in_(_released_ids(model)))).first()
        if row is None:
            raise OciManifestUnknownError(repository, reference, "no released version has this manifest")
        return _as_pulled(repository, row[0], row[1])
    if not TAG_RE.match(reference):
        raise OciManifestUnknownError(repository, reference[:80], "not a tag or a digest")
    tag, shape = (reference.removesuffix(IMAGE_SUFFIX), modelpack.IMAGE) if reference.endswith(IMAGE_SUFFIX) \
        else (reference, modelpack.RAW)
    try:
        version = hf.version_named(session, caller.principal, model, repository, tag, hub_names=False)
    except ReleaseNotFoundError as e:
        raise OciManifestUnknownError(repository, reference, e.details["reason"]) from None
    refusal = serving.release_refusal(release_facts(version), Channel.OCI, reference)
    if refusal is not None:
        raise refusal
    base_refusal = adapter_bases.base_refusal(version)
    alias = hf.alias_named(tag, hub_names=False)
    if base_refusal is None and alias is not None:
        base_refusal = adapter_bases.alias_refusal(session, caller.principal, version, alias)
    if base_refusal is not None:
        raise OciManifestUnknownError(repository, reference, base_refusal)
    return _pulled(session, model, version, shape, reference, clock=clock)


def record_pull(session: Session, caller: OciCaller, pulled: Pulled, *, clock: Clock) -> None:
    """Count one manifest pull by the caller (provenance: ``modelreg provenance nodes``), and commit."""
    if pulled.referrer:
        return
    downloads.count_download(session, caller.principal, pulled.version_id, channel=Channel.OCI, clock=clock)


def _released_query(model: Model):
    # registry.domain.serving.unreleased as one query, and an adapter only beside a served base
    # (adapter_bases): what listings, digests, blobs and referrers answer for is the same set.
    return select(Version).where(Version.model_id == model.id, Version.state == VersionState.APPROVED.value,
                                 Version.deleted_at.is_(None), Version.manifest_digest.is_not(None),
                                 adapter_bases.served_base_clause())


def _released_ids(model: Model):
    return _released_query(model).with_only_columns(Version.id)


def _pulled(session: Session, model: Model, version: Version, shape: str, reference: str, *,
            clock: Clock) -> Pulled:
    """The stored ``shape`` of a released version. A raw shape that needs no reads and is not stored yet
    (a version approved before artifacts were stored) is built and stored now; anything else missing is
    left to the build job (enqueued again here, idempotently) and answers unknown with the job's state."""
    repository = f"{model.tenant.name}/{model.name}"
    row = stored(session, version.id, shape)
    if row is None and shape == modelpack.RAW:
        row = store_raw_if_cheap(session, version, clock=clock)
        session.commit()
    if row is None:
        raise OciManifestUnknownError(repository, reference, _pending_reason(session, version, shape, clock=clock))
    return _as_pulled(repository, row, version.number)


def _as_pulled(repository: str, row: OciArtifact, number: int) -> Pulled:
    return Pulled(repository, row.version_id, number,
                  StoredArtifact(row.shape, row.media_type, row.manifest, row.manifest_digest, row.config_digest))


def _pending_reason(session: Session, version: Version, shape: str, *, clock: Clock) -> str:
    """Why a released version's shape is not served yet: its build job's state (a dead job's error)."""
    job = enqueue_build(session, version, clock=clock)
    state, error = job.state, job.last_error
    session.commit()
    what = "the image-shaped manifest" if shape == modelpack.IMAGE else "the manifest (many files: packed)"
    if state == DEAD:
        return f"{what} of version {version.number} could not be built: {(error or '').strip()[-300:]}"
    return f"{what} of version {version.number} is still being built (a worker job); try again shortly"


# --- blobs -----------------------------------------------------------------------------------------


def blob(session: Session, caller: OciCaller, tenant: str, name: str, digest: str) -> BlobRef:
    """The blob ``digest`` of ``tenant/name``: a file of one of its released versions, a stored config, or
    a tar layer of a stored artifact (generated from the files when read). Referrers' documents:
    ``registry/services/oci_referrers.py``.

    Raises:
        PullScopeDeniedError, PermissionDeniedError: see :func:`require_pull`.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        InvalidInputError: not a ``sha256:`` digest.
        OciBlobUnknownError: no released version of this repository references it (whoever else does).
    """
    require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    repository = f"{tenant}/{name}"
    if not DIGEST_RE.match(digest):
        raise InvalidInputError(f"{digest[:80]!r} is not a sha256:<64 hex> digest", field="digest")
    sha256 = digest.removeprefix("sha256:")
    released = _released_ids(model)
    size = session.scalar(
        select(VersionFile.size).where(VersionFile.sha256 == sha256, VersionFile.version_id.in_(released)).limit(1))
    if size is not None:
        return BlobRef(digest, size, sha256)
    config = session.scalar(select(OciArtifact.config).where(
        OciArtifact.model_id == model.id, OciArtifact.config_digest == digest,
        OciArtifact.version_id.in_(released)).limit(1))
    if config is not None:
        return BlobRef(digest, len(config), sha256, config)
    layer = session.execute(
        select(OciTarLayer, OciArtifact.version_id).join(OciArtifact, OciTarLayer.artifact_id == OciArtifact.id)
        .where(OciTarLayer.model_id == model.id, OciTarLayer.digest == digest,
               OciArtifact.version_id.in_(released)).limit(1)).first()
    if layer is not None:
        tar = _tar_layer(session, layer[0], layer[1])
        return BlobRef(digest, tar.size, sha256, tar=tar)
    raise OciBlobUnknownError(repository, digest)


def _tar_layer(session: Session, row: OciTarLayer, version_id: int) -> TarLayer:
    """A stored tar layer as it is generated: its members' sizes and digests, from the version's files."""
    by_path = {}
    for start in range(0, len(row.paths), 500):
        chunk = row.paths[start:start + 500]
        for path, size, sha in session.execute(select(VersionFile.path, VersionFile.size, VersionFile.sha256).where(
                VersionFile.version_id == version_id, VersionFile.path.in_(chunk))):
            by_path[path] = PackFile(path, size, sha)
    sealed_at = session.scalar(select(Version.sealed_at).where(Version.id == version_id))
    tar = TarLayer(row.root, tuple(by_path[p] for p in row.paths if p in by_path),
                   modelpack.mtime_of(sealed_at), row.digest)
    if len(tar.members) != len(row.paths) or tar.size != row.size:
        # The bytes would not be the ones the digest names: refuse rather than serve them.
        raise SizeMismatchError(row.digest, expected=row.size, actual=tar.size)
    return tar


def tar_range(blob_store: BlobStore, tar: TarLayer, start: int, end: int) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of a tar layer: generated headers and padding, members from the store."""
    offset = 0
    for segment in tar.segments():
        size = len(segment) if isinstance(segment, bytes) else segment.size
        lo, hi = max(start, offset), min(end, offset + size)
        if lo < hi:
            if isinstance(segment, bytes):
                yield segment[lo - offset:hi - offset]
            else:
                yield from blob_store.open_range(segment.sha256, lo - offset, hi - offset)
        offset += size
        if offset >= end:
            return


# --- listings --------------------------------------------------------------------------------------


def tags(session: Session, caller: OciCaller, tenant: str, name: str, *, n: int | None, last: str | None) -> Page:
    """The tags of ``tenant/name`` in ASCII order after ``last``, at most ``n`` (:data:`MAX_PAGE`): the
    numbers of its released versions and the aliases that give the caller one of them.

    Raises:
        PullScopeDeniedError, PermissionDeniedError, TenantNotFoundError, ModelNotFoundError.
        InvalidInputError: ``n`` out of range.
    """
    limit = _limit(n)
    require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    released = {row.id: row.number for row in session.execute(
        _released_query(model).with_only_columns(Version.id, Version.number))}
    imaged = set(session.scalars(select(OciArtifact.version_id).where(
        OciArtifact.model_id == model.id, OciArtifact.shape == modelpack.IMAGE)))
    names = {str(number) for number in released.values()}
    names |= {f"{number}{IMAGE_SUFFIX}" for version_id, number in released.items() if version_id in imaged}
    for alias in session.scalars(select(Alias.name).where(Alias.model_id == model.id)):
        try:
            version = hf.version_named(session, caller.principal, model, f"{tenant}/{name}", alias, hub_names=False)
        except ReleaseNotFoundError:
            continue
        # The released set's rule (an adapter's base included), as the version numbers above; an adapter's
        # alias also needs the base's alias of that name to give the bound weights.
        if (version.id in released and TAG_RE.match(alias)
                and adapter_bases.alias_refusal(session, caller.principal, version, alias) is None):
            names.add(alias)
            if version.id in imaged and TAG_RE.match(alias + IMAGE_SUFFIX):
                names.add(alias + IMAGE_SUFFIX)
    ordered = sorted(t for t in names if last is None or t > last)
    return Page(ordered[:limit], bool(limit) and len(ordered) > limit)


def catalog(session: Session, caller: OciCaller, *, n: int | None, last: str | None) -> Page:
    """The repositories (``tenant/name``) the caller may pull, in ASCII order after ``last``, at most ``n``
    (a pull token's too, when it holds the catalog scope: the catalog is no repository of its scope).

    Raises:
        PermissionDeniedError: a pull token issued without the ``registry:catalog:*`` scope.
        InvalidInputError: ``n`` out of range.
    """
    limit = _limit(n)
    if not caller.catalog:
        raise PullScopeDeniedError("registry:catalog:*")
    principal = caller.principal
    repository = Tenant.name + literal("/") + Model.name
    if is_postgres(session):
        # ASCIIbetical, as the spec orders names (a database's locale may ignore punctuation).
        repository = repository.collate("C")
    query = select(repository).join(Model.tenant).order_by(repository).limit(limit + 1)
    if not principal.is_admin:
        readable = [t for t in principal.roles if serving.may_be_served(principal.permissions(t))]
        query = query.where(Tenant.name.in_(readable))
    if last is not None:
        query = query.where(repository > last)
    rows = list(session.scalars(query)) if limit else []
    return Page(rows[:limit], len(rows) > limit)


def _limit(n: int | None) -> int:
    if n is None:
        return MAX_PAGE
    if not 0 <= n <= MAX_PAGE:
        raise InvalidInputError(f"n must be between 0 and {MAX_PAGE}", field="n", value=n)
    return n


# --- what referrers are of ----------------------------------------------------------------------------


def released_raw(session: Session, model: Model, *, manifest_digest: str | None = None,
                 version_ids: Any = None) -> Iterator[Pulled]:
    """The stored raw shapes of ``model``'s released versions (the referrers' subjects), newest first; only
    the one of ``manifest_digest`` when given, only those of ``version_ids`` (ids or a select of them) when
    given. The caller checked the pull (:func:`require_pull`)."""
    return released_shapes(session, model, manifest_digest=manifest_digest, version_ids=version_ids,
                           shapes=(modelpack.RAW,))


def released_shapes(session: Session, model: Model, *, manifest_digest: str | None = None, version_ids: Any = None,
                    shapes: tuple[str, ...] = (modelpack.RAW, modelpack.IMAGE)) -> Iterator[Pulled]:
    """:func:`released_raw` for every stored shape in ``shapes`` (the raw one first within a version): the
    image-shaped manifest has its own referrers (its signature and ML-BOM)."""
    query = (select(OciArtifact, Version.number).join(Version, OciArtifact.version_id == Version.id)
             .where(OciArtifact.model_id == model.id, OciArtifact.shape.in_(shapes),
                    Version.id.in_(_released_ids(model)))
             .order_by(Version.number.desc(), (OciArtifact.shape == modelpack.IMAGE).asc()))
    if manifest_digest is not None:
        query = query.where(OciArtifact.manifest_digest == manifest_digest)
    if version_ids is not None:
        query = query.where(Version.id.in_(version_ids))
    repository = f"{model.tenant.name}/{model.name}"
    for row, number in session.execute(query).all():
        yield _as_pulled(repository, row, number)
