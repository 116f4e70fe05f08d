"""LocalDirectorySource on the real filesystem."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from registry.domain.errors import (
    InvalidPathError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamChangedError,
)
from registry.sources import open_source
from registry.sources.local import LocalDirectorySource
from tests.support.tiny_model import tiny_model_files


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


@pytest.fixture
def model(tmp_path) -> tuple[Path, dict[str, bytes]]:
    files = tiny_model_files(seed=5)
    files["nested/deeper/notes.txt"] = b"notes\n"
    return write_tree(tmp_path / "model", files), files


def test_resolve_lists_and_hashes_every_file(model):
    root, files = model
    snapshot = LocalDirectorySource(root).resolve(None)

    assert snapshot.source_kind == "local" and snapshot.repo == str(root)
    assert snapshot.requested_revision is None and len(snapshot.revision) == 64
    assert [f.path for f in snapshot.files] == sorted(files)
    for f in snapshot.files:
        assert f.size == len(files[f.path])
        assert f.sha256 == hashlib.sha256(files[f.path]).hexdigest()
        assert f.git_sha1 is None


def test_revision_is_stable_follows_contents_and_not_location(model, tmp_path):
    root, files = model
    first = LocalDirectorySource(root).resolve(None)
    assert LocalDirectorySource(root).resolve(None).revision == first.revision
    assert LocalDirectorySource(root).resolve(first.revision).revision == first.revision
    copy = shutil.copytree(root, tmp_path / "elsewhere")
    assert LocalDirectorySource(copy).resolve(None).revision == first.revision

    # Same size, one byte different.
    data = bytearray(files["config.json"])
    data[10] ^= 0x20
    (root / "config.json").write_bytes(bytes(data))
    second = LocalDirectorySource(root).resolve(None)
    assert second.revision != first.revision
    with pytest.raises(RevisionNotFoundError):
        LocalDirectorySource(root).resolve(first.revision)


def test_excluded_files_do_not_count(model):
    root, _ = model
    src = LocalDirectorySource(root, include=["*.json"], exclude=["tokenizer*"])
    snapshot = src.resolve(None)
    assert {f.path for f in snapshot.files} == {
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
    }
    (root / "nested/deeper/notes.txt").write_bytes(b"rewritten")
    assert src.resolve(None).revision == snapshot.revision


@pytest.mark.parametrize("where", ["file", "directory", "excluded file"])
def test_symlink_anywhere_is_refused(model, tmp_path, where):
    root, _ = model
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key.pem").write_bytes(b"private")
    if where == "file":
        os.symlink(outside / "key.pem", root / "nested" / "key.pem")
        expected = "nested/key.pem"
    elif where == "directory":
        os.symlink(outside, root / "linked")
        expected = "linked"
    else:
        os.symlink(outside / "key.pem", root / "key.txt")
        expected = "key.txt"
    with pytest.raises(InvalidPathError) as error:
        LocalDirectorySource(root, include=["*.json"]).resolve(None)
    assert error.value.details == {"path": expected, "reason": "symbolic link"}


def test_special_files_and_non_utf8_names_are_refused(model):
    root, _ = model
    os.mkfifo(root / "pipe")
    with pytest.raises(InvalidPathError) as fifo:
        LocalDirectorySource(root).resolve(None)
    assert fifo.value.details["path"] == "pipe"
    (root / "pipe").unlink()

    with open(os.path.join(os.fsencode(root), b"bad\xff.txt"), "wb") as f:
        f.write(b"x")
    with pytest.raises(InvalidPathError) as name:
        LocalDirectorySource(root).resolve(None)
    assert name.value.details["reason"] == "not UTF-8"


def test_open_streams_the_bytes(model):
    root, files = model
    src = LocalDirectorySource(root, chunk_size=1000)
    snapshot = src.resolve(None)
    for f in snapshot.files:
        chunks = list(src.open(snapshot.revision, f))
        assert all(len(c) <= 1000 for c in chunks)
        assert b"".join(chunks) == files[f.path]


def test_open_refuses_what_changed_since_resolve(model, tmp_path):
    root, files = model
    src = LocalDirectorySource(root)
    snapshot = src.resolve(None)
    by_path = {f.path: f for f in snapshot.files}

    (root / "config.json").unlink()
    (tmp_path / "other.json").write_bytes(files["config.json"])
    os.symlink(tmp_path / "other.json", root / "config.json")
    with pytest.raises(InvalidPathError):
        b"".join(src.open(snapshot.revision, by_path["config.json"]))

    shutil.rmtree(root / "nested" / "deeper")
    os.symlink(tmp_path, root / "nested" / "deeper")
    with pytest.raises(InvalidPathError):
        b"".join(src.open(snapshot.revision, by_path["nested/deeper/notes.txt"]))

    (root / "tokenizer.json").unlink()
    with pytest.raises(UpstreamChangedError):
        b"".join(src.open(snapshot.revision, by_path["tokenizer.json"]))

    with open(root / "generation_config.json", "ab") as f:
        f.write(b"more")
    with pytest.raises(SizeMismatchError):
        b"".join(src.open(snapshot.revision, by_path["generation_config.json"]))
    with pytest.raises(InvalidPathError):
        src.open(snapshot.revision, dataclasses.replace(by_path["config.json"], path="../model/config.json"))


def test_missing_directory_is_repo_not_found(tmp_path):
    with pytest.raises(RepoNotFoundError):
        LocalDirectorySource(tmp_path / "nope").resolve(None)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(RepoNotFoundError):
        LocalDirectorySource(tmp_path / "file").resolve(None)


def test_open_source_builds_a_local_source(model):
    root, _ = model
    for uri in (root.as_uri(), str(root)):
        src = open_source(uri, include=["config.json"])
        assert isinstance(src, LocalDirectorySource)
        assert [f.path for f in src.resolve(None).files] == ["config.json"]
