"""The fetch client: a release of a model, opened and verified, into DEST through the node cache (or without one).

:func:`fetch` (``modelreg fetch``) asks the registry for the release and opens it through the node's one
door (:class:`registry.node.opener.ReleaseOpener`: trust root walked, envelope, expiry, serial, paths,
bundle, log proof and cosignatures); :func:`place_release` then brings what the cache lacks into it and
assembles DEST, and accepts the release only after DEST holds it. :func:`warm_once` is ``cache warm``'s
step: one long poll on the manifest, the release opened and its files cached.

After the opener's checks and before any byte is written anywhere but the cache's partial files: DEST
outside the cache; then each file's size and sha256 as it is downloaded, or as it is copied out of the
cache into DEST (a cached blob that fails is removed and downloaded again); then DEST appears. A DEST that
already holds the release is re-hashed, not trusted on its file sizes. The root walked, the serial and the
log checkpoint are persisted only after DEST holds the release.

Without a node cache (``modelreg fetch`` with no ``--cache``: KServe's storage initializer, whose only
writable paths are DEST and /tmp) the same path runs with no cache: each blob is downloaded straight
into its file in DEST's staging directory (written from the buffers the hash takes, as with a cache),
so nothing is written outside DEST; nothing is kept for the next fetch (no cached blob, no walked root,
no serial).

An adapter's release (``adapter_of``) goes into ``DEST/<adapter name>``, its config given its base's served
name, and with ``--with-base`` its base into ``DEST/<base name>`` first (:func:`fetch_adapter`,
:mod:`registry.node.adapters`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from registry.client.api import RegistryApi
from registry.client.errors import BadManifestError, DestinationError, DestinationInCacheError
from registry.domain.errors import InvalidInputError, RevokedError
from registry.domain.refs import ModelRef, parse_ref
from registry.node import adapters
from registry.node.assemble import assemble, destination_is_release, verify_destination
from registry.node.cache import NodeCache, copy_verified
from registry.node.download import DEFAULT_PART_SIZE, MAX_PART_SIZE, SPARE_BUFFERS, Buffers, download_blob
from registry.node.opener import NodePolicy, OpenedRelease, ReleaseOpener, ref_selector
from registry.node.progress import Reporter
from registry.signing.release import Release, ReleaseFile

DEFAULT_PARALLEL = 8


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
    adapter_of: dict[str, Any] | None = None
    """An adapter's release: the base it is served with (its release's signed ``adapter_of``)."""
    base: dict[str, Any] | None = None
    """With ``--with-base``: what the base's fetch did (its own result, ``dest`` its directory)."""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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



def place_release(opened: OpenedRelease, *, tenant: str, dest: Path, cache: NodeCache | None, api: RegistryApi,
                  parallel: int = DEFAULT_PARALLEL, part_size: int = DEFAULT_PART_SIZE,
                  reporter: Reporter | None = None) -> FetchResult:
    """An opened release's files into the cache and DEST; accepted (its trust state kept) only once DEST
    holds it. On any failure DEST is as it was and nothing is accepted. ``cache`` None: no node cache."""
    reporter = reporter or Reporter()
    release, bundle = opened.release, opened.bundle
    result = FetchResult(release.model, release.ref, release.version, release.serial, str(dest),
                         files=len(release.files), bytes=release.total_size)
    if cache is not None:
        hold_release(release, tenant=tenant, name=release.model.split("/", 1)[1], cache=cache)
    with cache.in_use() if cache is not None else contextlib.nullcontext():
        # Before any download: a DEST holding something else is refused now, not after the bytes came.
        if destination_is_release(Path(dest), release):
            with reporter.phase("verify"):
                verify_destination(Path(dest), release, bundle, parallel=max(1, min(parallel, 8)))
            result.noop = True
        else:
            def place(staging: Path) -> None:
                with reporter.phase("download"):
                    ensure_cached(release, opened.transport, tenant=tenant, cache=cache, api=api, into=staging,
                                  parallel=parallel, part_size=part_size, reporter=reporter, result=result)

            # The download phase runs inside assemble's (into its staging directory); a phase's time
            # leaves out the phases inside it.
            with reporter.phase("assemble"):
                assemble(Path(dest), release, place, bundle, opened.envelope)
    opened.accept()
    if cache is not None:
        cache.evict()
    result.timings = dict(reporter.timings)
    return result


