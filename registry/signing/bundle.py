"""OpenSSF model-signing bundles: the version manifest that ``model_signing verify key`` accepts.

A version's files and their sha256 become an in-toto Statement (``build_model_statement``), signed in
a DSSE envelope inside a Sigstore bundle with no transparency log (``sign_model_bundle``); the bundle
is written as ``model.sig``. docs/signing.md describes the format; the statement's bytes are
canonical JSON, so the same files always give the same payload. Verification checks the bundle and
returns the statement (``verify_model_bundle``), or re-hashes a directory against it
(``verify_model_directory``) and reports every missing, extra and changed file, unlike
model_signing's bare ``ValueError``.

Example:
    >>> from registry.signing.keys import SigningKey
    >>> key = SigningKey.generate()
    >>> statement = build_model_statement("tiny", [("config.json", "ab" * 32)])
    >>> bundle = sign_model_bundle(statement, key)
    >>> verify_model_bundle(bundle, key.public_key)["subject"][0]["name"]
    'tiny'
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from registry.domain.errors import InvalidInputError, InvalidPathError, ManifestMismatchError, SignatureError
from registry.domain.files import FileEntry, is_sha256, validate_file_list, validate_path
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope, verify_envelope
from registry.signing.keys import SigningKey, VerifyingKey

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
SIGNATURE_FILE_NAME = "model.sig"
# What model_signing leaves out of a model by default (its signature file and git metadata); the
# CLI skips these on verification whatever the statement says, so they must never be resources.
IGNORE_PATHS: tuple[str, ...] = ("model.sig", ".git", ".gitattributes", ".github", ".gitignore")
_CHUNK = 1024 * 1024


def is_ignored(path: str, ignore_paths: Sequence[str] = IGNORE_PATHS) -> bool:
    """Whether ``path`` is, or lies under, one of ``ignore_paths`` (all relative to the model root).

    Args:
        path: A clean relative POSIX path.
        ignore_paths: Relative paths of ignored files or directories.
    """
    return any(path == ignored or path.startswith(ignored + "/") for ignored in ignore_paths)


def _root_digest(hex_digests: Sequence[str]) -> str:
    hasher = hashlib.sha256()
    for digest in hex_digests:
        hasher.update(bytes.fromhex(digest))
    return hasher.hexdigest()


def build_model_statement(
    model_name: str,
    files: Sequence[FileEntry] | Sequence[tuple[str, str]],
    extra_predicate: Mapping[str, Any] | None = None,
    extra_ignore_paths: Sequence[str] = (),
) -> dict[str, Any]:
    """Build the in-toto statement of a model's files, in the OpenSSF model-signing v1.0 format.

    Files under :data:`IGNORE_PATHS` (``.gitattributes``, which almost every Hugging Face repository
    has, or a ``model.sig``) are left out: ``model_signing verify`` never hashes them, so listing one
    would make every verification fail as "missing". The release manifest still covers them.

    Args:
        model_name: The subject name (model_signing uses the directory name; it is informative).
        files: ``FileEntry`` objects or ``(path, sha256 hex)`` pairs, in any order. Empty files are
            listed like any other.
        extra_predicate: modelreg's own predicate fields (revision, registry); model_signing 1.x
            ignores fields it does not know. May not replace ``resources`` or ``serialization``.
        extra_ignore_paths: Paths ``model_signing verify`` skips besides :data:`IGNORE_PATHS` (what a node
            writes beside the files); none of ``files`` may be one of them or lie under one.

    Returns:
        The statement, resources sorted by path, subject digest the sha256 of their raw digests.

    Raises:
        InvalidPathError: a path is not a clean relative path, or is duplicated.
        InvalidInputError: a digest is not lower-case hex sha256, the name is empty,
            ``extra_predicate`` collides with a reserved field, or a file is under ``extra_ignore_paths``.
    """
    if not isinstance(model_name, str) or not model_name:
        raise InvalidInputError("a model statement needs a non-empty model name")
    entries = [f if isinstance(f, FileEntry) else FileEntry(f[0], 0, f[1]) for f in files]
    # validate_file_list checks paths and digests and sorts by path; sizes are not part of the format.
    entries = [e for e in validate_file_list(entries) if not is_ignored(e.path)]
    for path in extra_ignore_paths:
        validate_path(path)
    hidden = [e.path for e in entries if is_ignored(e.path, extra_ignore_paths)]
    if hidden:
        # model_signing verify would skip them, and then report them missing.
        raise InvalidInputError(f"files {hidden[:8]} lie under paths the statement would ignore", files=hidden[:8])
    predicate: dict[str, Any] = dict(extra_predicate or {})
    reserved = {"resources", "serialization"} & set(predicate)
    if reserved:
        raise InvalidInputError(
            f"extra predicate fields {sorted(reserved)} are reserved", fields=sorted(reserved)
        )
    predicate["resources"] = [{"name": e.path, "algorithm": "sha256", "digest": e.sha256} for e in entries]
    predicate["serialization"] = {
        "method": "files",
        "hash_type": "sha256",
        "allow_symlinks": False,
        "ignore_paths": [*IGNORE_PATHS, *(p for p in extra_ignore_paths if p not in IGNORE_PATHS)],
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": _root_digest([e.sha256 for e in entries])}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def _bad(reason: str, **details: Any) -> SignatureError:
    return SignatureError(f"model signature statement is invalid: {reason}", reason="statement", **details)


def _check_statement(statement: Any) -> dict[str, str]:
    """Check a statement's shape, paths and root digest; return ``{path: sha256}`` of its resources."""
    if not isinstance(statement, dict):
        raise _bad("not a JSON object")
    if statement.get("_type") != STATEMENT_TYPE:
        raise _bad(f"_type is {statement.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise _bad(f"predicateType is {statement.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subject = statement.get("subject")
    if (
        not isinstance(subject, list)
        or len(subject) != 1
        or not isinstance(subject[0], dict)
        or not isinstance(subject[0].get("name"), str)
        or not isinstance(subject[0].get("digest"), dict)
        or not isinstance(subject[0]["digest"].get("sha256"), str)
    ):
        raise _bad("expected exactly one subject with a name and a sha256 digest")
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise _bad("predicate is not an object")
    serialization = predicate.get("serialization")
    # verify_model_directory re-hashes whole files with sha256 and refuses links; a statement made
    # another way (shards, blake2, symlinks allowed) cannot be checked the same way, so refuse it.
    if (
        not isinstance(serialization, dict)
        or serialization.get("method") != "files"
        or serialization.get("hash_type") != "sha256"
        or serialization.get("allow_symlinks") is not False
    ):
        raise _bad("serialization must be method files, hash_type sha256, allow_symlinks false")
    ignore_paths = serialization.get("ignore_paths", [])
    if not isinstance(ignore_paths, list) or not all(isinstance(p, str) for p in ignore_paths):
        raise _bad("ignore_paths is not a list of paths")
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise _bad("resources is not a list")
    digests: dict[str, str] = {}
    for resource in resources:
        if not isinstance(resource, dict) or resource.get("algorithm") != "sha256":
            raise _bad("every resource must be an object with algorithm sha256")
        name, digest = resource.get("name"), resource.get("digest")
        if not isinstance(digest, str) or not is_sha256(digest):
            raise _bad(f"resource {name!r} has no lower-case hex sha256 digest", path=str(name))
        try:
            validate_path(name)  # type: ignore[arg-type]  # validate_path rejects non-strings
        except InvalidPathError as err:
            raise _bad(f"resource {name!r}: {err.details['reason']}", path=str(name)) from None
        if name in digests:
            raise _bad(f"resource {name!r} is listed twice", path=name)
        digests[name] = digest
    expected_root = subject[0]["digest"]["sha256"]
    actual_root = _root_digest([r["digest"] for r in resources])
    if actual_root != expected_root:
        raise _bad(
            f"root digest {expected_root} does not match the resources ({actual_root})",
            expected=expected_root,
            actual=actual_root,
        )
    return digests


def bundle_ignore_paths(bundle: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The ``ignore_paths`` a bundle's statement gives ``model_signing verify`` (empty when it cannot be read)."""
    try:
        statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))  # type: ignore[index]
        paths = statement["predicate"]["serialization"]["ignore_paths"]
    except (KeyError, TypeError, ValueError):
        return ()
    return tuple(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else ()


def sign_model_bundle(statement: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """Sign a statement as a Sigstore bundle that ``model_signing verify key`` accepts.

    Args:
        statement: A statement from :func:`build_model_statement`.
        key: The registry's signing key.

    Returns:
        The bundle JSON object: ``mediaType``, ``verificationMaterial`` (the key id as ``hint``, no
        transparency log entries) and ``dsseEnvelope``, and nothing else (the verifier forbids extras).

    Raises:
        SignatureError: the statement is not a valid model-signing statement (checked before
            signing, so the registry never signs what it would refuse to verify).
        InvalidInputError: the statement holds a value JSON cannot carry.
    """
    statement = dict(statement)
    _check_statement(statement)
    envelope = sign_envelope(canonical_json(statement), IN_TOTO_PAYLOAD_TYPE, key)
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": key.key_id}, "tlogEntries": []},
        "dsseEnvelope": envelope,
    }


def verify_model_bundle(bundle: Mapping[str, Any], key: VerifyingKey) -> dict[str, Any]:
    """Verify a model-signing bundle made with an ECDSA key and return its statement.

    Stricter than model_signing where that is safer: the key hint must be present and match, the
    envelope must carry exactly one signature (model_signing checks only the first, so a second one
    would mean something to us and nothing to the CLI), and resource paths must be clean.

    Args:
        bundle: The parsed ``model.sig`` JSON.
        key: The registry's public key.

    Returns:
        The verified in-toto statement.

    Raises:
        SignatureError: wrong media type or key hint, extra fields, a signature that does not verify,
            or a statement that is malformed or whose root digest does not match its resources.
    """
    if not isinstance(bundle, Mapping):
        raise SignatureError("bundle is not a JSON object", reason="malformed")
    extra = set(bundle) - {"mediaType", "verificationMaterial", "dsseEnvelope"}
    if extra:
        raise SignatureError(f"bundle has unknown fields {sorted(extra)}", reason="malformed")
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise SignatureError(
            f"bundle media type {bundle.get('mediaType')!r} is not {BUNDLE_MEDIA_TYPE!r}", reason="media-type"
        )
    material = bundle.get("verificationMaterial")
    public_key = material.get("publicKey") if isinstance(material, Mapping) else None
    hint = public_key.get("hint") if isinstance(public_key, Mapping) else None
    if hint != key.key_id:
        raise SignatureError(
            "bundle was not signed by this key (key hint differs)",
            reason="key-hint",
            expected=key.key_id,
            actual=hint if isinstance(hint, str) else None,
        )
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("signatures"), list):
        raise SignatureError("bundle has no DSSE envelope", reason="malformed")
    if len(envelope["signatures"]) != 1:
        raise SignatureError("a model-signing bundle must carry exactly one signature", reason="malformed")
    payload = verify_envelope(envelope, key, IN_TOTO_PAYLOAD_TYPE)
    try:
        statement = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise _bad("payload is not JSON") from None
    _check_statement(statement)
    return statement


def _scan(directory: Path, ignore_paths: Sequence[str]) -> tuple[dict[str, Path], list[str]]:
    """Every regular file under ``directory`` by relative path, and the links and special files."""
    files: dict[str, Path] = {}
    not_regular: list[str] = []
    pending = [(directory, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as it:
            for entry in it:
                rel = prefix + entry.name
                if is_ignored(rel, ignore_paths):
                    continue
                # follow_symlinks=False: a link is reported, never followed out of the directory.
                if entry.is_symlink():
                    not_regular.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    files[rel] = Path(entry.path)
                else:
                    not_regular.append(rel)
    return files, sorted(not_regular)


def _sha256_file(path: Path) -> str:
    # O_NOFOLLOW: a file swapped for a link after the scan is refused, not followed.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_model_directory(directory: Path, bundle: Mapping[str, Any], key: VerifyingKey) -> dict[str, Any]:
    """Verify a bundle, then check that ``directory`` holds exactly the files it lists.

    The directory is walked without following links, skipping the statement's ``ignore_paths``;
    only listed files are hashed. Every difference is collected before raising.

    Args:
        directory: The model root.
        bundle: The parsed ``model.sig`` JSON.
        key: The registry's public key.

    Returns:
        The verified statement.

    Raises:
        SignatureError: the bundle does not verify (see :func:`verify_model_bundle`).
        ManifestMismatchError: files missing, extra, with other bytes, or links and special files.
        NotADirectoryError: ``directory`` is not a directory.
    """
    statement = verify_model_bundle(bundle, key)
    expected = _check_statement(statement)
    ignore_paths = statement["predicate"]["serialization"].get("ignore_paths", [])
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(str(directory))
    present, not_regular = _scan(directory, ignore_paths)
    missing = sorted(set(expected) - set(present))
    extra = sorted(set(present) - set(expected))
    mismatched = []
    for path in sorted(set(expected) & set(present)):
        actual = _sha256_file(present[path])
        if actual != expected[path]:
            mismatched.append({"path": path, "expected": expected[path], "actual": actual})
    if missing or extra or mismatched or not_regular:
        raise ManifestMismatchError(
            missing=missing, extra=extra, mismatched=mismatched, not_regular=not_regular
        )
    return statement
