"""The OCI view of released versions: what the read-only ``/v2`` endpoint serves, decided here.

A repository is a model (``tenant/name``); each approved, unrevoked, not deleted version is a CNCF ModelPack
artifact (``registry/domain/modelpack.py``) whose tags are its number and the aliases that give it to the
caller, and an image-shaped artifact under the same tags with ``-image``. Both are built once, when the
version is approved, and stored (``oci_artifacts``): the raw shape at once (its layer digests are the
files' sha256), the image shape by the ``build_oci_artifacts`` job, which reads every file once to digest
its tar layers. Serving returns the stored bytes. Its layers are the version's files, served from the blob
store as stored, or tar layers generated around them (:func:`tar_range`). Readers and serving nodes
of the tenant (``read`` or ``fetch``) may pull, as through ``/hf``. Anything else is the same answer
whether it exists or not: no tag, manifest or blob answers for a repository the caller may not read, and a
blob answers only in a repository one of whose released versions references it.

Callers come in two kinds (:class:`OciCaller`): a modelreg token presented directly (any repository its
principal may read), and a pull token from :func:`issue_pull_token`, which also names the repositories it
was issued for. A pull token is a JWT (HS256) under a key derived from the registry's console key, short
lived (``settings.oci_token_seconds``), carrying the principal's id and the id of the modelreg token it was
exchanged for; each use checks that token again (revoked, expired, disabled principal) and the principal's
current roles, so the pull token never outlives the rights it was issued under.

Usage (a sketch, not run as a doctest)::

    caller = OciCaller(principal, repositories=None)
    pulled = manifest(session, caller, "acme", "llm", "prod")
    pulled.artifact.manifest_digest
    # -> 'sha256:...'
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
from sqlalchemy import literal, select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.auth import AuthenticatedPrincipal, Permission, Role, authenticate_token_id, token_expiry
from registry.clock import Clock
from registry.db.models import (
    Alias,
    Job,
    Model,
    OciArtifact,
    OciTarLayer,
    Principal,
    Tenant,
    Version,
    VersionFacts,
    VersionFile,
    utcnow,
)
from registry.domain import modelpack
from registry.domain.errors import (
    AuthenticationError,
    InvalidInputError,
    OciBlobUnknownError,
    OciManifestTooLargeError,
    OciManifestUnknownError,
    PermissionDeniedError,
    PullScopeDeniedError,
    PullTokenRejectedError,
    ReleaseNotFoundError,
    SizeMismatchError,
)
from registry.domain.modelpack import Artifact, PackFile, PackInput, TarLayer
from registry.db.session import begin_write, is_postgres
from registry.jobs import DEAD, JobKind, enqueue_job
from registry.storage.base import BlobStore
from registry.domain.states import VersionState
from registry.services import hf, loaders
from registry.workload_identity import bound_node_principal

MAX_PAGE = 1000
"""The most tags or repositories one listing answers (``n`` above it is refused)."""
DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
TAG_RE = re.compile(r"\A[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}\Z")
SCOPE_RE = re.compile(r"\Arepository:([a-z0-9._-]+/[a-z0-9._-]+):([a-z*,]+)\Z")
CATALOG_SCOPE = "registry:catalog:*"
MAX_SCOPES = 32
TOKEN_KID = "modelreg-oci-pull"
TOKEN_ISSUER = "modelreg"
HF_SOURCE_KIND = "hf"
REFERRER_SHAPE = "referrer"
"""The shape a referrer's manifest is served as (never stored: built from the documents as they are now)."""
IMAGE_SUFFIX = "-image"
"""A tag ending so names the image shape of what the rest names (``3-image``, ``prod-image``): ADR 0012."""
ANONYMOUS = "(anonymous)"
"""Who a caller without credentials is, where a tenant lets one pull (no principal's name can be this)."""
ANONYMOUS_ID = 0
"""The principal id of an anonymous pull token (no principal row has it: ids start at 1)."""


@dataclass(frozen=True, slots=True)
class OciCaller:
    """Who pulls, and which repositories their credential covers (None: any their principal may read)."""

    principal: AuthenticatedPrincipal
    repositories: frozenset[str] | None = None
    catalog: bool = True
    """Whether the credential may list the catalog (a pull token only with the ``registry:catalog:*`` scope)."""


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


