"""The node cache: two processes share one download, an interrupted download resumes, ``cache warm`` fills it
and ``cache verify`` removes a corrupted blob."""

from __future__ import annotations

import json

import pytest

from tests.support.fetch_node import (
    BIG,
    assert_refused,
    build_node_world,
    bytes_requested,
    summary_of,
    tree,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


def test_two_processes_fetching_one_model_into_one_cache_download_each_blob_once(node):
    node.release()
    sizes = {f["sha256"]: f["size"] for f in node.files}
    one, two = node.popen_fetch(node.tmp / "pod-a"), node.popen_fetch(node.tmp / "pod-b")
    for process in (one, two):
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
    requested = bytes_requested(node.standin.blob_gets, sizes)
    assert requested == {d: s for d, s in sizes.items() if s > 0}
    assert tree(node.tmp / "pod-a") == tree(node.tmp / "pod-b")


def test_an_interrupted_download_resumes_where_it_stopped(node):
    node.release()
    big = next(f for f in node.files if f["path"] == "big.txt")
    node.standin.cut_after = 100 * 1024
    assert_refused(node.fetch(node.tmp / "dest"), 16, "network")
    assert not (node.tmp / "dest").exists()
    partial = node.cache / "tenants" / "acme" / "partial" / big["sha256"]
    assert partial.exists() and partial.with_name(partial.name + ".parts.json").exists()
    first = len(node.standin.blob_gets)
    node.standin.cut_after = None
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "dest" / "big.txt").read_bytes() == BIG
    summary = summary_of(ok)
    assert summary["resumed_bytes"] > 0
    again = bytes_requested(node.standin.blob_gets[first:], {big["sha256"]: big["size"]})
    assert again[big["sha256"]] == big["size"] - summary["resumed_bytes"] < big["size"]
    assert not partial.exists()


def test_cache_warm_once_fills_the_cache_then_fetch_downloads_nothing(node):
    node.release()
    warm = node.cli("cache", "warm", "acme/tiny@prod", "--trust-root", str(node.root_file), "--once", "--json")
    assert warm.returncode == 0, warm.stderr
    gets = len(node.standin.blob_gets)
    assert gets > 0
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0 and len(node.standin.blob_gets) == gets
    assert summary_of(ok)["cached_files"] == len(node.files)


def test_cache_verify_finds_removes_and_reports_a_corrupted_blob(node):
    node.release()
    assert node.fetch(node.tmp / "dest").returncode == 0
    clean = node.cli("cache", "verify", "--cache", str(node.cache), "--json")
    assert clean.returncode == 0 and summary_of(clean)["bad"] == 0
    big = next(f for f in node.files if f["path"] == "big.txt")
    cached = node.cache / "tenants" / "acme" / "blobs" / "sha256" / big["sha256"][:2] / big["sha256"]
    cached.chmod(0o644)
    with open(cached, "r+b") as f:
        f.write(b"X")
    bad = node.cli("cache", "verify", "--cache", str(node.cache), "--json")
    assert_refused(bad, 13, "digest")
    assert big["sha256"][:16] in bad.stderr and not cached.exists()
    assert json.loads(bad.stdout.splitlines()[0])["digest"] == big["sha256"]
