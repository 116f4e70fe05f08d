"""The fetch client: a verified release of a model into DEST, through the node cache (or without one).

Two layers. :func:`fetch_release` is the core: given the signed release envelope, its transport URLs and
the version's model-signing bundle (whatever carried them), it verifies, downloads what the cache lacks
and assembles DEST, then commits the trust state. :func:`fetch` is the HTTP layer over it: it asks the
registry's manifest endpoint for the release and walks the trust root forward. :func:`warm` long-polls
the manifest to keep a node cache ahead of alias moves.

Order of checks, each before any byte is written anywhere but the cache's partial files:
signature by the trust root (walked from the pinned file), expiry, serial not lower than the last
accepted for the model and ref, model and ref as asked, clean and unreserved paths, the bundle is the
one the release names; when the trust root names a verifiable log, the release's events proven in a
checkpoint signed and cosigned as required that extends the one this node kept (:mod:`log_proofs`); DEST
outside the cache; then each file's size and sha256 as it is downloaded, or
as it is copied out of the cache into DEST (a cached blob that fails is removed and downloaded again);
then DEST appears. A DEST that already holds the release is re-hashed, not trusted on its file sizes.
The root walked, the serial and the log checkpoint are persisted only after DEST holds the release.

Without a node cache (``modelreg fetch`` with no ``--cache``: KServe's storage initializer, whose only
writable paths are DEST and /tmp) the same path runs with no cache: each blob is downloaded straight
into its file in DEST's staging directory (written from the buffers the hash takes, as with a cache),
so nothing is written outside DEST; nothing is kept for the next fetch (no cached blob, no walked root,
no serial).

Example:
    >>> ref_selector(parse_ref("modelreg://acme/tiny@prod")), ref_selector(parse_ref("acme/tiny@3"))
    ('prod', '3')
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from registry.client.api import ManifestResponse, RegistryApi
from registry.client.assemble import (
    assemble,
    check_bundle_matches,
    check_reserved,
    destination_is_release,
    verify_destination,
)
from registry.client.cache import NodeCache, copy_verified
from registry.client.download import DEFAULT_PART_SIZE, MAX_PART_SIZE, SPARE_BUFFERS, Buffers, download_blob
from registry.client.errors import BadManifestError, DestinationInCacheError
from registry.client.log_proofs import WitnessPolicy, verify_release_log
from registry.client.progress import Reporter
from registry.client.trust import NodeTrust, pinned_root
from registry.domain.errors import InvalidInputError, InvalidRefError, LogProofError, RevokedError
from registry.domain.refs import ModelRef, parse_ref
from registry.signing.release import Release, ReleaseFile, verify_release

DEFAULT_PARALLEL = 8


def ref_selector(ref: ModelRef) -> str:
    """The ``ref`` of the manifest request and of the release: an alias, or a version number as text."""
    if ref.alias is not None:
        return ref.alias
    if ref.version is not None:
        return str(ref.version)
    raise InvalidRefError(str(ref), "name an alias or a version: tenant/name@prod or tenant/name@3")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclasses.dataclass
class FetchResult:
    """What a fetch did, for the summary line."""

    model: str
    ref: str
    version: int
    serial: int
    dest: str | None
    noop: bool = False
    files: int = 0
    bytes: int = 0
    cached_files: int = 0
    downloaded_files: int = 0
    downloaded_bytes: int = 0
    resumed_bytes: int = 0
    rejected_cached_files: int = 0
    links: int = 0  # always 0: DEST never shares an inode with the cache (kept for readers of --json)
    copies: int = 0
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def verify_manifest(envelope: Mapping[str, Any], bundle: Mapping[str, Any], *, ref: ModelRef, trust: NodeTrust,
                    now: dt.datetime, log: Any = None,
                    consistency: Callable[[int, int], Any] | None = None) -> Release:
    """Every check a release passes before a byte is downloaded (see the module docstring); when the trust
    root names a verifiable log, ``log`` (the answer's proof) must prove the release in it
    (:func:`registry.client.log_proofs.verify_release_log`, with the registry's ``consistency`` proofs).

    Raises:
        SignatureError, ReleaseExpiredError, ReleaseRollbackError, ReleaseMismatchError, InvalidPathError,
        BadManifestError: as named.
        LogProofError, MalformedNoteError, UnverifiedNoteError...: the release is not proven in the log.
    """
    selector = ref_selector(ref)
    release = verify_release(envelope, trust.root, now=now, model=ref.model, ref=selector,
                             min_serial=trust.serial(ref.model, selector))
    check_reserved(release.files)
    check_bundle_matches(bundle, release)
    _verify_logged(release, log, trust, consistency)
    return release


def _verify_logged(release: Release, log: Any, trust: NodeTrust,
                   consistency: Callable[[int, int], Any] | None) -> None:
    if trust.root.log is None:
        if trust.witness_policy is not None:
            raise LogProofError("missing", f"this node requires witnesses, but trust root {trust.root.version} "
                                           "names no verifiable log")
        return

    def no_proofs(first: int, second: int) -> Any:
        raise LogProofError("missing", "no registry to ask for a consistency proof")

    origin = trust.root.log.origin
    keep = verify_release_log(release, log, trust.root.log, kept=trust.log_checkpoint(origin),
                              consistency=consistency or no_proofs, node=trust.witness_policy)
    trust.accept_checkpoint(origin, keep)


def ensure_cached(release: Release, transport: Mapping[str, str], *, tenant: str, cache: NodeCache | None,
                  api: RegistryApi, into: Path | None = None, parallel: int = DEFAULT_PARALLEL,
                  part_size: int = DEFAULT_PART_SIZE, reporter: Reporter | None = None,
                  result: FetchResult | None = None) -> None:
    """Each file of ``release`` in the cache (downloaded when missing) and, given ``into``, copied under it.

    Call inside ``cache.in_use()``. One blob per digest: files with the same bytes share it. Every byte
    written under ``into`` was hashed by this fetch: a cached blob's copy there is hashed (a blob that
    fails is removed and downloaded); a downloaded one is written there part by part from the buffers the
    hash takes (never read back from the partial file, which then enters the cache); a second file with
    the same bytes is copied from the first and hashed. Without ``into`` (``cache warm``), a cached blob is
    re-hashed only on the cache's ``recheck_after`` schedule. Without a cache (``cache`` None, ``into``
    required) each blob is downloaded straight into its file under ``into``.

    Raises:
        BadManifestError: a file the cache lacks has no transport URL.
        DigestMismatchError, SizeMismatchError, NetworkError: from the download.
    """
    reporter = reporter or Reporter()
    by_digest: dict[str, list[ReleaseFile]] = {}
    for f in release.files:
        by_digest.setdefault(f.sha256, []).append(f)
    counting = threading.Lock()

    def count(**increments: int) -> None:
        if result is not None:
            with counting:
                for name, n in increments.items():
                    setattr(result, name, getattr(result, name) + n)

    if cache is None and into is None:
        raise ValueError("a fetch without a cache must have a directory to fetch into")
    if not 0 < part_size <= MAX_PART_SIZE:
        raise InvalidInputError(f"part size {part_size} is not between 1 byte and {MAX_PART_SIZE >> 20} MiB")
    # The memory of every download of this fetch: one buffer per stream and a few for parts awaiting the hash.
    buffers = Buffers(max(1, parallel) + SPARE_BUFFERS, part_size)
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="part") as parts:
        def one(files: list[ReleaseFile]) -> None:
            f = files[0]
            first = into / f.path if into is not None else None
            with cache.digest_lock(tenant, f.sha256) if cache is not None else contextlib.nullcontext():
                if first is not None:
                    first.parent.mkdir(parents=True, exist_ok=True)
                if cache is None:
                    found = False
                elif first is not None:
                    outcome = cache.copy_out(tenant, f.sha256, f.size, first)
                    if outcome == "rejected":
                        count(rejected_cached_files=1)
                    found = outcome == "copied"
                else:
                    found = cache.lookup(tenant, f.sha256, f.size) is not None
                if found:
                    count(cached_files=1)
                else:
                    url = next((transport[g.path] for g in release.files
                                if g.sha256 == f.sha256 and g.path in transport), None)
                    if url is None:
                        raise BadManifestError(f"{f.path} is not cached and the manifest gives no URL for it",
                                               path=f.path)
                    reporter.expect(f.size)
                    if cache is None:
                        # DEST's own file is the download's: it holds exactly the bytes the hash took.
                        resumed = download_blob(api, url, first, digest=f.sha256, size=f.size, pool=parts,
                                                part_size=part_size, buffers=buffers,
                                                progress=reporter.advance)
                    else:
                        partial = cache.partial_path(tenant, f.sha256)
                        # DEST's file gets each part from the buffer the hash takes it from, not from the
                        # partial (which any root process on the node could change once written).
                        resumed = download_blob(api, url, partial, digest=f.sha256, size=f.size, pool=parts,
                                                part_size=part_size, buffers=buffers, progress=reporter.advance,
                                                copy_to=first)
                        cache.commit(tenant, f.sha256, f.size, partial)
                    count(downloaded_files=1, downloaded_bytes=f.size - resumed, resumed_bytes=resumed)
            if first is not None:
                first.chmod(0o444)
                for g in files[1:]:
                    (into / g.path).parent.mkdir(parents=True, exist_ok=True)
                    copy_verified(first, into / g.path, digest=g.sha256, size=g.size)
                    (into / g.path).chmod(0o444)
                count(copies=len(files))

        # Coordinators wait on their parts and on other processes' digest locks: their own pool, so
        # they never take the part streams' threads.
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(by_digest))),
                                thread_name_prefix="blob") as coordinators:
            futures = [coordinators.submit(one, files)
                       for files in sorted(by_digest.values(), key=lambda files: -files[0].size)]
            errors = []
            for future in futures:
                try:
                    future.result()
                except BaseException as exc:  # noqa: BLE001 - all awaited; the first error is raised
                    errors.append(exc)
            if errors:
                raise errors[0]


def hold_release(release: Release, *, tenant: str, name: str, cache: NodeCache) -> None:
    """Record in the cache's index that it holds ``release``'s version, before any of its blobs come in.

    Raises:
        RevokedError: the cache recorded the version as revoked (a stale manifest): none of it is cached.
    """
    if not cache.hold(tenant, name, release.version, {f.sha256: f.size for f in release.files}):
        raise RevokedError.from_wire(
            f"{tenant}/{name}@{release.version} was revoked (the node cache applied the revocation): it is not "
            "cached again", model=f"{tenant}/{name}", version=release.version)


def drop_if_revoked(release: Release, *, tenant: str, name: str, cache: NodeCache) -> None:
    """After the blobs came in: a revocation applied meanwhile removes what this warm brought back.

    Raises:
        RevokedError: the version was revoked while its blobs were cached (they are removed again).
    """
    if cache.is_revoked(tenant, name, release.version):
        cache.remove_revoked(tenant, name, release.version)
        raise RevokedError.from_wire(
            f"{tenant}/{name}@{release.version} was revoked while it was cached: removed again",
            model=f"{tenant}/{name}", version=release.version)


def check_outside_cache(dest: Path, cache: NodeCache) -> None:
    """DEST may be neither inside the node cache nor hold it: a pod's DEST must never be the cache's storage.

    Raises:
        DestinationInCacheError: DEST is the cache directory, inside it, or above it.
    """
    target, root = Path(dest).resolve(), cache.root.resolve()
    if target == root or root in target.parents or target in root.parents:
        raise DestinationInCacheError(f"DEST {dest} is inside the node cache {cache.root} (or holds it): "
                                      "choose a DEST outside --cache", dest=str(dest), cache=str(cache.root))


def fetch_release(envelope: Mapping[str, Any], transport: Mapping[str, str], bundle: Mapping[str, Any], *,
                  ref: ModelRef, dest: Path, trust: NodeTrust, cache: NodeCache | None, api: RegistryApi,
                  parallel: int = DEFAULT_PARALLEL, part_size: int = DEFAULT_PART_SIZE,
                  reporter: Reporter | None = None, now: dt.datetime | None = None, log: Any = None) -> FetchResult:
    """Verify a release, bring its files into the cache and DEST; commit the trust state only on success.

    ``trust.root`` must already be walked forward (:meth:`NodeTrust.refresh`). On any failure DEST is as it
    was and neither a root nor a serial is written. ``cache`` None: no node cache (see the module docstring).
    """
    reporter = reporter or Reporter()
    if cache is not None:
        check_outside_cache(dest, cache)
    with reporter.phase("verify"):
        release = verify_manifest(envelope, bundle, ref=ref, trust=trust, now=now or _utcnow(), log=log,
                                  consistency=api.log_consistency)
    result = FetchResult(release.model, release.ref, release.version, release.serial, str(dest),
                         files=len(release.files), bytes=release.total_size)
    if cache is not None:
        hold_release(release, tenant=ref.tenant, name=ref.name, cache=cache)
    with cache.in_use() if cache is not None else contextlib.nullcontext():
        # Before any download: a DEST holding something else is refused now, not after the bytes came.
        if destination_is_release(Path(dest), release):
            with reporter.phase("verify"):
                verify_destination(Path(dest), release, bundle, parallel=max(1, min(parallel, 8)))
            result.noop = True
        else:
            def place(staging: Path) -> None:
                with reporter.phase("download"):
                    ensure_cached(release, transport, tenant=ref.tenant, cache=cache, api=api, into=staging,
                                  parallel=parallel, part_size=part_size, reporter=reporter, result=result)

            # The download phase runs inside assemble's (into its staging directory); a phase's time
            # leaves out the phases inside it.
            with reporter.phase("assemble"):
                assemble(Path(dest), release, place, bundle, envelope)
    trust.accept(release.model, release.ref, release.serial)
    trust.commit()
    if cache is not None:
        cache.evict()
    result.timings = dict(reporter.timings)
    return result


def _walk_root(api: RegistryApi, trust: NodeTrust, response: ManifestResponse | None, now: dt.datetime) -> None:
    hint = response.trust_root_version if response is not None else None
    # The manifest says which root signed it: when ours is as new, the walk only checks our root's expiry.
    fetch = api.trust_root if hint is None or hint > trust.root.version else (lambda version: None)
    trust.refresh(fetch, now=now)


def node_trust(api: RegistryApi, trust_root_file: Path | None, trust_root_sha256: str | None,
               cache: NodeCache | None) -> NodeTrust:
    """The node's trust: the pinned root (a file, or root 1 by its sha256: :func:`pinned_root`) walked
    through the roots the cache accepted before."""
    root = pinned_root(trust_root_file, trust_root_sha256, api.trust_root_bytes)
    return NodeTrust.load(root, cache.root if cache is not None else None)


def fetch(ref_text: str, dest: Path, *, api: RegistryApi, trust_root_file: Path | None = None,
          trust_root_sha256: str | None = None, cache: NodeCache | None = None,
          parallel: int = DEFAULT_PARALLEL, part_size: int = DEFAULT_PART_SIZE,
          reporter: Reporter | None = None, witness_policy: WitnessPolicy | None = None) -> FetchResult:
    """``modelreg fetch``: the manifest from the registry, then :func:`fetch_release`; ``witness_policy``:
    the witnesses this node requires to have cosigned the release's checkpoint (beside its root's).

    Raises:
        InvalidRefError: REF names no alias or version.
        InvalidInputError, RootError: no trust root given, or one that is not the pinned one.
        RevokedError, NotApprovedError, ReleaseNotFoundError, NetworkError: from the registry.
        Anything :func:`fetch_release` raises.
    """
    reporter = reporter or Reporter()
    ref = parse_ref(ref_text)
    selector = ref_selector(ref)
    trust = node_trust(api, trust_root_file, trust_root_sha256, cache)
    trust.witness_policy = witness_policy
    with reporter.phase("manifest"):
        response = api.manifest(ref.tenant, ref.name, selector)
        assert response is not None  # no ETag was sent, so no 304
    with reporter.phase("verify"):
        _walk_root(api, trust, response, _utcnow())
    return fetch_release(response.envelope, response.transport, response.signature_bundle, ref=ref, dest=dest,
                         trust=trust, cache=cache, api=api, parallel=parallel, part_size=part_size,
                         reporter=reporter, log=response.log)


def warm_once(ref: ModelRef, *, api: RegistryApi, trust_root_file: Path | None, cache: NodeCache, etag: str | None,
              wait: float | None, parallel: int = DEFAULT_PARALLEL, reporter: Reporter | None = None,
              trust_root_sha256: str | None = None, witness_policy: WitnessPolicy | None = None
              ) -> tuple[str | None, FetchResult | None]:
    """One long poll for ``ref``: when the release changed, verify it and bring its files into the cache.

    Returns:
        The ETag to poll with next, and what was fetched (None when the manifest did not change).

    Raises:
        RevokedError: the registry refused the manifest, or the cache recorded the version as
            revoked (a stale manifest, or a revocation applied while its blobs came in).
    """
    reporter = reporter or Reporter()
    response = api.manifest(ref.tenant, ref.name, ref_selector(ref), etag=etag, wait=wait)
    if response is None:
        return etag, None
    trust = node_trust(api, trust_root_file, trust_root_sha256, cache)
    trust.witness_policy = witness_policy
    now = _utcnow()
    _walk_root(api, trust, response, now)
    release = verify_manifest(response.envelope, response.signature_bundle, ref=ref, trust=trust, now=now,
                              log=response.log, consistency=api.log_consistency)
    result = FetchResult(release.model, release.ref, release.version, release.serial, None,
                         files=len(release.files), bytes=release.total_size)
    hold_release(release, tenant=ref.tenant, name=ref.name, cache=cache)
    with cache.in_use():
        ensure_cached(release, response.transport, tenant=ref.tenant, cache=cache, api=api, parallel=parallel,
                      reporter=reporter, result=result)
    drop_if_revoked(release, tenant=ref.tenant, name=ref.name, cache=cache)
    trust.accept(release.model, release.ref, release.serial)
    trust.commit()
    cache.evict()
    return response.etag, result
