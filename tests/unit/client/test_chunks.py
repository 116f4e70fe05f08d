"""A node's chunk checks (registry/node/chunks.py) from a release signed as the registry signs it:
the chunk list against the signed root, each chunk against the list; a flipped byte is refused."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import os

import pytest

from registry.domain.chunks import ChunkHasher
from registry.domain.errors import (
    ChunkMismatchError,
    ChunksNotRecordedError,
    InvalidInputError,
    SignatureError,
    SizeMismatchError,
)
from registry.node.chunks import load_chunk_list, verify_chunk
from registry.signing.keys import SigningKey
from registry.signing.release import release_payload, sign_release, verify_release
from registry.signing.trust_root import parse_root, root_document, sign_root

NOW = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
KEY = SigningKey.generate()
ROOT = parse_root(sign_root(root_document(1, [KEY.public_key], 1, NOW + dt.timedelta(days=30)), [KEY]))
SIZE = 1024
DATA = {"model.safetensors": os.urandom(3 * SIZE + 100), "config.json": b"{}", "empty": b""}


def _lists() -> dict[str, bytes]:
    out = {}
    for path, data in DATA.items():
        hasher = ChunkHasher(SIZE)
        hasher.update(data)
        out[path] = hasher.finish().digests
    return out


LISTS = _lists()


def _payload(chunks: bool = True):
    payload = release_payload(
        model="acme/tiny", ref="prod", tenant="acme", version=1,
        source={"kind": "hf", "repo": "org/tiny", "revision": "a" * 40},
        files=[{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in DATA.items()],
        license="mit", facts=None, statement_digest="c" * 64, approval_digest="d" * 64, serial=1,
        issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=5),
        chunks={p: {"chunk_size": SIZE, "root": hashlib.sha256(raw).hexdigest()} for p, raw in LISTS.items()}
        if chunks else None)
    return payload


def _release(payload):
    return verify_release(sign_release(payload, [KEY]), ROOT, now=NOW, model="acme/tiny", ref="prod")


def _entry(path: str, payload=None):
    return next(f for f in _release(payload or _payload()).files if f.path == path)


def test_every_chunk_of_every_file_verifies_against_the_signed_release() -> None:
    for path, data in DATA.items():
        chunked = load_chunk_list(_entry(path), LISTS[path])
        assert chunked.count == -(-len(data) // SIZE)
        for index in range(chunked.count):
            start, end = chunked.span(index)
            verify_chunk(chunked, index, data[start:end])


def test_a_flipped_byte_in_any_chunk_is_refused_naming_the_file_and_chunk() -> None:
    path, data = "model.safetensors", DATA["model.safetensors"]
    chunked = load_chunk_list(_entry(path), LISTS[path])
    for index in range(chunked.count):
        start, end = chunked.span(index)
        flipped = bytearray(data[start:end])
        flipped[-1] ^= 1
        with pytest.raises(ChunkMismatchError) as caught:
            verify_chunk(chunked, index, bytes(flipped))
        assert (caught.value.details["path"], caught.value.details["chunk"]) == (path, index)


def test_a_chunk_of_the_wrong_length_is_refused_the_last_one_included() -> None:
    path, data = "model.safetensors", DATA["model.safetensors"]
    chunked = load_chunk_list(_entry(path), LISTS[path])
    last = chunked.count - 1
    assert chunked.span(last) == (3 * SIZE, 3 * SIZE + 100)
    with pytest.raises(SizeMismatchError):
        verify_chunk(chunked, last, data[3 * SIZE:] + b"\0")  # padded to nothing the release signs
    with pytest.raises(SizeMismatchError):
        verify_chunk(chunked, 0, data[:SIZE - 1])
    for index in (-1, chunked.count):
        with pytest.raises(InvalidInputError):
            verify_chunk(chunked, index, b"")


def test_a_chunk_list_other_than_the_signed_one_is_refused() -> None:
    path, raw = "model.safetensors", LISTS["model.safetensors"]
    entry = _entry(path)
    forged = bytearray(raw)
    forged[5] ^= 1
    for bad in (bytes(forged), raw[:-32], raw + raw[-32:], b""):
        with pytest.raises(ChunkMismatchError):
            load_chunk_list(entry, bad)
    # Another file's list, of the right length for that file, is not this one's.
    with pytest.raises(ChunkMismatchError):
        load_chunk_list(_entry("config.json"), LISTS["empty"])


def test_the_signature_covers_the_chunk_roots() -> None:
    """A root swapped after signing breaks the signature: the node never sees a forged root."""
    envelope = sign_release(_payload(), [KEY])
    doc = json.loads(base64.b64decode(envelope["payload"]))
    forged = hashlib.sha256(b"forged list").hexdigest()
    doc["chunks"]["model.safetensors"]["root"] = forged
    tampered = {**envelope, "payload": base64.b64encode(json.dumps(doc).encode()).decode()}
    with pytest.raises(SignatureError):
        verify_release(tampered, ROOT, now=NOW, model="acme/tiny", ref="prod")


def test_a_release_without_chunks_verifies_as_before_and_streams_nothing() -> None:
    entry = _entry("model.safetensors", _payload(chunks=False))
    assert (entry.chunk_size, entry.chunk_root) == (None, None)
    with pytest.raises(ChunksNotRecordedError):
        load_chunk_list(entry, LISTS["model.safetensors"])
    # Old releases and new ones list the same files: a directory fetched before holds the new one's files.
    assert _release(_payload(chunks=False)).payload["files"] == _release(_payload()).payload["files"]


def test_a_release_whose_chunk_map_is_not_one_of_its_files_is_malformed() -> None:
    good = _payload()["chunks"]["config.json"]
    for chunks in ([], {"other.bin": good}, {"config.json": {"chunk_size": 1000, "root": good["root"]}},
                   {"config.json": {"chunk_size": SIZE, "root": "x" * 64}}, {"config.json": "root"}):
        payload = _payload()
        payload["chunks"] = chunks
        with pytest.raises(SignatureError):
            _release(payload)


def test_a_file_the_map_leaves_out_has_no_chunks_and_the_others_keep_theirs() -> None:
    payload = _payload()
    del payload["chunks"]["config.json"]
    release = _release(payload)
    files = {f.path: f for f in release.files}
    assert files["config.json"].chunk_root is None
    assert files["model.safetensors"].chunk_root == hashlib.sha256(LISTS["model.safetensors"]).hexdigest()
    assert dataclasses.replace(files["config.json"], chunk_size=None) == files["config.json"]
