"""The node cache: content-addressed blobs shared by every fetch on one node.

Layout under the cache directory::

    tenants/<tenant>/blobs/sha256/<2 hex>/<64 hex>   verified blobs, read-only (mode 0444)
    tenants/<tenant>/partial/<64 hex>[.parts.json]   downloads in progress, kept to resume
    tenants/<tenant>/locks/<64 hex>.lock             one flock per digest: one process downloads a blob
    index.sqlite3                                    last use and last verification of each blob; the
                                                     versions held (their digests), revoked ones, and state
                                                     (the event stream's cursor, revocation counters)
    fetch.lock                                       shared by fetches in flight, exclusive for eviction
    trust/                                           roots walked and serials accepted (registry.node.trust)

A directory per tenant: the bytes one tenant fetched never satisfy another tenant's fetch, so a node
shared by tenants tells none of them what the others run, and one tenant's cache cannot be filled
for another. Within a tenant, two pods fetching one model download each blob once: the first to
take a digest's lock downloads it; the other waits, then finds it cached.

Use and eviction. Access times are kept in SQLite (stdlib, safe between processes, atomic updates)
rather than file atimes, which ``noatime``/``relatime`` mounts do not keep. Above the high watermark
the least recently used blobs are removed until the low watermark, except blobs with other hard links
(modelreg makes none: a DEST gets copies, but an operator's link would keep the bytes anyway), and a
fetch in flight holds ``fetch.lock`` shared, so eviction (exclusive, non-blocking) never removes a
blob a fetch is copying; the last fetch to finish evicts.

Nothing in the cache is trusted. The cache directory is one filesystem tree that any root process on
the node can write, so a fetch never hands out a cached blob's bytes unhashed: :meth:`NodeCache.copy_out`
copies a blob into DEST and hashes the bytes DEST gets, in one pass (a reflink hashed where the
filesystem shares extents; elsewhere each chunk read once, hashed in memory and written from there past
the page cache); a blob whose bytes are not its name is removed and downloaded again. DEST never shares an
inode with the cache, so whatever a pod writes into its own DEST reaches neither the cache nor another pod.
(fs-verity would let the kernel refuse the change instead; ext4 here has it off, so the copy is the one
mechanism.) Blobs that only sit in the cache (``cache warm``) are re-hashed when their last check is older
than ``recheck_after``, and ``modelreg cache verify`` re-hashes them all on demand.

Revocation. The index records which versions the cache holds (:meth:`NodeCache.hold`: tenant, model,
version, and each file's digest) when a fetch or ``cache warm`` brings a release in. When a version is
revoked (``cache warm`` reads ``version.revoked`` from the event stream), :meth:`NodeCache.remove_revoked`
marks it revoked, so a stale manifest can never bring it back, and removes its blobs except those another
live (not revoked) version held in the same tenant still lists. Each blob is removed under its digest's
lock, so the removal never races a fetch copying or downloading that blob; it does not wait on
``fetch.lock`` (which eviction takes exclusively), since a long fetch in flight would hold the
revocation back for as long as it runs.

Example:
    >>> import hashlib, tempfile, pathlib
    >>> cache = NodeCache(pathlib.Path(tempfile.mkdtemp()))
    >>> data = b"weights"; digest = hashlib.sha256(data).hexdigest()
    >>> part = cache.partial_path("acme", digest); _ = part.write_bytes(data)
    >>> cache.commit("acme", digest, len(data), part).read_bytes()
    b'weights'
    >>> cache.lookup("acme", digest, len(data)) is not None, cache.lookup("beta", digest, len(data))
    (True, None)
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from registry.domain.errors import DigestMismatchError, InvalidInputError, SizeMismatchError
from registry.domain.files import is_sha256
from registry.domain.refs import NAME_RE
from registry.node.blobfile import copy_hashed

HASH_CHUNK = 128 << 10
"""Bytes per read when hashing a file: small enough that sha256 reads them back from the CPU cache
(bench/README.md, Fetch: 64 KiB-128 KiB beat 1-4 MiB by 0.07 s on 2 GiB)."""
DEFAULT_RECHECK = timedelta(hours=24)


def sha256_file(path: Path) -> str:
    """The sha256 of the file at ``path``, read into one reused buffer (no allocation per chunk)."""
    h = hashlib.sha256()
    buffer = bytearray(HASH_CHUNK)
    with open(path, "rb", buffering=0) as f, memoryview(buffer) as view:
        while n := f.readinto(buffer):
            h.update(view[:n])
    return h.hexdigest()


FICLONE = 0x40049409
"""Linux's ioctl that makes a file share another's extents (copy on write): XFS, Btrfs, not ext4."""


def _reflink(source: Path, target: Path) -> bool:
    """Make the new file ``target`` share ``source``'s extents; False (no ``target``) where the filesystem cannot."""
    with open(source, "rb", buffering=0) as src, open(target, "xb", buffering=0) as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return True
        except OSError:
            pass
    target.unlink()
    return False


