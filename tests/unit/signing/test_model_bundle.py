"""OpenSSF model-signing statements and bundles, and checking a directory against them."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from registry.domain.errors import (
    IntegrityError,
    InvalidInputError,
    InvalidPathError,
    ManifestMismatchError,
    SignatureError,
)
from registry.domain.files import FileEntry
from registry.signing.bundle import (
    BUNDLE_MEDIA_TYPE,
    IN_TOTO_PAYLOAD_TYPE,
    build_model_statement,
    bundle_ignore_paths,
    sign_model_bundle,
    verify_model_bundle,
    verify_model_directory,
)
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope
from registry.signing.keys import SigningKey

FILES = {
    "weights.bin": b"\x00\x01\x02" * 50,
    "config.json": b'{"hidden_size": 4}',
    "tokenizer/vocab.json": b'{"a": 0}',
    "empty.txt": b"",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def model_dir(tmp_path) -> Path:
    root = tmp_path / "tiny-model"
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def _statement() -> dict:
    return build_model_statement("tiny-model", [(p, _sha(d)) for p, d in FILES.items()])


def _forge(statement: dict, key: SigningKey) -> dict:
    """A bundle over any statement, skipping sign_model_bundle's checks (what an attacker could hold)."""
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": key.key_id}, "tlogEntries": []},
        "dsseEnvelope": sign_envelope(canonical_json(statement), IN_TOTO_PAYLOAD_TYPE, key),
    }


# --- statement ------------------------------------------------------------------------------


def test_statement_lists_sorted_resources_and_the_root_digest():
    statement = _statement()
    names = [r["name"] for r in statement["predicate"]["resources"]]
    assert names == sorted(FILES)
    # Independent computation: sha256 over the raw digests, in path order.
    root = hashlib.sha256(b"".join(hashlib.sha256(FILES[p]).digest() for p in sorted(FILES))).hexdigest()
    assert statement["subject"] == [{"name": "tiny-model", "digest": {"sha256": root}}]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    assert statement["predicate"]["serialization"] == {
        "method": "files",
        "hash_type": "sha256",
        "allow_symlinks": False,
        "ignore_paths": ["model.sig", ".git", ".gitattributes", ".github", ".gitignore"],
    }
    empty = next(r for r in statement["predicate"]["resources"] if r["name"] == "empty.txt")
    assert empty == {"name": "empty.txt", "algorithm": "sha256", "digest": _sha(b"")}


def test_file_entries_and_pairs_give_the_same_bytes_in_any_order():
    entries = [FileEntry(p, len(d), _sha(d)) for p, d in reversed(list(FILES.items()))]
    assert canonical_json(build_model_statement("tiny-model", entries)) == canonical_json(_statement())


@pytest.mark.parametrize("bad", ["../x", "/abs", "a\\b", "a/../b", "./a", "a//b", ""])
def test_unclean_paths_are_refused(bad):
    with pytest.raises(InvalidPathError):
        build_model_statement("m", [(bad, "0" * 64)])


def test_duplicate_paths_and_bad_digests_are_refused():
    with pytest.raises(InvalidPathError):
        build_model_statement("m", [("a", "0" * 64), ("a", "1" * 64)])
    with pytest.raises(InvalidInputError):
        build_model_statement("m", [("a", "ABC")])
    with pytest.raises(InvalidInputError):
        build_model_statement("", [("a", "0" * 64)])


def test_ignored_paths_are_not_resources():
    statement = build_model_statement(
        "m",
        [("a", "0" * 64), (".gitattributes", "1" * 64), ("model.sig", "2" * 64), (".git/config", "3" * 64)],
    )
    assert [r["name"] for r in statement["predicate"]["resources"]] == ["a"]
    # A name that merely starts like an ignored one is a real file.
    statement = build_model_statement("m", [(".gitattributes.bak", "0" * 64), ("model.sig.txt", "1" * 64)])
    assert len(statement["predicate"]["resources"]) == 2


def test_extra_predicate_fields_are_kept_but_cannot_replace_reserved_ones():
    statement = build_model_statement("m", [("a", "0" * 64)], {"modelreg": {"revision": "abc"}})
    assert statement["predicate"]["modelreg"] == {"revision": "abc"}
    with pytest.raises(InvalidInputError):
        build_model_statement("m", [("a", "0" * 64)], {"resources": []})


# --- bundle ---------------------------------------------------------------------------------


