"""C2SP signed notes (c2sp.org/signed-note): text signed by one or more keys, with Ed25519 signers and
verifiers and their key strings.

A note is ``text`` (ending in a newline), a blank line, then one line per signature,
``— <key name> base64(key ID || signature)`` (an em dash, U+2014). A key is named by its name and its
4-byte key ID, ``SHA-256(name || 0x0A || type || public key)[:4]``. :func:`open_note` verifies what known
keys signed, ignores every other line, and raises unless the keys it requires signed.

Key strings: a verifier key is ``<name>+<hex key ID>+<base64(type || public key)>``; a signer key (Go's
``golang.org/x/mod/sumdb/note`` format, kept for the log's key file) is ``PRIVATE+KEY+<name>+<hex key
ID>+<base64(type || Ed25519 seed)>``.

Example:
    >>> signer = Ed25519Signer.generate("example.com/log")
    >>> msg = sign_note("hello\\n", signer)
    >>> open_note(msg, [signer.verifier()]).text
    'hello\\n'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from registry.domain.errors import (
    InvalidVerifierKeyError,
    MalformedNoteError,
    NoteSignatureError,
    UnverifiedNoteError,
)

#: Signature type bytes (signed-note "Signature types"; 0x04 is tlog-cosignature's).
ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
#: Limits: the spec asks verifiers to accept at least 16 signatures (post-quantum ones up to ~5 kB each).
MAX_SIGNATURES = 100
MAX_NOTE_BYTES = 1 << 20

SIGNATURE_PREFIX = "\u2014 "


class Verifier(Protocol):
    """A key that checks note signatures: ``name`` and ``key_id`` say which lines are its."""

    name: str
    key_id: int

    def verify(self, text: bytes, signature: bytes) -> None:
        """Raise :class:`NoteSignatureError` unless ``signature`` (without its key ID) signs ``text``."""


class Signer(Protocol):
    name: str
    key_id: int

    def sign(self, text: bytes) -> bytes:
        """The signature (without its key ID) over the note ``text``."""


@dataclass(frozen=True)
class Signature:
    """One signature line: the key's name and ID, and the signature bytes after the ID."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        blob = self.key_id.to_bytes(4, "big") + self.signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"


@dataclass(frozen=True)
class Note:
    """A parsed note: its text (with the final newline) and every signature line, in order."""

    text: str
    signatures: tuple[Signature, ...]


@dataclass(frozen=True)
class OpenedNote:
    """A note after :func:`open_note`: the signatures known keys verified (one per key) and the rest."""

    text: str
    verified: tuple[Signature, ...]
    unverified: tuple[Signature, ...]


def key_id(name: str, alg: int, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || alg || public key)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def is_valid_name(name: str) -> bool:
    """A key name is non-empty, valid text with no Unicode space and no ``+``."""
    return bool(name) and "+" not in name and not any(c.isspace() or c < " " for c in name)