def copy_verified(source: Path, target: Path, *, digest: str, size: int) -> None:
    """Copy ``source`` into the new file ``target``, hashing the bytes ``target`` gets: what DEST holds was hashed.

    Where the filesystem shares extents (a reflink), one hash pass over the copy itself; elsewhere (ext4)
    each chunk is read once into memory, hashed there and written from there past the page cache
    (:func:`~registry.node.blobfile.copy_hashed`). Either way a change to ``source`` during the copy
    cannot reach ``target`` unseen.

    Raises:
        FileNotFoundError: ``source`` does not exist (``target`` is not created).
        SizeMismatchError, DigestMismatchError: the bytes are not ``size`` bytes hashing to ``digest``;
            ``target`` is removed.
    """
    try:
        if _reflink(source, target):
            copied = target.stat().st_size
            actual = sha256_file(target) if copied == size else ""
        else:
            copied, actual = copy_hashed(source, target, limit=size)
        if copied != size:
            raise SizeMismatchError(str(source), expected=size, actual=copied)
        if actual != digest:
            raise DigestMismatchError(str(source), expected=digest, actual=actual)
    except FileNotFoundError:
        if source.exists():
            target.unlink(missing_ok=True)
        raise
    except BaseException:
        target.unlink(missing_ok=True)
        raise


@dataclasses.dataclass(frozen=True)
class CachedBlob:
    tenant: str
    digest: str
    path: Path
    size: int
    links: int


