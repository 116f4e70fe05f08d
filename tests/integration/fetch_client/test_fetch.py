"""A fetch fills DEST with the release that model_signing verifies, fills it from the node cache, and a fetch
of an intact DEST is a no-op that hashes it again; without a cache it writes only inside DEST."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fetch_node import (
    BIG,
    assert_refused,
    big_file,
    build_node_world,
    build_twin_world,
    bytes_requested,
    summary_of,
    tree,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


MODEL_SIGNING = Path(sys.executable).parent / "model_signing"


def test_fetch_fills_dest_that_model_signing_verifies_then_noop_and_verify(node):
    node.release()
    dest = node.tmp / "models" / "tiny"
    ok = node.fetch(dest)
    assert ok.returncode == 0, ok.stderr
    summary = summary_of(ok)
    assert summary["version"] == 1 and summary["downloaded_files"] == len(node.files) and not summary["noop"]
    assert set(summary["timings"]) == {"manifest", "verify", "download", "assemble"}
    for f in node.files:
        assert hashlib.sha256((dest / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    assert (dest / "big.txt").read_bytes() == BIG
    assert json.loads((dest / "model.sig").read_text()) == node.bundle
    # The big file came in ranges of the part size; no blob URL got the node's token.
    assert len([g for g in node.standin.blob_gets if g["range"]]) >= 4
    assert all(g["auth"] is None for g in node.standin.blob_gets)
    assert all(g["auth"] == "Bearer node-token" for g in node.standin.manifest_gets)

    public_key = node.tmp / "registry.pub"
    public_key.write_bytes(node.registry_key.public_key.public_pem())
    checked = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(dest), "--public_key", str(public_key),
                              "--signature", str(dest / "model.sig")], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr + checked.stdout

    gets = len(node.standin.blob_gets)
    again = node.fetch(dest)
    assert again.returncode == 0, again.stderr
    assert summary_of(again)["noop"] and len(node.standin.blob_gets) == gets

    verified = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    assert verified.returncode == 0, verified.stderr
    shard = dest / "big.txt"
    shard.chmod(0o644)
    with open(shard, "r+b") as f:
        f.seek(1234)
        f.write(b"\x00" if BIG[1234] else b"\x01")
    assert_refused(node.cli("verify", str(dest), "--trust-root", str(node.root_file)), 13, "digest")
    (dest / "stray.txt").write_text("x")
    refused = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    assert_refused(refused, 13, "digest")
    assert "extra (stray.txt)" in refused.stderr


def test_fetch_fills_an_existing_empty_dest_from_the_cache(node):
    node.release()
    assert node.fetch(node.tmp / "first").returncode == 0
    gets = len(node.standin.blob_gets)
    mount = node.tmp / "mnt-models"
    mount.mkdir()
    ok = node.fetch(mount, "modelreg://acme/tiny@prod")
    assert ok.returncode == 0, ok.stderr
    assert len(node.standin.blob_gets) == gets and summary_of(ok)["cached_files"] == len(node.files)
    assert tree(mount) == tree(node.tmp / "first")
    assert not [p for p in mount.iterdir() if p.name.startswith(".modelreg-staging")]


def test_a_noop_fetch_of_an_intact_dest_rehashes_it_and_downloads_nothing(node):
    node.release()
    dest = node.tmp / "dest"
    assert node.fetch(dest).returncode == 0
    gets = len(node.standin.blob_gets)
    again = node.fetch(dest)
    assert again.returncode == 0 and summary_of(again)["noop"] and len(node.standin.blob_gets) == gets


@pytest.mark.seeded(builder=build_twin_world)
def test_two_files_with_the_same_bytes_come_from_one_download_and_each_is_hashed_cold_and_warm(node):
    node.release()
    for dest in (node.tmp / "cold", node.tmp / "warm"):
        ok = node.fetch(dest)
        assert ok.returncode == 0, ok.stderr
        assert (dest / "big.txt").read_bytes() == (dest / "copy" / "big-again.txt").read_bytes() == BIG
        assert (dest / "big.txt").stat().st_ino != (dest / "copy" / "big-again.txt").stat().st_ino
        assert summary_of(ok)["copies"] == len(node.files)
    sizes = {f["sha256"]: f["size"] for f in node.files}
    assert bytes_requested(node.standin.blob_gets, sizes)[big_file(node)["sha256"]] == len(BIG)


def _outside_dest(node) -> dict[str, bytes] | None:
    """What a fetch without a cache may not write: the old default cache under HOME, and --cache's directory."""
    return {"home": tree(node.tmp / "home"), "cache": tree(node.cache)}


@pytest.mark.parametrize("dest_kind", ["absent", "empty"])
def test_without_a_cache_fetch_writes_only_inside_dest_and_every_byte_is_hashed(node, dest_kind):
    node.release()
    node.use_cache = False
    (node.tmp / "home").mkdir()
    dest = node.tmp / "mnt-models"
    if dest_kind == "empty":
        dest.mkdir()  # KServe's emptyDir: a mount point, filled from inside
    ok = node.fetch(dest)
    assert ok.returncode == 0, ok.stderr
    summary = summary_of(ok)
    assert summary["downloaded_files"] == len(node.files) and summary["cached_files"] == 0
    for f in node.files:
        assert hashlib.sha256((dest / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    assert json.loads((dest / "model.sig").read_text()) == node.bundle
    assert sorted(p.name for p in dest.iterdir()) == sorted({".git", "model.sig", *(f["path"].split("/")[0]
                                                                                  for f in node.files)})
    assert _outside_dest(node) == {"home": {}, "cache": None}
    # Again: the DEST that holds the release is re-hashed, still with nothing written elsewhere.
    again = node.fetch(dest)
    assert again.returncode == 0 and summary_of(again)["noop"], again.stderr
    assert _outside_dest(node) == {"home": {}, "cache": None}
    assert node.cli("verify", str(dest), "--trust-root", str(node.root_file)).returncode == 0