class Ed25519Verifier:
    """An Ed25519 note verifier (type 0x01); a subclass with another ``alg`` signs a message derived from
    the text (``checkpoint.CosignatureVerifier``)."""

    alg = ALG_ED25519
    signature_size = 64

    def __init__(self, name: str, public_key: bytes) -> None:
        if not is_valid_name(name):
            raise InvalidVerifierKeyError("the key name is empty or holds a space or '+'", name=name)
        if len(public_key) != 32:
            raise InvalidVerifierKeyError(f"an Ed25519 public key is 32 bytes, not {len(public_key)}")
        self.name = name
        self.public_key = public_key
        self.key_id = key_id(name, self.alg, public_key)
        self._key = Ed25519PublicKey.from_public_bytes(public_key)

    @property
    def vkey(self) -> str:
        """The verifier key string ``<name>+<hex key ID>+<base64(type || public key)>``."""
        blob = base64.b64encode(bytes([self.alg]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{blob}"

    def message(self, text: bytes, signature: bytes) -> tuple[bytes, bytes]:
        """What the Ed25519 signature covers, and the Ed25519 signature itself."""
        return text, signature

    def verify(self, text: bytes, signature: bytes) -> None:
        if len(signature) != self.signature_size:
            raise NoteSignatureError(self.name, self.key_id)
        message, ed25519_signature = self.message(text, signature)
        try:
            self._key.verify(ed25519_signature, message)
        except InvalidSignature:
            raise NoteSignatureError(self.name, self.key_id) from None


class Ed25519Signer:
    """An Ed25519 note signer (type 0x01)."""

    alg = ALG_ED25519
    verifier_class: type[Ed25519Verifier] = Ed25519Verifier

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        if not is_valid_name(name):
            raise InvalidVerifierKeyError("the key name is empty or holds a space or '+'", name=name)
        self.name = name
        self._key = private_key
        self.public_key = private_key.public_key().public_bytes_raw()
        self.key_id = key_id(name, self.alg, self.public_key)

    @classmethod
    def generate(cls, name: str) -> Ed25519Signer:
        return cls(name, Ed25519PrivateKey.generate())

    @property
    def skey(self) -> str:
        """The signer key string ``PRIVATE+KEY+<name>+<hex key ID>+<base64(type || seed)>``."""
        blob = base64.b64encode(bytes([self.alg]) + self._key.private_bytes_raw()).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key_id:08x}+{blob}"

    def verifier(self) -> Ed25519Verifier:
        return self.verifier_class(self.name, self.public_key)

    def sign(self, text: bytes) -> bytes:
        return self._key.sign(text)


def parse_verifier_key(vkey: str, kind: type[Ed25519Verifier] = Ed25519Verifier) -> Ed25519Verifier:
    """The verifier a key string names, of ``kind``'s signature type (``Ed25519Verifier``: 0x01;
    ``checkpoint.CosignatureVerifier``: 0x04).

    Raises:
        InvalidVerifierKeyError: not three ``+``-separated parts, a bad name, ID, encoding or key, another
            signature type, or an ID that is not the key's.
    """
    name, hex_id, alg, key = _parse_key_string(vkey, "verifier key")
    if alg != kind.alg:
        raise InvalidVerifierKeyError(f"signature type 0x{alg:02x}, not 0x{kind.alg:02x}")
    verifier = kind(name, key)
    if verifier.key_id != hex_id:
        raise InvalidVerifierKeyError("the key ID is not the key's", name=name)
    return verifier


def parse_signer_key(skey: str, kind: type[Ed25519Signer] = Ed25519Signer) -> Ed25519Signer:
    """The signer a ``PRIVATE+KEY+...`` string holds, of ``kind``'s signature type.

    Raises:
        InvalidVerifierKeyError: as for :func:`parse_verifier_key`, or a missing ``PRIVATE+KEY+`` prefix.
    """
    if not skey.startswith("PRIVATE+KEY+"):
        raise InvalidVerifierKeyError("a signer key starts with PRIVATE+KEY+")
    name, hex_id, alg, seed = _parse_key_string(skey.removeprefix("PRIVATE+KEY+"), "signer key")
    if alg != kind.alg:
        raise InvalidVerifierKeyError(f"signature type 0x{alg:02x}, not 0x{kind.alg:02x}")
    if len(seed) != 32:
        raise InvalidVerifierKeyError(f"an Ed25519 seed is 32 bytes, not {len(seed)}")
    signer = kind(name, Ed25519PrivateKey.from_private_bytes(seed))
    if signer.key_id != hex_id:
        raise InvalidVerifierKeyError("the key ID is not the key's", name=name)
    return signer


def _parse_key_string(text: str, what: str) -> tuple[str, int, int, bytes]:
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise InvalidVerifierKeyError(f"a {what} is <name>+<key ID>+<key>")
    name, hex_id, blob = parts
    if not is_valid_name(name):
        raise InvalidVerifierKeyError("the key name is empty or holds a space or '+'")
    if len(hex_id) != 8 or hex_id.strip("0123456789abcdef"):
        raise InvalidVerifierKeyError("the key ID is not 8 lowercase hex digits")
    raw = _b64decode(blob)
    if raw is None or len(raw) < 2:
        raise InvalidVerifierKeyError("the key is not base64 of a type byte and key material")
    return name, int(hex_id, 16), raw[0], raw[1:]


def parse_note(msg: bytes) -> Note:
    """Split a signed note into its text and signature lines, checking its form (not its signatures).

    Raises:
        MalformedNoteError: too large, not UTF-8, a control character, no blank line before the
            signatures, a line that is not a signature, a bad name or encoding, too many signatures.
    """
    if len(msg) > MAX_NOTE_BYTES:
        raise MalformedNoteError(f"larger than {MAX_NOTE_BYTES} bytes", size=len(msg))
    decoded = _check_text(msg)
    split = decoded.rfind("\n\n")
    if split < 0:
        raise MalformedNoteError("no blank line before the signatures")
    text, block = decoded[:split + 1], decoded[split + 2:]
    if not block.endswith("\n"):
        raise MalformedNoteError("no signature lines, or the last one does not end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNoteError(f"more than {MAX_SIGNATURES} signatures", signatures=len(lines))
    return Note(text, tuple(_parse_signature_line(line) for line in lines))


def _parse_signature_line(line: str) -> Signature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise MalformedNoteError("a line after the blank line is not a signature (— name signature)")
    name, _, blob = line[len(SIGNATURE_PREFIX):].partition(" ")
    if not is_valid_name(name):
        raise MalformedNoteError("a signature's key name is empty or holds a space or '+'")
    raw = _b64decode(blob)
    if raw is None or len(raw) < 5:
        raise MalformedNoteError(f"the signature of {name} is not base64 of a key ID and a signature")
    return Signature(name, int.from_bytes(raw[:4], "big"), raw[4:])


def open_note(msg: bytes, verifiers: Iterable[Verifier], *, require: Iterable[str] | None = None) -> OpenedNote:
    """Verify a signed note with the keys a caller knows.

    Every line whose name and key ID are a known key's must verify; lines of unknown keys are kept
    unverified and otherwise ignored; a known key's repeated lines count once.

    Args:
        msg: The note's bytes.
        verifiers: The known keys (no two with one name and key ID).
        require: Names of known keys that must each have signed; ``None``: any one known key.

    Raises:
        MalformedNoteError: the note is not well formed (see :func:`parse_note`).
        NoteSignatureError: a known key's line does not verify.
        UnverifiedNoteError: no known key signed, or a required one did not.
        ValueError: two verifiers share a name and key ID, or a required name is not a known key's.
    """
    known: dict[tuple[str, int], Verifier] = {}
    for v in verifiers:
        if (v.name, v.key_id) in known:
            raise ValueError(f"two verifiers for key {v.name}+{v.key_id:08x}")
        known[(v.name, v.key_id)] = v
    required = None if require is None else set(require)
    if required is not None and required - {name for name, _ in known}:
        raise ValueError(f"required signers without a verifier: {sorted(required - {n for n, _ in known})}")
    note = parse_note(msg)
    text = note.text.encode()
    verified: dict[tuple[str, int], Signature] = {}
    unverified: list[Signature] = []
    for sig in note.signatures:
        verifier = known.get((sig.name, sig.key_id))
        if verifier is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        verifier.verify(text, sig.signature)
        verified.setdefault((sig.name, sig.key_id), sig)
    names = {name for name, _ in verified}
    if not verified:
        raise UnverifiedNoteError("note has no signature from a known key", missing=sorted(required or []))
    if required is not None and required - names:
        missing = sorted(required - names)
        raise UnverifiedNoteError(f"note is not signed by {', '.join(missing)}", missing=missing)
    return OpenedNote(note.text, tuple(verified.values()), tuple(unverified))


def sign_note(text: str, *signers: Signer, keep: Sequence[Signature] = ()) -> bytes:
    """The note ``text`` signed by each signer, after the ``keep`` signature lines already carried (those of
    the signers' own keys are dropped and signed afresh).

    Raises:
        MalformedNoteError: ``text`` is empty, does not end in a newline, or holds a control character.
        ValueError: no signer.
    """
    if not signers:
        raise ValueError("a note needs at least one signer")
    if not text.endswith("\n"):
        raise MalformedNoteError("the text does not end in a newline")
    raw = text.encode()
    _check_text(raw)
    mine = {(s.name, s.key_id) for s in signers}
    lines = [s for s in keep if (s.name, s.key_id) not in mine]
    lines += [Signature(s.name, s.key_id, s.sign(raw)) for s in signers]
    return (text + "\n" + "".join(sig.line() for sig in lines)).encode()


def _check_text(raw: bytes) -> str:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedNoteError("not UTF-8") from None
    if any(c < " " and c != "\n" for c in decoded):
        raise MalformedNoteError("a control character other than newline")
    return decoded


def _b64decode(text: str) -> bytes | None:
    """Strict standard base64 (padding, alphabet, canonical trailing bits), or ``None``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode() == text else None