@dataclasses.dataclass
class VerifyReport:
    checked: int = 0
    bad: list[dict[str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RevocationReport:
    """What :meth:`NodeCache.remove_revoked` did for one revoked version.

    Attributes:
        held: The cache held the version (a fetch or ``cache warm`` recorded it).
        newly_revoked: The version was not recorded as revoked before this call.
        removed: The digests of the blobs removed; ``kept``: of those kept for another live version.
    """

    tenant: str
    model: str
    version: int
    held: bool = False
    newly_revoked: bool = False
    removed: list[str] = dataclasses.field(default_factory=list)
    removed_bytes: int = 0
    kept: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"tenant": self.tenant, "model": f"{self.tenant}/{self.model}", "version": self.version,
                "blobs_removed": len(self.removed), "bytes_removed": self.removed_bytes,
                "blobs_kept": len(self.kept)}


REVOCATION_COUNTERS = ("revoked_versions", "revoked_blobs_removed", "revoked_bytes_removed")
"""The revocation totals the index keeps (state keys), across restarts: what the metrics count."""


@dataclasses.dataclass
class EvictReport:
    ran: bool
    before: int = 0
    after: int = 0
    evicted: list[str] = dataclasses.field(default_factory=list)


class NodeCache:
    """One node's blob cache directory.

    Args:
        root: The cache directory (created if missing).
        high, low: Capacity watermarks in bytes: above ``high``, evict down to ``low`` (None: never evict).
        recheck_after: :meth:`lookup` (``cache warm``) re-hashes a blob last verified longer ago than this;
            :meth:`copy_out` (a fetch into DEST) hashes every copy whatever the schedule.
        clock: Seconds since the epoch (tests move it).
    """

    def __init__(self, root: Path, *, high: int | None = None, low: int | None = None,
                 recheck_after: timedelta = DEFAULT_RECHECK, clock: Callable[[], float] = time.time) -> None:
        if high is not None and low is None:
            low = int(high * 0.8)
        if high is not None and low is not None and not 0 <= low <= high:
            raise InvalidInputError("the cache's low watermark must be between 0 and the high one")
        self.root = Path(root)
        self.high, self.low = high, low
        self.recheck_after = recheck_after
        self.clock = clock
        self.root.mkdir(parents=True, exist_ok=True)
        self._db_lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "index.sqlite3", timeout=60, check_same_thread=False,
                                   isolation_level=None)
        with self._db_lock:
            # WAL with synchronous=NORMAL: a commit costs no fsync (serve-s3 records every chunk it
            # verifies). A power cut can lose the last transactions, in order, never corrupt the index:
            # use and check times (a blob with no row counts as never checked), or a revocation mark together
            # with the event cursor committed after it, so the event is read again.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS blobs (tenant TEXT NOT NULL, digest TEXT NOT NULL, "
                             "size INTEGER NOT NULL, last_used REAL NOT NULL, verified_at REAL NOT NULL, "
                             "PRIMARY KEY (tenant, digest))")
            # A version a fetch or warm brought in (revoked = 1 once revoked, held or not), and its digests.
            self._db.execute("CREATE TABLE IF NOT EXISTS versions (tenant TEXT NOT NULL, model TEXT NOT NULL, "
                             "version INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0, "
                             "recorded_at REAL NOT NULL, PRIMARY KEY (tenant, model, version))")
            self._db.execute("CREATE TABLE IF NOT EXISTS version_blobs (tenant TEXT NOT NULL, model TEXT NOT NULL, "
                             "version INTEGER NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL, "
                             "PRIMARY KEY (tenant, model, version, digest))")
            self._db.execute("CREATE INDEX IF NOT EXISTS version_blobs_by_digest ON version_blobs (tenant, digest)")
            self._db.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    def close(self) -> None:
        self._db.close()

    # --- paths and locks -------------------------------------------------------------------

    def tenant_dir(self, tenant: str) -> Path:
        if not isinstance(tenant, str) or not NAME_RE.match(tenant):
            raise InvalidInputError(f"invalid tenant name {tenant!r}", tenant=str(tenant))
        return self.root / "tenants" / tenant

    def blob_path(self, tenant: str, digest: str) -> Path:
        if not is_sha256(digest):
            raise InvalidInputError(f"not a sha256 digest: {digest!r}")
        return self.tenant_dir(tenant) / "blobs" / "sha256" / digest[:2] / digest

    def partial_path(self, tenant: str, digest: str) -> Path:
        if not is_sha256(digest):
            raise InvalidInputError(f"not a sha256 digest: {digest!r}")
        path = self.tenant_dir(tenant) / "partial" / digest
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def digest_lock(self, tenant: str, digest: str) -> Iterator[None]:
        """Exclusive, between processes and threads (flock is per open file): one downloader per blob."""
        if not is_sha256(digest):
            raise InvalidInputError(f"not a sha256 digest: {digest!r}")
        locks = self.tenant_dir(tenant) / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{digest}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """Held (shared) by a fetch from its first cache look-up to DEST's last link: no eviction meanwhile."""
        with open(self.root / "fetch.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- the index -------------------------------------------------------------------------

    def _record(self, tenant: str, digest: str, size: int, *, verified: bool) -> None:
        now = self.clock()
        with self._db_lock:
            if verified:
                self._db.execute("INSERT INTO blobs VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, digest) DO UPDATE "
                                 "SET size = excluded.size, last_used = excluded.last_used, "
                                 "verified_at = excluded.verified_at", (tenant, digest, size, now, now))
            else:
                # A blob found on disk with no row (an index lost) counts as never verified.
                self._db.execute("INSERT INTO blobs VALUES (?, ?, ?, ?, 0) ON CONFLICT (tenant, digest) DO UPDATE "
                                 "SET last_used = excluded.last_used", (tenant, digest, size, now))

    def _forget(self, tenant: str, digest: str) -> None:
        with self._db_lock:
            self._db.execute("DELETE FROM blobs WHERE tenant = ? AND digest = ?", (tenant, digest))

    def _verified_at(self, tenant: str, digest: str) -> float:
        with self._db_lock:
            row = self._db.execute("SELECT verified_at FROM blobs WHERE tenant = ? AND digest = ?",
                                   (tenant, digest)).fetchone()
        return row[0] if row else 0.0

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the index (BEGIN IMMEDIATE: other processes wait, none interleaves)."""
        with self._db_lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def state(self, key: str) -> str | None:
        """A value the cache keeps for its clients (the event stream's cursor), or None."""
        with self._db_lock:
            row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_state(self, key: str, value: str) -> None:
        with self._db_lock:
            self._db.execute("INSERT INTO state VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                             (key, value))

    def revocation_totals(self) -> dict[str, int]:
        """The revoked versions removed and their blobs and bytes, since the cache was made."""
        with self._db_lock:
            rows = dict(self._db.execute(f"SELECT key, value FROM state WHERE key IN "
                                         f"({', '.join('?' * len(REVOCATION_COUNTERS))})", REVOCATION_COUNTERS))
        return {key: int(rows.get(key, 0)) for key in REVOCATION_COUNTERS}

    def _last_used(self) -> dict[tuple[str, str], float]:
        with self._db_lock:
            return {(t, d): u for t, d, u in self._db.execute("SELECT tenant, digest, last_used FROM blobs")}

    # --- versions held, and revocation ------------------------------------------------------

    def hold(self, tenant: str, model: str, version: int, blobs: dict[str, int]) -> bool:
        """Record that the cache holds (or is about to hold) ``tenant/model@version``: its digests and sizes.

        Call before bringing its blobs in: a revocation applied meanwhile then knows them.

        Returns:
            False when the version is recorded as revoked: bring none of it in (:meth:`remove_revoked`).
        """
        self.tenant_dir(tenant)
        if not all(is_sha256(d) for d in blobs):
            raise InvalidInputError("a held version's blobs are named by sha256 digests")
        with self._transaction() as db:
            db.execute("INSERT INTO versions VALUES (?, ?, ?, 0, ?) ON CONFLICT DO NOTHING",
                       (tenant, model, int(version), self.clock()))
            db.executemany("INSERT INTO version_blobs VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                           [(tenant, model, int(version), d, int(n)) for d, n in sorted(blobs.items())])
            (revoked,) = db.execute("SELECT revoked FROM versions WHERE tenant = ? AND model = ? AND version = ?",
                                    (tenant, model, int(version))).fetchone()
        return not revoked

    def is_revoked(self, tenant: str, model: str, version: int) -> bool:
        with self._db_lock:
            row = self._db.execute("SELECT revoked FROM versions WHERE tenant = ? AND model = ? AND version = ?",
                                   (tenant, model, int(version))).fetchone()
        return bool(row and row[0])

    def held_versions(self) -> list[tuple[str, str, int, bool]]:
        """Every version recorded: ``(tenant, model, version, revoked)``."""
        with self._db_lock:
            return [(t, m, v, bool(r)) for t, m, v, r in self._db.execute(
                "SELECT tenant, model, version, revoked FROM versions ORDER BY tenant, model, version")]

    def _live_holders(self, tenant: str, digest: str) -> int:
        """How many live (not revoked) versions of ``tenant`` list the blob."""
        with self._db_lock:
            (n,) = self._db.execute(
                "SELECT count(*) FROM version_blobs b JOIN versions v USING (tenant, model, version) "
                "WHERE b.tenant = ? AND b.digest = ? AND v.revoked = 0", (tenant, digest)).fetchone()
        return n

    def remove_revoked(self, tenant: str, model: str, version: int) -> RevocationReport:
        """Record ``tenant/model@version`` as revoked and remove its blobs no live version held still lists.

        Idempotent: applied again (a redelivered event), it removes what is left and counts nothing twice.

        Raises:
            InvalidInputError: ``tenant`` is not a tenant name.
        """
        self.tenant_dir(tenant)
        report = RevocationReport(tenant, model, int(version))
        # Revoked first: a warm of this version that records it from now on is refused (hold() is False).
        with self._transaction() as db:
            row = db.execute("SELECT revoked FROM versions WHERE tenant = ? AND model = ? AND version = ?",
                             (tenant, model, int(version))).fetchone()
            report.newly_revoked = not (row and row[0])
            db.execute("INSERT INTO versions VALUES (?, ?, ?, 1, ?) ON CONFLICT (tenant, model, version) "
                       "DO UPDATE SET revoked = 1", (tenant, model, int(version), self.clock()))
            blobs = db.execute("SELECT digest, size FROM version_blobs WHERE tenant = ? AND model = ? "
                               "AND version = ? ORDER BY digest", (tenant, model, int(version))).fetchall()
        report.held = bool(blobs)
        for digest, size in blobs:
            with self.digest_lock(tenant, digest):
                # Asked under the lock: a live version recorded while we waited keeps the blob.
                if self._live_holders(tenant, digest):
                    report.kept.append(digest)
                    continue
                path = self.blob_path(tenant, digest)
                if path.exists():
                    self._remove(tenant, digest)
                    report.removed.append(digest)
                    report.removed_bytes += size
        if report.held and (report.newly_revoked or report.removed):
            self._count({"revoked_versions": 1 if report.newly_revoked else 0,
                         "revoked_blobs_removed": len(report.removed),
                         "revoked_bytes_removed": report.removed_bytes})
        return report

    def _count(self, increments: dict[str, int]) -> None:
        with self._transaction() as db:
            for key, n in increments.items():
                db.execute("INSERT INTO state VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                           "SET value = CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER)", (key, str(n)))

    # --- blobs -----------------------------------------------------------------------------

    def lookup(self, tenant: str, digest: str, size: int) -> Path | None:
        """The cached blob, re-hashed first when its last check is older than ``recheck_after``.

        Call under :meth:`digest_lock`. A blob of the wrong size or digest is removed (None).
        """
        path = self.blob_path(tenant, digest)
        try:
            actual_size = path.stat().st_size
        except FileNotFoundError:
            return None
        if actual_size != size:
            self._remove(tenant, digest)
            return None
        if self.clock() - self._verified_at(tenant, digest) >= self.recheck_after.total_seconds():
            if sha256_file(path) != digest:
                self._remove(tenant, digest)
                return None
            self._record(tenant, digest, size, verified=True)
        else:
            self._record(tenant, digest, size, verified=False)
        return path

    def copy_out(self, tenant: str, digest: str, size: int, target: Path) -> str:
        """Copy the cached blob into the new file ``target``, every byte hashed as it is copied.

        Call under :meth:`digest_lock`. The schedule of ``recheck_after`` does not apply: this is the check.

        Returns:
            ``"copied"``; ``"missing"`` (not cached); or ``"rejected"``: its size or bytes were not its
            digest's, so it was removed (``target`` is not left behind in either case).
        """
        path = self.blob_path(tenant, digest)
        try:
            copy_verified(path, target, digest=digest, size=size)
        except FileNotFoundError:
            if path.exists():
                raise  # the target's folder is missing: not the cache's fault
            return "missing"
        except (SizeMismatchError, DigestMismatchError):
            self._remove(tenant, digest)
            return "rejected"
        self._record(tenant, digest, size, verified=True)
        return "copied"

    def commit(self, tenant: str, digest: str, size: int, verified_file: Path) -> Path:
        """Move a file whose bytes were just hashed to ``digest`` into the cache (read-only); its path there."""
        path = self.blob_path(tenant, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(verified_file, 0o444)
        os.replace(verified_file, path)
        self._record(tenant, digest, size, verified=True)
        return path

    def _remove(self, tenant: str, digest: str) -> None:
        self.blob_path(tenant, digest).unlink(missing_ok=True)
        self._forget(tenant, digest)

    def blobs(self) -> Iterator[CachedBlob]:
        tenants = self.root / "tenants"
        if not tenants.is_dir():
            return
        for tenant in sorted(p.name for p in tenants.iterdir() if p.is_dir()):
            store = tenants / tenant / "blobs" / "sha256"
            if not store.is_dir():
                continue
            for shard in sorted(store.iterdir()):
                for path in sorted(shard.iterdir()) if shard.is_dir() else ():
                    if not is_sha256(path.name) or path.name.startswith(".") or not path.is_file():
                        continue
                    st = path.stat()
                    yield CachedBlob(tenant, path.name, path, st.st_size, st.st_nlink)

    def size(self) -> int:
        return sum(b.size for b in self.blobs())

    def verify(self, *, parallel: int = 4) -> VerifyReport:
        """Re-hash every cached blob; remove and report the ones whose bytes are not their name."""
        report = VerifyReport()

        def check(blob: CachedBlob) -> None:
            with self.digest_lock(blob.tenant, blob.digest):
                if not blob.path.exists():
                    return
                actual = sha256_file(blob.path)
                if actual == blob.digest and blob.path.stat().st_size == blob.size:
                    self._record(blob.tenant, blob.digest, blob.size, verified=True)
                    return
                self._remove(blob.tenant, blob.digest)
                report.bad.append({"tenant": blob.tenant, "digest": blob.digest, "actual": actual,
                                   "path": str(blob.path)})

        blobs = list(self.blobs())
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(check, blobs))
        report.checked = len(blobs)
        return report

    def evict(self) -> EvictReport:
        """Above the high watermark, remove least recently used blobs no DEST uses, down to the low one.

        Runs only when no fetch is in flight (else that fetch evicts when it finishes).
        """
        if self.high is None:
            return EvictReport(ran=False)
        with open(self.root / "fetch.lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return EvictReport(ran=False)
            try:
                blobs = list(self.blobs())
                total = sum(b.size for b in blobs)
                report = EvictReport(ran=True, before=total, after=total)
                if total <= self.high:
                    return report
                used = self._last_used()
                candidates = sorted((b for b in blobs if b.links == 1),
                                    key=lambda b: (used.get((b.tenant, b.digest), 0.0), b.digest))
                for blob in candidates:
                    if total <= (self.low or 0):
                        break
                    self._remove(blob.tenant, blob.digest)
                    total -= blob.size
                    report.evicted.append(f"{blob.tenant}/{blob.digest}")
                report.after = total
                return report
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
