"""HuggingFaceSource against the loopback HF-compatible upstream, through the real huggingface_hub client."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
from pathlib import Path

import pytest
from huggingface_hub import HfApi, snapshot_download

from registry.domain.errors import (
    DigestMismatchError,
    EntryNotFoundError,
    InvalidInputError,
    InvalidPathError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamError,
)
from registry.sources import open_source
from registry.sources.huggingface import HuggingFaceSource
from tests.support.hf_upstream import HfUpstream, git_blob_sha1
from tests.support.tiny_model import tiny_model_files

REPO = "acme/tiny-llama"
SHARD = "model-00001-of-00002.safetensors"


@pytest.fixture
def hub():
    with HfUpstream(page_size=1000) as upstream:
        yield upstream


@pytest.fixture
def model(hub: HfUpstream) -> dict[str, bytes]:
    hub.add_repo(REPO, card_data={"license": "apache-2.0"})
    files = tiny_model_files(seed=0)
    files["nested/dir/notes.txt"] = b"nested file\n"
    hub.commit(REPO, files)
    return files


def source(hub: HfUpstream, repo: str = REPO, **kwargs) -> HuggingFaceSource:
    return HuggingFaceSource(repo, endpoint=hub.url, timeout=5, **kwargs)


def read_all(src: HuggingFaceSource, revision: str, f) -> bytes:  # noqa: ANN001
    return b"".join(src.open(revision, f))


# --- the upstream itself, checked with the real client -------------------------------------------


def test_real_client_downloads_and_verifies_a_snapshot_from_the_upstream(hub, model, tmp_path):
    path = snapshot_download(REPO, revision="main", endpoint=hub.url, cache_dir=tmp_path)
    for name, data in model.items():
        assert (Path(path) / name).read_bytes() == data

    api = HfApi(endpoint=hub.url, token=False)
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == hub.head(REPO)
    siblings = {s.rfilename: s for s in info.siblings}
    assert siblings[SHARD].lfs.sha256 == hashlib.sha256(model[SHARD]).hexdigest()
    assert siblings["config.json"].lfs is None
    assert siblings["config.json"].blob_id == git_blob_sha1(model["config.json"])
    verification = api.verify_repo_checksums(REPO, revision=info.sha, cache_dir=tmp_path)
    assert verification.mismatches == [] and verification.checked_count == len(model) + 1


def test_real_client_follows_tree_pages(model, hub):
    hub.page_size = 2
    api = HfApi(endpoint=hub.url, token=False)
    listed = {e.path for e in api.list_repo_tree(REPO, revision="main", recursive=True) if hasattr(e, "lfs")}
    assert listed == set(model) | {".gitattributes"}
    pages = [r for r in hub.requests if "/tree/" in r.path]
    assert len(pages) > 3 and any("cursor=" in r.path for r in pages)


# --- resolve ---------------------------------------------------------------------------------------


def test_resolve_pins_a_branch_to_its_commit_and_publishes_digests(hub, model):
    snapshot = source(hub).resolve("main")

    assert snapshot.source_kind == "hf" and snapshot.repo == REPO
    assert snapshot.requested_revision == "main"
    assert snapshot.revision == hub.head(REPO) and len(snapshot.revision) == 40
    assert snapshot.license == "apache-2.0"
    # The card's license fields as found (normalized later), and the repository is not gated.
    assert snapshot.card == {"license": "apache-2.0", "license_name": None, "license_link": None, "gated": False}
    files = {f.path: f for f in snapshot.files}
    assert set(files) == set(model) | {".gitattributes"}
    for path, data in model.items():
        assert files[path].size == len(data)
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        assert files[shard].sha256 == hashlib.sha256(model[shard]).hexdigest()
        assert files[shard].git_sha1 is None
    assert files["config.json"].sha256 is None
    assert files["config.json"].git_sha1 == git_blob_sha1(model["config.json"])
    assert [f.path for f in snapshot.files] == sorted(files)


def test_resolve_follows_a_moving_branch_and_old_commits_stay_readable(hub, model):
    src = source(hub)
    first = src.resolve("main")
    second_sha = hub.commit(REPO, {"config.json": b'{"changed": true}\n'})
    second = src.resolve("main")

    assert first.revision != second.revision == second_sha
    old = next(f for f in first.files if f.path == "config.json")
    new = next(f for f in second.files if f.path == "config.json")
    assert read_all(src, first.revision, old) == model["config.json"]
    assert read_all(src, second.revision, new) == b'{"changed": true}\n'


def test_resolve_tag_commit_and_default_branch(hub, model):
    first = hub.head(REPO)
    hub.tag(REPO, "v1.0", first)
    hub.commit(REPO, {"README.md": b"# later\n"})
    src = source(hub)

    tagged = src.resolve("v1.0")
    assert tagged.revision == first and tagged.requested_revision == "v1.0"
    assert "README.md" not in {f.path for f in tagged.files}
    assert src.resolve(first).revision == first
    default = src.resolve(None)
    assert default.revision == hub.head(REPO) != first and default.requested_revision is None


def test_resolve_unknown_repo_and_revision(hub, model):
    with pytest.raises(RepoNotFoundError) as repo_error:
        source(hub, "acme/no-such-model").resolve("main")
    assert repo_error.value.details["repo"] == "acme/no-such-model"
    with pytest.raises(RevisionNotFoundError) as rev_error:
        source(hub).resolve("no-such-branch")
    assert rev_error.value.details == {"repo": REPO, "revision": "no-such-branch"}
    with pytest.raises(RevisionNotFoundError):
        source(hub).resolve("0" * 40)


def test_private_repo_needs_the_token_which_never_reaches_another_host(tmp_path):
    with HfUpstream(token="hf_secret", lfs_redirect="other-host") as hub:
        hub.add_repo("acme/private", private=True)
        files = tiny_model_files(seed=3)
        hub.commit("acme/private", files)

        with pytest.raises(RepoNotFoundError):
            source(hub, "acme/private").resolve("main")
        hub.requests.clear()
        src = source(hub, "acme/private", token="hf_secret")
        snapshot = src.resolve("main")
        for f in snapshot.files:
            if f.path in files:
                assert read_all(src, snapshot.revision, f) == files[f.path]

        cdn = [r for r in hub.requests if r.server == "cdn"]
        assert len(cdn) == 2  # the two LFS shards went through the other origin
        assert all(r.authorization is None for r in cdn)
        assert all(r.authorization == "Bearer hf_secret" for r in hub.requests if r.server == "hub")


def test_upstream_errors_are_upstream_errors(hub, model):
    src = source(hub)
    snapshot = src.resolve("main")
    hub.fail(500)
    with pytest.raises(UpstreamError) as failed:
        src.resolve("main")
    assert failed.value.details["status"] == 500 and failed.value.details["retryable"] is True
    with pytest.raises(UpstreamError):
        read_all(src, snapshot.revision, snapshot.files[0])

    hub.heal()
    hub.unreachable()
    with pytest.raises(UpstreamError) as dropped:
        src.resolve("main")
    assert dropped.value.details["retryable"] is True
    assert dropped.value.__cause__ is not None


def test_nothing_listening_is_an_upstream_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The socket is closed: connections to the port are refused.
    with pytest.raises(UpstreamError):
        HuggingFaceSource(REPO, endpoint=f"http://127.0.0.1:{port}", timeout=2).resolve("main")


def test_path_traversal_listing_fails_resolve_even_when_filtered_out(hub):
    hub.add_path_traversal_repo("attacker/path-traversal")
    for include in ((), ("config.json",)):
        with pytest.raises(InvalidPathError) as error:
            source(hub, "attacker/path-traversal", include=include).resolve("main")
        assert error.value.details["path"] == "../evil.txt"


def test_resolve_follows_tree_pages(hub, model):
    hub.page_size = 3
    snapshot = source(hub).resolve("main")
    assert {f.path for f in snapshot.files} == set(model) | {".gitattributes"}
    assert sum(1 for r in hub.requests if "/tree/" in r.path) == -(-(len(model) + 3) // 3)  # files + 2 dirs


def test_include_and_exclude(hub, model):
    snapshot = source(hub, include=["*.safetensors", "*.json"], exclude=["tokenizer*"]).resolve("main")
    assert {f.path for f in snapshot.files} == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "config.json",
        "generation_config.json",
    }
    nested = source(hub, include=["nested/**"]).resolve("main")
    assert [f.path for f in nested.files] == ["nested/dir/notes.txt"]


# --- open ------------------------------------------------------------------------------------------


def test_open_streams_every_file_by_commit_in_chunks(hub, model):
    src = source(hub, chunk_size=4096)
    snapshot = src.resolve("main")
    for f in snapshot.files:
        chunks = list(src.open(snapshot.revision, f))
        assert all(len(c) <= 4096 for c in chunks)
        if f.path in model:
            assert b"".join(chunks) == model[f.path]
    downloads = [r for r in hub.requests if "/resolve/" in r.path]
    assert len(downloads) == len(snapshot.files)
    assert all(f"/resolve/{snapshot.revision}/" in r.path for r in downloads)


@pytest.mark.parametrize("mode", ["same-host", "other-host"])
def test_open_follows_redirects(mode):
    with HfUpstream(lfs_redirect=mode) as hub:
        hub.add_repo(REPO)
        files = tiny_model_files(seed=1)
        hub.commit(REPO, files)
        src = source(hub)
        snapshot = src.resolve("main")
        shard = next(f for f in snapshot.files if f.path == SHARD)
        assert read_all(src, snapshot.revision, shard) == files[SHARD]
        assert any(r.path.startswith("/cdn/") for r in hub.requests)


def test_corrupted_plain_file_fails_its_git_sha1_at_the_end(hub, model):
    src = source(hub, chunk_size=64)
    snapshot = src.resolve("main")
    config = next(f for f in snapshot.files if f.path == "tokenizer.json")
    hub.corrupt(REPO, "tokenizer.json", at_commit=snapshot.revision)

    received = bytearray()
    with pytest.raises(DigestMismatchError) as error:
        for chunk in src.open(snapshot.revision, config):
            received += chunk
    # Every byte was handed over before the stream failed: the blob store aborts at that point.
    assert len(received) == config.size and bytes(received) != model["tokenizer.json"]
    assert error.value.details["algorithm"] == "git-sha1"
    assert error.value.details["expected"] == config.git_sha1 == git_blob_sha1(model["tokenizer.json"])
    assert error.value.details["actual"] == git_blob_sha1(bytes(received))


def test_corrupted_lfs_file_streams_but_differs_from_its_published_sha256(hub, model):
    src = source(hub)
    snapshot = src.resolve("main")
    shard = next(f for f in snapshot.files if f.path == SHARD)
    hub.corrupt(REPO, SHARD)

    data = read_all(src, snapshot.revision, shard)  # the source leaves the sha256 to the blob store
    assert len(data) == shard.size
    assert shard.sha256 == hashlib.sha256(model[SHARD]).hexdigest()
    assert hashlib.sha256(data).hexdigest() != shard.sha256


def test_size_differing_from_the_listing_fails(hub, model):
    src = source(hub)
    snapshot = src.resolve("main")
    config = next(f for f in snapshot.files if f.path == "config.json")
    with pytest.raises(SizeMismatchError) as longer:
        read_all(src, snapshot.revision, dataclasses.replace(config, size=config.size + 10))
    assert longer.value.details == {"path": "config.json", "expected": config.size + 10, "actual": config.size}
    with pytest.raises(SizeMismatchError):
        read_all(src, snapshot.revision, dataclasses.replace(config, size=config.size - 1))


def test_broken_connection_resumes_with_range(hub, model):
    src = source(hub, chunk_size=1024)
    snapshot = src.resolve("main")
    shard = next(f for f in snapshot.files if f.path == SHARD)
    hub.drop_after(REPO, SHARD, nbytes=5000, times=2)

    assert read_all(src, snapshot.revision, shard) == model[SHARD]
    ranges = [r.range for r in hub.requests if r.path.endswith(SHARD)]
    # Each attempt resumes where the bytes handed over so far end (a partial chunk is fetched again).
    assert ranges[0] is None and len(ranges) == 3
    offsets = [int(r.removeprefix("bytes=").removesuffix("-")) for r in ranges[1:]]
    assert 0 < offsets[0] <= 5000 < offsets[1] <= offsets[0] + 5000


def test_open_refuses_a_branch_and_reports_a_missing_file(hub, model):
    src = source(hub)
    snapshot = src.resolve("main")
    with pytest.raises(InvalidInputError):
        src.open("main", snapshot.files[0])
    ghost = dataclasses.replace(snapshot.files[0], path="ghost.json")
    with pytest.raises(EntryNotFoundError) as error:
        read_all(src, snapshot.revision, ghost)
    assert error.value.details["path"] == "ghost.json"


def test_open_source_builds_an_hf_source(hub, model):
    src = open_source(f"hf://{REPO}", hf_endpoint=hub.url, include=["config.json"])
    assert isinstance(src, HuggingFaceSource)
    assert [f.path for f in src.resolve("main").files] == ["config.json"]
    with pytest.raises(InvalidInputError):
        open_source(f"hf://{REPO}")
