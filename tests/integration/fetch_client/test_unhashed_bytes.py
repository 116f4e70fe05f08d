"""What the cache and a fetched DEST may no longer do: hand out bytes nobody hashed (a byte flipped in the cache,
a DEST sharing an inode with it, a partial changed after it was hashed, a fast path with the state changed
underneath)."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from tests.support.fetch_node import (
    BIG,
    PART,
    assert_refused,
    big_file,
    build_node_world,
    cached_blob,
    flip,
    revoke,
    summary_of,
    tree,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


def test_a_byte_flipped_in_the_cache_is_never_handed_out_the_blob_is_downloaded_again(node):
    node.release()
    assert node.fetch(node.tmp / "first").returncode == 0
    big = big_file(node)
    flip(cached_blob(node, big["sha256"]), 2_500_000)  # same size, verified seconds ago (--recheck-hours 24)
    gets = len(node.standin.blob_gets)
    ok = node.fetch(node.tmp / "second")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "second" / "big.txt").read_bytes() == BIG
    summary = summary_of(ok)
    assert (summary["rejected_cached_files"], summary["downloaded_files"]) == (1, 1)
    assert summary["cached_files"] == len({f["sha256"] for f in node.files}) - 1
    assert {g["path"].rsplit("/", 1)[-1] for g in node.standin.blob_gets[gets:]} == {big["sha256"]}
    assert hashlib.sha256(cached_blob(node, big["sha256"]).read_bytes()).hexdigest() == big["sha256"]


def test_dest_shares_no_inode_with_the_cache_so_a_pod_writing_its_dest_changes_no_other_pod(node):
    node.release()
    first = node.tmp / "pod-a"
    assert node.fetch(first).returncode == 0
    for f in node.files:
        st = (first / f["path"]).stat()
        assert st.st_nlink == 1 and st.st_ino != cached_blob(node, f["sha256"]).stat().st_ino, f["path"]
        assert stat.S_IMODE(st.st_mode) == 0o444
    big = big_file(node)
    flip(first / "big.txt", 1234)  # root in pod A writes its own /mnt/models
    assert hashlib.sha256(cached_blob(node, big["sha256"]).read_bytes()).hexdigest() == big["sha256"]
    gets = len(node.standin.blob_gets)
    ok = node.fetch(node.tmp / "pod-b")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "pod-b" / "big.txt").read_bytes() == BIG and len(node.standin.blob_gets) == gets


def test_a_partial_changed_after_its_bytes_were_hashed_never_reaches_dest_nor_a_later_dest(node):
    """Another root process on the node rewrites a part of the cache's partial file once it is on disk.

    The cold fetch's DEST must hold the bytes the fetch hashed, not what the partial holds by the time the
    download ends (a fetch that copies or reads back the partial into DEST hands that change out unhashed);
    the tampered blob that enters the cache is caught by the next fetch's copy and downloaded again.
    """
    node.release()
    big = big_file(node)
    partial = node.cache / "tenants" / "acme" / "partial" / big["sha256"]
    tampered: list[str] = []

    def tamper(path: str, wanted: str | None) -> None:
        # One stream (--parallel 1): part 0 is on disk before part 1 is asked for.
        if path.endswith(big["sha256"]) and wanted == f"bytes={1 << 20}-{(2 << 20) - 1}":
            flip(partial, 4321)
            tampered.append(wanted)

    node.standin.before_blob = tamper
    dest = node.tmp / "pod-a"
    ok = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root", str(node.root_file), "--part-size", PART,
                  "--parallel", "1", "--json")
    assert ok.returncode == 0, ok.stderr
    assert tampered and summary_of(ok)["downloaded_files"] == len({f["sha256"] for f in node.files})
    assert (dest / "big.txt").read_bytes() == BIG
    assert node.cli("verify", str(dest), "--trust-root", str(node.root_file)).returncode == 0
    # What the cache took in is the partial as changed: never handed out, downloaded again.
    assert cached_blob(node, big["sha256"]).read_bytes() != BIG
    node.standin.before_blob = None
    again = node.fetch(node.tmp / "pod-b")
    assert again.returncode == 0, again.stderr
    assert (node.tmp / "pod-b" / "big.txt").read_bytes() == BIG
    assert (summary_of(again)["rejected_cached_files"], summary_of(again)["downloaded_files"]) == (1, 1)


def _alter_file(node, target: Path) -> None:
    flip(target / "big.txt", 99)


def _alter_signature(node, target: Path) -> None:
    (target / "model.sig").chmod(0o644)
    (target / "model.sig").write_text(json.dumps({**node.bundle, "note": "x"}))


def _delete_file(node, target: Path) -> None:
    (target / "config.json").unlink()


def _delete_cached(node, target: Path) -> None:
    cached_blob(node, big_file(node)["sha256"]).unlink()


def _revoke(node, target: Path) -> None:
    revoke(node)


@pytest.mark.parametrize("fast_path,change,code,kind", [
    ("noop", _alter_file, 13, "digest"), ("noop", _alter_signature, 13, "digest"),
    ("noop", _delete_file, 17, "destination"), ("noop", _revoke, 14, "revoked"),
    ("cache-hit", _delete_cached, 0, "ok"), ("cache-hit", _revoke, 14, "revoked"),
])
def test_each_fast_path_with_the_state_changed_underneath(node, fast_path, change, code, kind):
    """A no-op fetch (DEST already holds the release) and a cache hit, after bytes changed, went, or were revoked."""
    node.release()
    dest = node.tmp / "dest"
    assert node.fetch(dest).returncode == 0
    target = dest if fast_path == "noop" else node.tmp / "other"
    change(node, dest)
    before = tree(target)
    result = node.fetch(target)
    if code:
        assert_refused(result, code, kind)
        assert tree(target) == before
        return
    assert result.returncode == 0, result.stderr
    assert (target / "big.txt").read_bytes() == BIG and summary_of(result)["downloaded_files"] == 1