def test_bundle_shape_and_round_trip(key):
    statement = _statement()
    bundle = sign_model_bundle(statement, key)
    assert set(bundle) == {"mediaType", "verificationMaterial", "dsseEnvelope"}
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert bundle["verificationMaterial"] == {"publicKey": {"hint": key.key_id}, "tlogEntries": []}
    assert bundle["dsseEnvelope"]["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(bundle["dsseEnvelope"]["payload"]) == canonical_json(statement)
    # A bundle survives the trip through a file.
    assert verify_model_bundle(json.loads(json.dumps(bundle)), key.public_key) == statement


def test_bundle_from_another_key_is_refused(key):
    other = SigningKey.generate()
    bundle = sign_model_bundle(_statement(), other)
    with pytest.raises(SignatureError) as err:
        verify_model_bundle(bundle, key.public_key)
    assert err.value.details["reason"] == "key-hint"
    # Claiming our key in the hint does not make the signature ours.
    bundle["verificationMaterial"]["publicKey"]["hint"] = key.key_id
    with pytest.raises(SignatureError):
        verify_model_bundle(bundle, key.public_key)


def test_tampered_statement_is_refused(key):
    bundle = sign_model_bundle(_statement(), key)
    statement = _statement()
    statement["predicate"]["resources"][0]["digest"] = "f" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(canonical_json(statement)).decode()
    with pytest.raises(SignatureError):
        verify_model_bundle(bundle, key.public_key)


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(
            lambda b: b.update(mediaType="application/vnd.dev.sigstore.bundle+json;version=0.2"), id="media"
        ),
        pytest.param(lambda b: b.update(messageSignature={}), id="extra-field"),
        pytest.param(lambda b: b["verificationMaterial"].pop("publicKey"), id="no-hint"),
        pytest.param(lambda b: b.pop("dsseEnvelope"), id="no-envelope"),
        pytest.param(
            lambda b: b["dsseEnvelope"]["signatures"].append(dict(b["dsseEnvelope"]["signatures"][0])),
            id="two-signatures",
        ),
        pytest.param(lambda b: b["dsseEnvelope"].update(payloadType="application/json"), id="payload-type"),
    ],
)
def test_malformed_bundles_are_refused(key, mutate):
    bundle = sign_model_bundle(_statement(), key)
    mutate(bundle)
    with pytest.raises(SignatureError):
        verify_model_bundle(bundle, key.public_key)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        pytest.param(lambda s: s["subject"][0]["digest"].update(sha256="0" * 64), "root digest", id="root"),
        pytest.param(lambda s: s["predicate"]["resources"].reverse(), "root digest", id="reordered"),
        pytest.param(
            lambda s: s.update(predicateType="https://model_signing/Digests/v0.1"),
            "predicateType",
            id="predicate-type",
        ),
        pytest.param(
            lambda s: s["predicate"]["serialization"].update(method="shards"), "serialization", id="shards"
        ),
        pytest.param(
            lambda s: s["predicate"]["serialization"].update(allow_symlinks=True),
            "serialization",
            id="symlinks",
        ),
        pytest.param(
            lambda s: s["predicate"]["resources"][0].update(name="../secret.txt"),
            "../secret.txt",
            id="escaping-path",
        ),
        pytest.param(
            lambda s: s["predicate"]["resources"][0].update(algorithm="blake2b"), "sha256", id="blake2"
        ),
    ],
)
def test_signed_but_invalid_statements_are_refused(key, mutate, fragment):
    statement = _statement()
    mutate(statement)
    with pytest.raises(SignatureError, match="statement is invalid") as err:
        verify_model_bundle(_forge(statement, key), key.public_key)
    assert fragment in str(err.value)
    # And the registry refuses to sign such a statement in the first place.
    with pytest.raises(SignatureError):
        sign_model_bundle(statement, key)


# --- directory ------------------------------------------------------------------------------


def test_directory_that_matches_verifies(model_dir, key):
    bundle = sign_model_bundle(_statement(), key)
    (model_dir / "model.sig").write_text(json.dumps(bundle))
    (model_dir / ".git").mkdir()
    (model_dir / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (model_dir / ".gitattributes").write_text("*.bin filter=lfs\n")
    assert verify_model_directory(model_dir, bundle, key.public_key)["subject"][0]["name"] == "tiny-model"


def test_every_difference_is_reported_per_file(model_dir, key):
    bundle = sign_model_bundle(_statement(), key)
    (model_dir / "config.json").unlink()
    (model_dir / "tokenizer" / "merges.txt").write_bytes(b"")  # an extra empty file counts
    (model_dir / "new").mkdir()
    (model_dir / "new" / "x.bin").write_bytes(b"x")
    data = bytearray(FILES["weights.bin"])
    data[10] ^= 0x01
    (model_dir / "weights.bin").write_bytes(bytes(data))
    (model_dir / "empty.txt").write_bytes(b"\n")

    with pytest.raises(ManifestMismatchError) as err:
        verify_model_directory(model_dir, bundle, key.public_key)
    e = err.value
    assert isinstance(e, IntegrityError)
    assert e.missing == ["config.json"]
    assert e.extra == ["new/x.bin", "tokenizer/merges.txt"]
    assert e.mismatched == [
        {"path": "empty.txt", "expected": _sha(b""), "actual": _sha(b"\n")},
        {"path": "weights.bin", "expected": _sha(FILES["weights.bin"]), "actual": _sha(bytes(data))},
    ]
    assert e.not_regular == []
    assert e.details["missing"] == ["config.json"]


def test_symlinks_are_refused_even_to_identical_content(model_dir, key):
    bundle = sign_model_bundle(_statement(), key)
    real = model_dir.parent / "outside.json"
    real.write_bytes(FILES["config.json"])
    (model_dir / "config.json").unlink()
    os.symlink(real, model_dir / "config.json")
    os.symlink(model_dir.parent, model_dir / "escape")
    with pytest.raises(ManifestMismatchError) as err:
        verify_model_directory(model_dir, bundle, key.public_key)
    assert err.value.not_regular == ["config.json", "escape"]
    assert err.value.missing == ["config.json"]


def test_directory_check_starts_with_the_signature(model_dir, key):
    bundle = sign_model_bundle(_statement(), SigningKey.generate())
    with pytest.raises(SignatureError):
        verify_model_directory(model_dir, bundle, key.public_key)


def test_extra_ignore_paths_are_in_the_statement_and_may_not_hide_a_listed_file():
    key = SigningKey.generate()
    statement = build_model_statement("tiny", [("config.json", "ab" * 32)], extra_ignore_paths=("modelreg-unit.json",))
    assert statement["predicate"]["serialization"]["ignore_paths"][-1] == "modelreg-unit.json"
    assert bundle_ignore_paths(sign_model_bundle(statement, key))[-1] == "modelreg-unit.json"
    assert bundle_ignore_paths({"dsseEnvelope": {"payload": "not base64 json"}}) == ()
    with pytest.raises(InvalidInputError, match="would ignore"):
        build_model_statement("tiny", [("modelreg-unit.json", "ab" * 32)], extra_ignore_paths=("modelreg-unit.json",))
