"""The node cache: LRU eviction between the watermarks, blobs in use kept, re-checks on a schedule."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from registry.node.blobfile import COPY_CHUNK
from registry.node.cache import NodeCache
from tests.support.waiting import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _put(cache: NodeCache, tenant: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    partial = cache.partial_path(tenant, digest)
    partial.write_bytes(data)
    cache.commit(tenant, digest, len(data), partial)
    return digest


def test_eviction_removes_least_recently_used_blobs_down_to_the_low_watermark(tmp_path):
    clock = Clock()
    cache = NodeCache(tmp_path, high=3500, low=2000, clock=clock)
    digests = []
    for i in range(4):
        clock.now += 10
        digests.append(_put(cache, "acme", bytes([i]) * 1000))
    clock.now += 10
    assert cache.lookup("acme", digests[0], 1000) is not None  # the oldest, used again: now the newest
    report = cache.evict()
    assert report.ran and report.before == 4000 and report.after == 2000
    assert report.evicted == [f"acme/{digests[1]}", f"acme/{digests[2]}"]
    assert cache.lookup("acme", digests[0], 1000) and cache.lookup("acme", digests[3], 1000)
    assert cache.evict().evicted == []  # under the high watermark: nothing


def test_a_blob_linked_into_a_dest_is_never_evicted(tmp_path):
    clock = Clock()
    cache = NodeCache(tmp_path / "c", high=1500, low=0, clock=clock)
    old = _put(cache, "acme", b"a" * 1000)
    clock.now += 10
    new = _put(cache, "acme", b"b" * 1000)
    os.link(cache.blob_path("acme", old), tmp_path / "dest-file")
    assert cache.evict().evicted == [f"acme/{new}"]
    assert cache.blob_path("acme", old).exists()


def test_no_eviction_while_a_fetch_is_in_flight(tmp_path):
    cache = NodeCache(tmp_path, high=10, low=0)
    digest = _put(cache, "acme", b"x" * 100)
    with cache.in_use():
        assert not cache.evict().ran
    assert cache.blob_path("acme", digest).exists()
    assert cache.evict().evicted == [f"acme/{digest}"]


def test_a_blob_not_verified_for_the_recheck_interval_is_rehashed_before_use(tmp_path):
    clock = Clock()
    cache = NodeCache(tmp_path, recheck_after=timedelta(hours=1), clock=clock)
    digest = _put(cache, "acme", b"weights" * 100)
    path = cache.blob_path("acme", digest)
    path.chmod(0o644)
    path.write_bytes(b"Weights" + b"weights" * 99)  # same size, other bytes
    clock.now += 1800
    assert cache.lookup("acme", digest, 700) == path  # checked 30 minutes ago: trusted
    clock.now += 1800
    assert cache.lookup("acme", digest, 700) is None and not path.exists()  # due: re-hashed, removed


def test_tenants_do_not_share_blobs(tmp_path):
    cache = NodeCache(tmp_path)
    digest = _put(cache, "acme", b"secret weights")
    assert cache.lookup("acme", digest, 14) is not None
    assert cache.lookup("beta", digest, 14) is None


def test_verify_removes_and_reports_corrupted_blobs(tmp_path):
    cache = NodeCache(tmp_path)
    good, bad = _put(cache, "acme", b"good"), _put(cache, "beta", b"bad!")
    path = cache.blob_path("beta", bad)
    path.chmod(0o644)
    path.write_bytes(b"BAD!")
    report = cache.verify(parallel=2)
    assert report.checked == 2 and [b["digest"] for b in report.bad] == [bad]
    assert not path.exists() and cache.blob_path("acme", good).exists()


LOCKER = """
import sys
from pathlib import Path

from registry.node.cache import NodeCache
cache = NodeCache(Path(sys.argv[1]))
with cache.digest_lock("acme", "a" * 64):
    print("locked", flush=True)
    sys.stdin.readline()
    print("releasing", flush=True)