@dataclass(frozen=True, slots=True)
class PullToken:
    token: str
    issued_at: dt.datetime
    expires_in: int
    repositories: tuple[str, ...]
    """The repositories granted: those of the scope the caller may read."""


# --- who -------------------------------------------------------------------------------------------


def require_pull(caller: OciCaller, tenant: str, name: str) -> None:
    """Raise unless ``caller`` may pull ``tenant/name`` (checked before anything is looked up).

    Raises:
        PullScopeDeniedError: a pull token whose scope does not name the repository.
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
    """
    if caller.repositories is not None and f"{tenant}/{name}" not in caller.repositories:
        raise PullScopeDeniedError(f"{tenant}/{name}")
    if not {Permission.READ, Permission.FETCH} & caller.principal.permissions(tenant):
        raise PermissionDeniedError(f"{caller.principal.name!r} may neither read nor fetch in tenant {tenant!r}",
                                    principal=caller.principal.name, tenant=tenant, permission="fetch")


def issue_pull_token(principal: AuthenticatedPrincipal, token_id: int | None, scopes: list[str], *, service: str,
                     key: bytes, clock: Clock, ttl_seconds: int) -> PullToken:
    """A pull token for the repositories of ``scopes`` that ``principal`` may read (or fetch); others are
    left out, as the Docker token protocol does, so a refused repository answers ``DENIED`` on use.

    Args:
        token_id: The modelreg token the caller presented (checked again on every use); None for a
            service-account token, whose principal is checked again instead.
        scopes: ``repository:<tenant>/<name>:pull`` (actions comma-separated: only ``pull`` is granted)
            or ``registry:catalog:*``.

    Raises:
        InvalidInputError: a malformed scope, or too many.
    """
    # A client may send several scope parameters, or several scopes in one, separated by spaces.
    parts = [part for scope in scopes for part in scope.split(" ")[:MAX_SCOPES + 1]]
    if len(parts) > MAX_SCOPES:
        raise InvalidInputError(f"at most {MAX_SCOPES} scopes a token", field="scope")
    granted: set[str] = set()
    catalog = False
    for part in parts:
        if part == CATALOG_SCOPE:
            catalog = True
            continue
        m = SCOPE_RE.match(part)
        if m is None:
            raise InvalidInputError(f"scope {part[:200]!r} is not repository:<tenant>/<name>:pull", field="scope")
        tenant = m[1].split("/")[0]
        if "pull" in m[2].split(",") and {Permission.READ, Permission.FETCH} & principal.permissions(tenant):
            granted.add(m[1])
    now = clock.now()
    claims = {"iss": TOKEN_ISSUER, "aud": service, "sub": principal.name, "pid": principal.id, "tid": token_id,
              "access": [{"type": "repository", "name": r, "actions": ["pull"]} for r in sorted(granted)],
              "catalog": catalog, "iat": int(now.timestamp()), "exp": int(now.timestamp()) + ttl_seconds,
              "jti": secrets.token_hex(8)}
    token = jwt.encode(claims, key, algorithm="HS256", headers={"kid": TOKEN_KID})
    return PullToken(token, now, ttl_seconds, tuple(sorted(granted)))


REFRESH_KID = "modelreg-oci-refresh"
REFRESH_SECONDS = 86400
"""The most a refresh token lives (less when the credential it was issued for expires sooner)."""


def issue_refresh_token(principal: AuthenticatedPrincipal, token_id: int | None, *, service: str, key: bytes,
                        clock: Clock, not_after: dt.datetime | None) -> str:
    """A refresh token (the token protocol's ``offline_token``/``access_type=offline``): the OAuth2 form's
    ``grant_type=refresh_token`` exchanges it for pull tokens until ``not_after`` (the credential's own
    expiry) or :data:`REFRESH_SECONDS`, whichever comes first. It names what a pull token names, no
    repositories: each exchange checks the credential behind it again, as each pull token use does."""
    now = clock.now()
    exp = int(now.timestamp()) + REFRESH_SECONDS
    if not_after is not None:
        at = not_after if not_after.tzinfo is not None else not_after.replace(tzinfo=dt.timezone.utc)
        exp = min(exp, int(at.timestamp()))
    claims = {"iss": TOKEN_ISSUER, "aud": service, "sub": principal.name, "pid": principal.id, "tid": token_id,
              "typ": "refresh", "iat": int(now.timestamp()), "exp": exp, "jti": secrets.token_hex(8)}
    return jwt.encode(claims, key, algorithm="HS256", headers={"kid": REFRESH_KID})


