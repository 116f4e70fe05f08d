"""The pure parts of the /hf view: listings, paging, paths-info, LFS rule and git blob ids.

The releases are built by hand (what ``resolve`` returns for an approved version), over a real local
blob store holding the plain files' bytes.
"""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from registry.domain.errors import InvalidInputError, ReleaseFileNotFoundError, SizeMismatchError
from registry.services import hf
from registry.storage.local import LocalBlobStore

FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
    "tokenizer/vocab.json": b"{}\n",
    "tokenizer/merges/a.txt": b"a b\n",
    "z.txt": b"",
}


@pytest.fixture
def store(tmp_path):
    store = LocalBlobStore(tmp_path / "blobs", b"secret")
    for data in FILES.values():
        store.put([data])
    return store


@pytest.fixture
def release():
    files = tuple(hf.RevisionFile(p, len(d), hashlib.sha256(d).hexdigest(), hf.is_lfs(p, len(d)))
                  for p, d in sorted(FILES.items()))
    return hf.ResolvedRevision("acme/llm", "prod", "c" * 40, 1, files, None, None)


def test_git_blob_sha1_is_what_git_computes(tmp_path):
    (tmp_path / "f").write_bytes(FILES["config.json"])
    git = subprocess.run(["git", "hash-object", str(tmp_path / "f")], capture_output=True, text=True, check=True)
    assert hf.git_blob_sha1(FILES["config.json"]) == git.stdout.strip()


def test_lfs_rule():
    assert hf.is_lfs("model.safetensors", 10) and hf.is_lfs("pytorch_model.BIN", 10)
    assert hf.is_lfs("notes.txt", hf.LFS_THRESHOLD) and not hf.is_lfs("notes.txt", hf.LFS_THRESHOLD - 1)


def test_describe_plain_and_lfs_files(release, store):
    config = hf.describe(release.file("config.json"), store)
    assert not config.lfs and config.etag == config.blob_id == hf.git_blob_sha1(FILES["config.json"])
    weights = hf.describe(release.file("model.safetensors"), store)
    sha256 = hashlib.sha256(FILES["model.safetensors"]).hexdigest()
    pointer = hf.lfs_pointer(sha256, len(FILES["model.safetensors"]))
    assert weights.lfs and weights.etag == sha256
    assert (weights.blob_id, weights.pointer_size) == (hf.git_blob_sha1(pointer), len(pointer))


def test_a_plain_file_whose_stored_size_differs_is_refused(release, store):
    wrong = hf.RevisionFile("x.json", 5, hashlib.sha256(b"{}\n").hexdigest(), False)
    with pytest.raises(SizeMismatchError):
        hf.describe(wrong, store)


def _paths(page):
    return [(e.type, e.path) for e in page.entries]


def test_tree_lists_direct_children_or_everything_below(release, store):
    top = hf.tree_page(release, "", recursive=False, cursor=0, page_size=100, blob_store=store)
    assert _paths(top) == [("file", "config.json"), ("file", "model.safetensors"), ("directory", "tokenizer"),
                           ("file", "z.txt")]
    under = hf.tree_page(release, "tokenizer/", recursive=True, cursor=0, page_size=100, blob_store=store)
    assert _paths(under) == [("directory", "tokenizer/merges"), ("file", "tokenizer/merges/a.txt"),
                             ("file", "tokenizer/vocab.json")]
    for missing in ("nope", "config.json", "tokenizer/vocab"):
        with pytest.raises(ReleaseFileNotFoundError) as raised:
            hf.tree_page(release, missing, recursive=False, cursor=0, page_size=100, blob_store=store)
        assert raised.value.details["commit"] == release.commit


def test_tree_pages_cover_the_listing_once(release, store):
    everything = hf.tree_page(release, "", recursive=True, cursor=0, page_size=100, blob_store=store)
    seen, cursor = [], 0
    while cursor is not None:
        page = hf.tree_page(release, "", recursive=True, cursor=cursor, page_size=2, blob_store=store)
        assert len(page.entries) <= 2
        seen += _paths(page)
        cursor = page.next_cursor
    assert seen == _paths(everything) and len(seen) == 7


def test_folder_oid_follows_the_files_below(release, store):
    oid = hf.paths_info(release, ["tokenizer"], store)[0].oid
    changed = release.files[:-2] + (hf.RevisionFile("tokenizer/vocab.json", 3, "0" * 64, False, "1" * 40),
                                    release.files[-1])
    other = hf.ResolvedRevision("acme/llm", "prod", "d" * 40, 2, changed, None, None)
    assert hf.paths_info(other, ["tokenizer"], store)[0].oid != oid


def test_paths_info_names_files_and_folders_and_leaves_out_the_rest(release, store):
    found = hf.paths_info(release, ["z.txt", "tokenizer/", "nope", "", "tokenizer/merges"], store)
    assert [(e.type, e.path, e.size) for e in found] == [
        ("file", "z.txt", 0), ("directory", "tokenizer", 0), ("directory", "tokenizer/merges", 0)]
    with pytest.raises(InvalidInputError):
        hf.paths_info(release, [f"f{i}" for i in range(hf.MAX_PATHS + 1)], store)