"""


def _flock_waiters(path: Path) -> int:
    """Processes blocked in flock on ``path`` now, as the kernel lists them ("->" lines of /proc/locks)."""
    inode = f":{path.stat().st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if " -> FLOCK " in line and inode in line)


def test_the_digest_lock_excludes_another_process(tmp_path):
    cache = NodeCache(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    other = subprocess.Popen([sys.executable, "-c", LOCKER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "locked"
        released: list[str] = []

        def take() -> None:
            with cache.digest_lock("acme", "a" * 64):
                released.append(other.stdout.readline().strip())

        taker = threading.Thread(target=take)
        taker.start()
        # The kernel says when this process waits on the other's lock: no guess at how long that takes.
        wait_until(lambda: _flock_waiters(cache.tenant_dir("acme") / "locks" / f"{'a' * 64}.lock"),
                   "the second holder to block on the lock")
        assert taker.is_alive() and released == []
        other.stdin.write("go\n")
        other.stdin.flush()
        taker.join(timeout=60)
        assert released == ["releasing"]  # taken only once the other process let go
    finally:
        other.kill()
        other.wait(timeout=30)


def test_a_cached_blob_of_another_size_is_never_used_even_when_just_verified(tmp_path):
    clock = Clock()
    cache = NodeCache(tmp_path, recheck_after=timedelta(hours=24), clock=clock)
    for changed in (b"weights" * 99, b"weights" * 100 + b"!"):  # truncated, grown; verified a second ago
        digest = _put(cache, "acme", b"weights" * 100)
        path = cache.blob_path("acme", digest)
        path.chmod(0o644)
        path.write_bytes(changed)
        clock.now += 1
        assert cache.lookup("acme", digest, 700) is None and not path.exists()


def test_copy_out_hashes_every_byte_it_copies_and_removes_a_blob_that_fails(tmp_path):
    cache = NodeCache(tmp_path / "cache", recheck_after=timedelta(hours=24))
    data = bytes(range(256)) * 10_000  # several copy chunks
    digest = _put(cache, "acme", data)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert cache.copy_out("acme", digest, len(data), dest / "a") == "copied"
    assert (dest / "a").read_bytes() == data
    assert (dest / "a").stat().st_ino != cache.blob_path("acme", digest).stat().st_ino
    # Verified a moment ago, same size, one byte flipped: the copy itself is the check.
    path = cache.blob_path("acme", digest)
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(len(data) - 1)
        f.write(bytes([data[-1] ^ 1]))
    assert cache.copy_out("acme", digest, len(data), dest / "b") == "rejected"
    assert not (dest / "b").exists() and not path.exists()
    assert cache.copy_out("acme", digest, len(data), dest / "c") == "missing" and not (dest / "c").exists()
    for changed in (data[:-1], data + b"x"):
        digest = _put(cache, "acme", data)
        cache.blob_path("acme", digest).chmod(0o644)
        cache.blob_path("acme", digest).write_bytes(changed)
        assert cache.copy_out("acme", digest, len(data), dest / "d") == "rejected" and not (dest / "d").exists()


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", [0, 1, 4097, 2 * COPY_CHUNK + 5])
def test_copy_out_of_any_size_gives_the_blob_past_the_page_cache_or_through_it(tmp_path, monkeypatch, size, direct):
    if not direct:
        monkeypatch.delattr(os, "O_DIRECT", raising=False)
    cache = NodeCache(tmp_path / "cache")
    data = bytes((i * 131 + 7) % 256 for i in range(size))
    digest = _put(cache, "acme", data)
    assert cache.copy_out("acme", digest, size, tmp_path / "dest-file") == "copied"
    assert (tmp_path / "dest-file").read_bytes() == data
    assert (tmp_path / "dest-file").stat().st_ino != cache.blob_path("acme", digest).stat().st_ino