def principal_of_refresh_token(session: Session, token: str, *, key: bytes,
                               clock: Clock) -> tuple[AuthenticatedPrincipal, int | None]:
    """The principal a refresh token stands for now, and the modelreg token it was issued for (None: a
    service-account token's).

    Raises:
        PullTokenRejectedError: not a refresh token of this registry, or expired; or the credential behind
            it is no longer valid.
    """
    try:
        if jwt.get_unverified_header(token).get("kid") != REFRESH_KID:
            raise PullTokenRejectedError("refresh token refused: not a refresh token of this registry")
        claims = jwt.decode(token, key, algorithms=["HS256"], issuer=TOKEN_ISSUER,
                            options={"verify_exp": False, "verify_aud": False, "verify_iat": False,
                                     "require": ["exp", "pid", "typ"]})
    except jwt.PyJWTError as e:
        raise PullTokenRejectedError(f"refresh token refused: {e}") from None
    if claims["typ"] != "refresh" or not isinstance(claims.get("pid"), int) or claims["pid"] == ANONYMOUS_ID:
        raise PullTokenRejectedError("refresh token refused: malformed")
    if not isinstance(claims["exp"], int) or claims["exp"] <= clock.now().timestamp():
        raise PullTokenRejectedError("refresh token expired: log in again")
    principal = _principal_behind(session, claims)
    session.rollback()
    return principal, claims["tid"] if isinstance(claims.get("tid"), int) else None


