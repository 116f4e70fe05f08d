"""OCI artifact builds: a released version's ModelPack artifacts, built once and stored (``oci_artifacts``).

When a version is approved, :func:`on_approved` (registered by ``registry/bootstrap.py`` as a reaction to
approval, ``Ports.on_approved``) stores the raw shape at once where that needs no reads (its layer digests are
the files' sha256) and queues the ``build_oci_artifacts`` job in the approving transaction; the job
(:func:`build_artifacts`) builds the rest, the image shape among it, reading every file once to digest its
tar layers. Serving (``registry/services/oci_serving.py``) returns the stored bytes. Every recorded time comes
from the clock it is handed (the ports'), never the machine's.

An adapter's manifests name its bound base (:func:`adapter_annotations`): each shape carries the digest of the
base's manifest of the same shape, so the base's shape is stored first (the build job builds the base's
artifacts before the adapter's; a base not approved yet leaves the job to be retried).

Usage (a sketch, not run as a doctest)::

    on_approved(session, version, container.ports)   # in the approving transaction
    build_artifacts(container.session_factory, version.id, blob_store=store, clock=container.clock)
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.clock import Clock
from registry.db.models import Job, OciArtifact, OciTarLayer, Version, VersionFacts, VersionFile
from registry.db.session import begin_write
from registry.domain import modelpack, serving
from registry.domain.errors import OciManifestTooLargeError, ServiceUnavailableError
from registry.domain.modelpack import Artifact, PackFile, PackInput
from registry.jobs import JobKind, enqueue_job
from registry.services.loaders import release_facts, version_ref
from registry.services.ports import Ports
from registry.storage.base import BlobStore

HF_SOURCE_KIND = "hf"
"""A version mirrored from a Hugging Face hub (its source address goes into the artifact's annotations)."""


def on_approved(session: Session, version: Version, ports: Ports) -> None:
    """A version became approved (a ``Ports.on_approved`` handler, called by ``registry.services.lifecycle``):
    store its raw shape now where that needs no reads, and queue the build of the rest, in the approving
    transaction, both by the ports' clock."""
    store_raw_if_cheap(session, version, clock=ports.clock)
    enqueue_build(session, version, clock=ports.clock)


def store_raw_if_cheap(session: Session, version: Version, *, clock: Clock) -> OciArtifact | None:
    """Store the raw shape where it needs no reads; None where it needs them, or is over 4 MiB (the job
    then fails saying so, and the tag answers with that reason: approval itself never fails for it)."""
    annotations = adapter_annotations(session, version, modelpack.RAW, clock=clock)
    if annotations is None:
        return None
    pack = pack_input(session, version, annotations)
    if modelpack.raw_needs_reads(pack):
        return None
    try:
        artifact = _build(version, pack, modelpack.RAW, None)
    except OciManifestTooLargeError:
        return None
    return _store(session, version, modelpack.RAW, artifact, clock=clock)


def enqueue_build(session: Session, version: Version, *, clock: Clock) -> Job:
    """Queue the job that builds and stores ``version``'s artifacts (:func:`build_artifacts`), at most once,
    in the caller's transaction (approval's, or a pull's that found them missing)."""
    # Due at once: the seal's time is by the pipeline's clock, so no clock a worker claims by is before it.
    return enqueue_job(session, JobKind.BUILD_OCI_ARTIFACTS, {"version_id": version.id}, version.id,
                       tenant=version.model.tenant.name, run_after=version.sealed_at or clock.now())


def pack_input(session: Session, version: Version,
               annotations: tuple[tuple[str, str], ...] = ()) -> PackInput:
    """What the artifacts of ``version`` are built from: its files, seal, source and recorded facts, and the
    manifest's further ``annotations`` (:func:`adapter_annotations`)."""
    facts = session.get(VersionFacts, version.id)
    files = session.execute(select(VersionFile.path, VersionFile.size, VersionFile.sha256)
                            .where(VersionFile.version_id == version.id, VersionFile.sha256.is_not(None)))
    return PackInput(
        repository=f"{version.model.tenant.name}/{version.model.name}", version=version.number,
        revision=version.resolved_revision, license=version.license, source_url=_source_url(version),
        created_at=version.sealed_at, files=tuple(PackFile(*f) for f in files),
        facts=facts.facts if facts is not None else None, annotations=annotations)


def adapter_annotations(session: Session, version: Version, shape: str, *,
                        clock: Clock) -> tuple[tuple[str, str], ...] | None:
    """The annotations naming an adapter's bound base on its ``shape`` manifest: the base's stored manifest of
    that shape (``tenant/model@sha256:...``) and the bound weights digest; ``()`` for a version that is no
    adapter. None while the base's manifest of that shape is not stored: a raw one that needs no reads is
    stored now when the base is served, anything else is the build job's (:func:`build_artifacts`)."""
    binding = version.adapter_binding
    if binding is None:
        return ()
    base = binding.base
    row = stored(session, base.id, shape)
    if row is None and shape == modelpack.RAW and serving.unreleased(release_facts(base)) is None:
        row = store_raw_if_cheap(session, base, clock=clock)
    if row is None:
        return None
    return ((modelpack.ANNOTATION_ADAPTER_BASE, f"{base.model.tenant.name}/{base.model.name}@{row.manifest_digest}"),
            (modelpack.ANNOTATION_ADAPTER_BASE_WEIGHTS, f"sha256:{binding.weights_digest}"))


def _source_url(version: Version) -> str | None:
    if version.source_kind == HF_SOURCE_KIND:
        return f"{(version.source_endpoint or 'https://huggingface.co').rstrip('/')}/{version.source_repo}"
    if version.source_kind == "s3":
        return f"s3://{version.source_repo}"
    # A directory on the registry's machine, or an upload: no address anyone else could use.
    return None


# --- building and storing (the build job) ---------------------------------------------------------


def build_artifacts(session_factory: sessionmaker[Session], version_id: int, *, blob_store: BlobStore,
                    clock: Clock) -> None:
    """Build and store both shapes of a released version not stored yet (the ``build_oci_artifacts`` job).

    Idempotent: a shape already stored is kept as it is (its digest was served), so a second run, or one
    after a crash (each run stores in one transaction), changes nothing. The files are read once each,
    streamed from the store, outside any transaction. A version no longer released is left alone.

    An adapter's base has its artifacts built first (this same function): the adapter's manifests name them.

    Raises:
        OciManifestTooLargeError: a manifest over 4 MiB even with the small files packed (not retried).
        BlobNotFoundError: a file's bytes are gone from the store.
        ServiceUnavailableError: an adapter whose base's manifests are not stored (the base is not approved yet):
            retried, and revived by a pull once the job is dead.
    """
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None or serving.unreleased(release_facts(version)) is not None:
            return
        base_id = version.adapter_binding.base_version_id if version.adapter_binding is not None else None
    if base_id is not None:
        build_artifacts(session_factory, base_id, blob_store=blob_store, clock=clock)
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None or serving.unreleased(release_facts(version)) is not None:
            return
        missing = [shape for shape in (modelpack.RAW, modelpack.IMAGE) if stored(session, version_id, shape) is None]
        packs = {}
        for shape in missing:
            annotations = adapter_annotations(session, version, shape, clock=clock)
            if annotations is None:
                raise ServiceUnavailableError(f"{version_ref(version)}'s {shape} manifest names its base's, which "
                                              "is not built: the base is not approved (yet)", version_id=version_id)
            packs[shape] = pack_input(session, version, annotations)
        session.commit()
        ref = f"{version.model.tenant.name}/{version.model.name}:{version.number}"
    if not missing:
        return

    def read(f: PackFile) -> Iterator[bytes]:
        return blob_store.open_range(f.sha256, 0, f.size)

    built = {shape: _build(version, packs[shape], shape, read, ref=ref) for shape in missing}
    with session_factory() as session:
        begin_write(session)
        version = session.get(Version, version_id)
        if version is None or serving.unreleased(release_facts(version)) is not None:
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


def _store(session: Session, version: Version, shape: str, artifact: Artifact, *, clock: Clock) -> OciArtifact:
    """Insert one shape's row and its tar layers, unless one is stored already (then that one is kept)."""
    existing = stored(session, version.id, shape)
    if existing is not None:
        return existing
    row = OciArtifact(version_id=version.id, model_id=version.model_id, shape=shape, media_type=artifact.media_type,
                      manifest_digest=artifact.manifest_digest, manifest=artifact.manifest_bytes,
                      config_digest=artifact.config_digest, config=artifact.config_bytes,
                      created_at=clock.now())
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


def stored(session: Session, version_id: int, shape: str) -> OciArtifact | None:
    """The stored ``shape`` of a version, if it is stored."""
    return session.scalar(select(OciArtifact).where(OciArtifact.version_id == version_id,
                                                    OciArtifact.shape == shape))