def fetch(ref_text: str, dest: Path, *, api: RegistryApi, policy: NodePolicy, cache: NodeCache | None = None,
          parallel: int = DEFAULT_PARALLEL, part_size: int = DEFAULT_PART_SIZE,
          reporter: Reporter | None = None, with_base: bool = False) -> FetchResult:
    """``modelreg fetch``: the release opened (:class:`ReleaseOpener`), then :func:`place_release`; an
    adapter's release into ``DEST/<adapter name>`` (:func:`fetch_adapter`).

    Args:
        with_base: the release must be an adapter's: its base is fetched too, into ``DEST/<base name>``.

    Raises:
        InvalidRefError: REF names no alias or version.
        InvalidInputError: ``with_base`` for a release that is no adapter's (nothing fetched).
        DestinationInCacheError: DEST is inside the node cache, or holds it.
        InvalidInputError, RootError: the trust root cannot be read, or is not the pinned one.
        RevokedError, NotApprovedError, ReleaseNotFoundError, NetworkError: from the registry
            (``AdapterBaseMovedError``: an adapter whose base alias moved to other weights).
        Anything :meth:`ReleaseOpener.verify`, :func:`fetch_adapter` and :func:`place_release` raise.
    """
    reporter = reporter or Reporter()
    ref = parse_ref(ref_text)
    ref_selector(ref)
    if cache is not None:
        check_outside_cache(dest, cache)
    opener = ReleaseOpener(api, policy, state_dir=cache.root if cache is not None else None)
    trust = opener.trust()  # a trust root that cannot be read fails before the registry is asked
    with reporter.phase("manifest"):
        response = api.manifest(ref.tenant, ref.name, ref_selector(ref))
        assert response is not None  # no ETag was sent, so no 304
    with reporter.phase("verify"):
        opened = opener.verify(ref, response, trust)
    if opened.release.adapter_of is not None:
        return fetch_adapter(opened, dest, opener=opener, cache=cache, with_base=with_base, parallel=parallel,
                             part_size=part_size, reporter=reporter)
    if with_base:
        raise InvalidInputError(f"{opened.release.model}@{opened.release.ref} is no adapter: --with-base fetches "
                                "an adapter's base beside it")
    return place_release(opened, tenant=ref.tenant, dest=dest, cache=cache, api=api, parallel=parallel,
                         part_size=part_size, reporter=reporter)


def fetch_adapter(opened: OpenedRelease, dest: Path, *, opener: ReleaseOpener, cache: NodeCache | None,
                  with_base: bool, parallel: int = DEFAULT_PARALLEL, part_size: int = DEFAULT_PART_SIZE,
                  reporter: Reporter | None = None) -> FetchResult:
    """An opened adapter's release into ``DEST/<adapter name>`` (:mod:`registry.node.adapters`), and with
    ``with_base`` its base's into ``DEST/<base name>`` first: the base's release asked for by the version the
    adapter's names, opened with the same trust, and checked against its ``adapter_of`` before any download
    (:meth:`ReleaseOpener.open_base`).

    Raises:
        AdapterBaseMismatchError: the base release is not the one the adapter's release names (nothing fetched).
        DestinationError: DEST exists and is not a directory, or a directory in it holds something else.
        Anything :meth:`ReleaseOpener.verify` and :func:`place_release` raise.
    """
    reporter = reporter or Reporter()
    release = opened.release
    bound = release.adapter_of
    assert bound is not None
    base: OpenedRelease | None = None
    if with_base:
        with reporter.phase("base"):
            base = opener.open_base(opened)
    dest = Path(dest)
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise DestinationError(f"{dest} exists and is not a directory", dest=str(dest))
    base_result = None
    if base is not None:
        # The base first: a resolver never finds the adapter without the base it is bound to.
        base_result = place_release(base, tenant=bound.tenant, dest=dest / adapters.base_dir_name(release),
                                    cache=cache, api=opener.api, parallel=parallel, part_size=part_size,
                                    reporter=reporter)
    result = place_release(opened, tenant=release.model.split("/", 1)[0],
                           dest=dest / adapters.adapter_dir_name(release),
                           cache=cache, api=opener.api, parallel=parallel, part_size=part_size, reporter=reporter)
    result.adapter_of = bound.as_dict()
    result.base = base_result.as_dict() if base_result is not None else None
    return result


def warm_once(ref: ModelRef, *, opener: ReleaseOpener, cache: NodeCache, etag: str | None, wait: float | None,
              parallel: int = DEFAULT_PARALLEL, reporter: Reporter | None = None
              ) -> tuple[str | None, FetchResult | None]:
    """One long poll for ``ref``: when the release changed, open it and bring its files into the cache.

    Returns:
        The ETag to poll with next, and what was fetched (None when the manifest did not change).

    Raises:
        RevokedError: the registry refused the manifest, or the cache recorded the version as
            revoked (a stale manifest, or a revocation applied while its blobs came in).
    """
    reporter = reporter or Reporter()
    opened = opener.open(ref, etag=etag, wait=wait)
    if opened is None:
        return etag, None
    release = opened.release
    result = FetchResult(release.model, release.ref, release.version, release.serial, None,
                         files=len(release.files), bytes=release.total_size)
    hold_release(release, tenant=ref.tenant, name=ref.name, cache=cache)
    with cache.in_use():
        ensure_cached(release, opened.transport, tenant=ref.tenant, cache=cache, api=opener.api, parallel=parallel,
                      reporter=reporter, result=result)
    drop_if_revoked(release, tenant=ref.tenant, name=ref.name, cache=cache)
    opened.accept()
    cache.evict()
    return opened.response.etag, result