def credential_expiry(session: Session, secret: str, token_id: int | None) -> dt.datetime | None:
    """When the credential ``secret`` (authenticated already) expires: a modelreg token's expiry, or a
    service-account token's ``exp``; None for a token that never expires."""
    if token_id is not None:
        return token_expiry(session, token_id)
    try:
        exp = jwt.decode(secret, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    return dt.datetime.fromtimestamp(exp, dt.timezone.utc) if isinstance(exp, int) else None


def is_pull_token(token: str) -> bool:
    """Whether a bearer token is one of this registry's pull tokens (else: a modelreg or workload token)."""
    try:
        return jwt.get_unverified_header(token).get("kid") == TOKEN_KID
    except jwt.PyJWTError:
        return False


def caller_of_pull_token(session: Session, token: str, *, key: bytes, clock: Clock) -> OciCaller:
    """The caller a pull token stands for, with its principal's current roles.

    Raises:
        PullTokenRejectedError: not signed by this registry, malformed or expired; or the modelreg token it
            was issued for is revoked or expired, or its principal disabled.
    """
    try:
        claims = jwt.decode(token, key, algorithms=["HS256"], issuer=TOKEN_ISSUER,
                            options={"verify_exp": False, "verify_aud": False, "verify_iat": False,
                                     "require": ["exp", "pid", "access"]})
    except jwt.PyJWTError as e:
        raise PullTokenRejectedError(f"pull token refused: {e}") from None
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= clock.now().timestamp():
        raise PullTokenRejectedError("pull token expired: ask /v2/token for a new one")
    access = claims["access"]
    if not isinstance(access, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in access):
        raise PullTokenRejectedError("pull token refused: malformed access")
    if claims["pid"] == ANONYMOUS_ID and claims.get("sub") == ANONYMOUS:
        return _anonymous_caller_of(session, [a["name"] for a in access])
    principal = _principal_behind(session, claims)
    session.rollback()
    return OciCaller(principal, frozenset(a["name"] for a in access), catalog=claims.get("catalog") is True)


def _principal_behind(session: Session, claims: dict[str, Any]) -> AuthenticatedPrincipal:
    """The principal a pull token was issued to, as it stands now."""
    if isinstance(claims.get("tid"), int):
        try:
            principal = authenticate_token_id(session, claims["tid"])
        except AuthenticationError as e:
            # The modelreg token it was exchanged for is revoked or expired, or its principal disabled.
            raise PullTokenRejectedError(f"pull token refused: {e.message}") from None
    else:
        # Exchanged for a service-account token: the node principal it maps to is checked again, with its
        # roles from the node bindings as they are now (a node principal holds no role bindings).
        row = session.get(Principal, claims["pid"]) if isinstance(claims["pid"], int) else None
        principal = bound_node_principal(session, row) if row is not None else None
        if principal is None:
            raise PullTokenRejectedError("pull token refused: its principal is disabled, gone or bound to no "
                                         "tenant")
    if principal.id != claims["pid"]:
        raise PullTokenRejectedError("pull token refused: principal mismatch")
    return principal


# --- manifests -------------------------------------------------------------------------------------


def manifest(session: Session, caller: OciCaller, tenant: str, name: str, reference: str) -> Pulled:
    """The artifact ``reference`` names in ``tenant/name``: a version number or an alias (as it resolves for
    the caller, canary included), either with ``-image`` for the image shape, or the ``sha256:`` digest of a
    stored manifest (one indexed query). Referrers: ``registry/services/oci_referrers.py``.

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
    reason = _unreleased_reason(version)
    if reason is not None:
        raise OciManifestUnknownError(repository, reference, reason)
    return _pulled(session, model, version, shape, reference)


def record_pull(session: Session, caller: OciCaller, pulled: Pulled, *, clock: Clock) -> None:
    """Count one manifest pull by the caller (provenance: ``modelreg provenance nodes``), and commit."""
    if pulled.referrer:
        return
    hf.count_download(session, caller.principal, pulled.version_id, channel="oci", clock=clock)


def _unreleased_reason(version: Version) -> str | None:
    if version.state == VersionState.REVOKED.value:
        return f"version {version.number} is revoked"
    if version.deleted_at is not None:
        return f"version {version.number} is deleted"
    if version.state != VersionState.APPROVED.value or version.manifest_digest is None:
        return f"version {version.number} is {version.state}, not approved"
    return None


def _released_query(model: Model):
    return select(Version).where(Version.model_id == model.id, Version.state == VersionState.APPROVED.value,
                                 Version.deleted_at.is_(None), Version.manifest_digest.is_not(None))


def _released_ids(model: Model):
    return _released_query(model).with_only_columns(Version.id)


def _pulled(session: Session, model: Model, version: Version, shape: str, reference: str) -> Pulled:
    """The stored ``shape`` of a released version. A raw shape that needs no reads and is not stored yet
    (a version approved before artifacts were stored) is built and stored now; anything else missing is
    left to the build job (enqueued again here, idempotently) and answers unknown with the job's state."""
    repository = f"{model.tenant.name}/{model.name}"
    row = _stored(session, version.id, shape)
    if row is None and shape == modelpack.RAW:
        row = _store_raw_if_cheap(session, version)
        session.commit()
    if row is None:
        raise OciManifestUnknownError(repository, reference, _pending_reason(session, version, shape))
    return _as_pulled(repository, row, version.number)


def _as_pulled(repository: str, row: OciArtifact, number: int) -> Pulled:
    return Pulled(repository, row.version_id, number,
                  StoredArtifact(row.shape, row.media_type, row.manifest, row.manifest_digest, row.config_digest))


def _stored(session: Session, version_id: int, shape: str) -> OciArtifact | None:
    return session.scalar(select(OciArtifact).where(OciArtifact.version_id == version_id,
                                                    OciArtifact.shape == shape))


def _pending_reason(session: Session, version: Version, shape: str) -> str:
    """Why a released version's shape is not served yet: its build job's state (a dead job's error)."""
    job = enqueue_build(session, version)
    state, error = job.state, job.last_error
    session.commit()
    what = "the image-shaped manifest" if shape == modelpack.IMAGE else "the manifest (many files: packed)"
    if state == DEAD:
        return f"{what} of version {version.number} could not be built: {(error or '').strip()[-300:]}"
    return f"{what} of version {version.number} is still being built (a worker job); try again shortly"


def enqueue_build(session: Session, version: Version) -> Job:
    """Queue the job that builds and stores ``version``'s artifacts (:func:`build_artifacts`), at most once,
    in the caller's transaction (approval's, or a pull's that found them missing)."""
    # Due at once: the seal's time is by the pipeline's clock, so no clock a worker claims by is before it.
    return enqueue_job(session, JobKind.BUILD_OCI_ARTIFACTS, {"version_id": version.id}, version.id,
                       tenant=version.model.tenant.name, run_after=version.sealed_at or utcnow())


def pack_input(session: Session, version: Version) -> PackInput:
    """What the artifacts of ``version`` are built from: its files, seal, source and recorded facts."""
    facts = session.get(VersionFacts, version.id)
    files = session.execute(select(VersionFile.path, VersionFile.size, VersionFile.sha256)
                            .where(VersionFile.version_id == version.id, VersionFile.sha256.is_not(None)))
    return PackInput(
        repository=f"{version.model.tenant.name}/{version.model.name}", version=version.number,
        revision=version.resolved_revision, license=version.license, source_url=_source_url(version),
        created_at=version.sealed_at, files=tuple(PackFile(*f) for f in files),
        facts=facts.facts if facts is not None else None)


def _source_url(version: Version) -> str | None:
    if version.source_kind == HF_SOURCE_KIND:
        return f"{(version.source_endpoint or 'https://huggingface.co').rstrip('/')}/{version.source_repo}"
    if version.source_kind == "s3":
        return f"s3://{version.source_repo}"
    # A directory on the registry's machine, or an upload: no address anyone else could use.
    return None


# --- building and storing (the build job) ----------------------------------------------------------


def build_artifacts(session_factory: sessionmaker[Session], version_id: int, *, blob_store: BlobStore,
                    clock: Clock) -> None:
    """Build and store both shapes of a released version not stored yet (the ``build_oci_artifacts`` job).

    Idempotent: a shape already stored is kept as it is (its digest was served), so a second run, or one
    after a crash (each run stores in one transaction), changes nothing. The files are read once each,
    streamed from the store, outside any transaction. A version no longer released is left alone.

    Raises:
        OciManifestTooLargeError: a manifest over 4 MiB even with the small files packed (not retried).
        BlobNotFoundError: a file's bytes are gone from the store.
    """
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None or _unreleased_reason(version) is not None:
            return
        missing = [shape for shape in (modelpack.RAW, modelpack.IMAGE) if _stored(session, version_id, shape) is None]
        pack = pack_input(session, version)
        ref = f"{pack.repository}:{version.number}"
    if not missing:
        return

    def read(f: PackFile) -> Iterator[bytes]:
        return blob_store.open_range(f.sha256, 0, f.size)

    built = {shape: _build(version, pack, shape, read, ref=ref) for shape in missing}
    with session_factory() as session:
        begin_write(session)
        version = session.get(Version, version_id)
        if version is None or _unreleased_reason(version) is not None:
            return
        for shape, artifact in built.items():
            _store(session, version, shape, artifact, clock=clock)
        session.commit()


def _build(version: Version, pack: PackInput, shape: str, read: modelpack.Read | None, *, ref: str = "") -> Artifact:
    try:
        if shape == modelpack.IMAGE:
            assert read is not None
            return modelpack.build_image(pack, read)
        return modelpack.build(pack, read)
    except modelpack.ManifestTooLargeError as e:
        raise OciManifestTooLargeError(ref or f"{pack.repository}:{pack.version}", e.size,
                                       modelpack.MAX_MANIFEST) from None


def _store(session: Session, version: Version, shape: str, artifact: Artifact, *, clock: Clock | None) -> OciArtifact:
    """Insert one shape's row and its tar layers, unless one is stored already (then that one is kept)."""
    existing = _stored(session, version.id, shape)
    if existing is not None:
        return existing
    row = OciArtifact(version_id=version.id, model_id=version.model_id, shape=shape, media_type=artifact.media_type,
                      manifest_digest=artifact.manifest_digest, manifest=artifact.manifest_bytes,
                      config_digest=artifact.config_digest, config=artifact.config_bytes,
                      created_at=clock.now() if clock is not None else utcnow())
    try:
        # Two pulls (or a pull and the job) may store the same shape at once: the loser keeps the winner's.
        with session.begin_nested():
            session.add(row)
            session.flush()
            session.add_all(OciTarLayer(artifact_id=row.id, model_id=version.model_id, root=t.root, digest=t.digest,
                                        size=t.size, paths=[f.path for f in t.members])
                            for t in artifact.tar_layers)
    except SAIntegrityError:
        return session.scalars(select(OciArtifact).where(OciArtifact.version_id == version.id,
                                                         OciArtifact.shape == shape)).one()
    return row


def on_approved(session: Session, version: Version) -> None:
    """A version became approved (``registry.services.lifecycle``): store its raw shape now where that
    needs no reads, and queue the build of the rest, in the approving transaction."""
    _store_raw_if_cheap(session, version)
    enqueue_build(session, version)


def _store_raw_if_cheap(session: Session, version: Version) -> OciArtifact | None:
    """Store the raw shape where it needs no reads; None where it needs them, or is over 4 MiB (the job
    then fails saying so, and the tag answers with that reason: approval itself never fails for it)."""
    pack = pack_input(session, version)
    if modelpack.raw_needs_reads(pack):
        return None
    try:
        artifact = _build(version, pack, modelpack.RAW, None)
    except OciManifestTooLargeError:
        return None
    return _store(session, version, modelpack.RAW, artifact, clock=None)


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
        if _unreleased_reason(version) is None and TAG_RE.match(alias):
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
        readable = [t for t in principal.roles if {Permission.READ, Permission.FETCH} & principal.permissions(t)]
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
    query = (select(OciArtifact, Version.number).join(Version, OciArtifact.version_id == Version.id)
             .where(OciArtifact.model_id == model.id, OciArtifact.shape == modelpack.RAW,
                    Version.id.in_(_released_ids(model))).order_by(Version.number.desc()))
    if manifest_digest is not None:
        query = query.where(OciArtifact.manifest_digest == manifest_digest)
    if version_ids is not None:
        query = query.where(Version.id.in_(version_ids))
    repository = f"{model.tenant.name}/{model.name}"
    for row, number in session.execute(query).all():
        yield _as_pulled(repository, row, number)


# --- anonymous pull --------------------------------------------------------------------------------


def anonymous_caller(session: Session, tenant: str | None) -> OciCaller:
    """A caller without credentials on a request naming ``tenant``: a serving node of that tenant alone,
    where an administrator turned anonymous pull on for it (``tenants.oci_anonymous_pull``); never the
    catalog, and nothing of any other tenant.

    Raises:
        AuthenticationError: the request names no repository, or its tenant (if it exists) keeps pulls to
            callers with credentials: the answer that sends a client to ``/v2/token``.
    """
    opened = _anonymous_tenants(session, [tenant] if tenant is not None else [])
    session.rollback()
    if not opened:
        raise AuthenticationError("authentication required: get a pull token from /v2/token")
    return OciCaller(_anonymous_principal(opened), catalog=False)


def issue_anonymous_pull_token(session: Session, scopes: list[str], *, service: str, key: bytes, clock: Clock,
                               ttl_seconds: int) -> PullToken | None:
    """A pull token without credentials, for the repositories of ``scopes`` whose tenant lets anyone pull;
    None when none of them does (the caller answers 401). Each use checks the tenants again.

    Raises:
        InvalidInputError: a malformed scope, or too many.
    """
    parts = [part for scope in scopes for part in scope.split(" ")[:MAX_SCOPES + 1]][:MAX_SCOPES + 1]
    named = [m[1].split("/")[0] for m in map(SCOPE_RE.match, parts) if m is not None]
    opened = _anonymous_tenants(session, named)
    session.rollback()
    if not opened:
        return None
    return issue_pull_token(_anonymous_principal(opened), None, scopes, service=service, key=key, clock=clock,
                            ttl_seconds=ttl_seconds)


def _anonymous_caller_of(session: Session, repositories: list[str]) -> OciCaller:
    """The caller an anonymous pull token stands for now: its repositories whose tenant is still open."""
    opened = _anonymous_tenants(session, [r.split("/")[0] for r in repositories])
    session.rollback()
    granted = frozenset(r for r in repositories if r.split("/")[0] in opened)
    return OciCaller(_anonymous_principal(opened), granted, catalog=False)


def _anonymous_tenants(session: Session, tenants: list[str]) -> frozenset[str]:
    """Those of ``tenants`` whose administrator turned anonymous pull on."""
    names = sorted(set(tenants))[:MAX_SCOPES]
    if not names:
        return frozenset()
    return frozenset(session.scalars(select(Tenant.name).where(Tenant.name.in_(names),
                                                               Tenant.oci_anonymous_pull.is_(True))))


def _anonymous_principal(tenants: frozenset[str]) -> AuthenticatedPrincipal:
    # A node (fetch) in each open tenant and no other: every check of a pull then holds as for a node.
    return AuthenticatedPrincipal(ANONYMOUS_ID, ANONYMOUS, False, {t: frozenset({(Role.NODE, "")}) for t in tenants})
