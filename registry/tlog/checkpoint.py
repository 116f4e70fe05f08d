"""C2SP tlog-checkpoint (a log's signed tree head) and tlog-cosignature v1 (a witness's timestamped
Ed25519 statement that it saw the log consistent up to that head).

A checkpoint's note text is the origin line, the tree size in decimal, the base64 root hash and optional
non-empty extension lines. A cosignature is a note signature of type 0x04 whose 72 bytes are a big-endian
u64 POSIX timestamp and an Ed25519 signature over ``cosignature/v1\\ntime <ts>\\n`` and the checkpoint text.

Example:
    >>> from registry.tlog.merkle import EMPTY_ROOT
    >>> log = Ed25519Signer.generate("example.com/log")
    >>> msg = sign_checkpoint(Checkpoint("example.com/log", 0, EMPTY_ROOT), log)
    >>> open_checkpoint(msg, "example.com/log", log.verifier()).checkpoint.size
    0
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

from registry.domain.errors import MalformedCheckpointError, MalformedNoteError, UnverifiedNoteError
from registry.tlog.merkle import EMPTY_ROOT, HASH_SIZE, MAX_TREE_SIZE
from registry.tlog.note import (
    ALG_COSIGNATURE_V1,
    Ed25519Signer,
    Ed25519Verifier,
    OpenedNote,
    Signature,
    open_note,
    sign_note,
)

COSIGNATURE_HEADER = "cosignature/v1\n"
MAX_TIMESTAMP = 2**63 - 1


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: which log (``origin``), how many leaves, their root, and opaque extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        """The note text; raises :class:`MalformedCheckpointError` for values no checkpoint may hold."""
        _check(self)
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode(), *self.extensions]
        return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class OpenedCheckpoint:
    checkpoint: Checkpoint
    note: OpenedNote


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint a (verified) note text holds.

    Raises:
        MalformedCheckpointError: fewer than three lines, no final newline, an empty line, a size that is
            not canonical decimal or out of range, a root that is not base64 of 32 bytes, a size-0
            checkpoint without the empty tree's root.
    """
    if not text.endswith("\n"):
        raise MalformedCheckpointError("the text does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise MalformedCheckpointError("fewer than three lines (origin, size, root hash)")
    if any(line == "" for line in lines):
        raise MalformedCheckpointError("an empty line")
    if any(c < " " for c in text.replace("\n", "")):
        raise MalformedCheckpointError("a control character")
    origin, size_line, root_line, *extensions = lines
    if not size_line.isascii() or not size_line.isdigit() or (size_line != "0" and size_line[0] == "0"):
        raise MalformedCheckpointError(f"tree size {size_line[:40]!r} is not a decimal with no leading zeroes")
    # Bounded before int(): past 4,300 digits int() raises ValueError, not a malformed-checkpoint error.
    if len(size_line) > len(str(MAX_TREE_SIZE)):
        raise MalformedCheckpointError(f"tree size of {len(size_line)} digits is out of range")
    size = int(size_line)
    try:
        root = base64.b64decode(root_line, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedCheckpointError("the root hash is not base64") from None
    if base64.b64encode(root).decode() != root_line:
        raise MalformedCheckpointError("the root hash is not canonical base64")
    checkpoint = Checkpoint(origin, size, root, tuple(extensions))
    _check(checkpoint)
    return checkpoint


def _check(checkpoint: Checkpoint) -> None:
    if not checkpoint.origin or "\n" in checkpoint.origin:
        raise MalformedCheckpointError("the origin is empty or holds a newline")
    if not 0 <= checkpoint.size <= MAX_TREE_SIZE:
        raise MalformedCheckpointError(f"tree size {checkpoint.size} is out of range")
    if len(checkpoint.root_hash) != HASH_SIZE:
        raise MalformedCheckpointError(f"the root hash is {len(checkpoint.root_hash)} bytes, not 32")
    if checkpoint.size == 0 and checkpoint.root_hash != EMPTY_ROOT:
        raise MalformedCheckpointError("a tree of size 0 has the empty tree's root")
    if any(not line or "\n" in line for line in checkpoint.extensions):
        raise MalformedCheckpointError("an extension line is empty or holds a newline")


def sign_checkpoint(checkpoint: Checkpoint, *signers: Ed25519Signer) -> bytes:
    """The checkpoint as a signed note (the log's key name should be its origin)."""
    return sign_note(checkpoint.text(), *signers)


def open_checkpoint(msg: bytes, origin: str, log: Ed25519Verifier, *,
                    witnesses: Iterable[CosignatureVerifier] = (), quorum: int = 0) -> OpenedCheckpoint:
    """Verify a signed checkpoint of the log ``origin``: signed by ``log`` and cosigned by at least
    ``quorum`` distinct ``witnesses``; other lines are ignored.

    Raises:
        MalformedNoteError, NoteSignatureError: the note is malformed, or a known key's line is bad.
        UnverifiedNoteError: the log did not sign, or fewer than ``quorum`` witnesses cosigned.
        MalformedCheckpointError: the text is not a checkpoint, or it is another log's.
        ValueError: ``quorum`` is more than the witnesses given.
    """
    witnesses = list(witnesses)
    if not 0 <= quorum <= len(witnesses):
        raise ValueError(f"a quorum of {quorum} among {len(witnesses)} witnesses")
    opened = open_note(msg, [log, *witnesses], require=[log.name])
    checkpoint = parse_checkpoint(opened.text)
    if checkpoint.origin != origin:
        raise MalformedCheckpointError(f"origin {checkpoint.origin!r} is not the log's {origin!r}",
                                       origin=checkpoint.origin)
    cosigned = {(s.name, s.key_id) for s in opened.verified} - {(log.name, log.key_id)}
    if len(cosigned) < quorum:
        raise UnverifiedNoteError(f"checkpoint has {len(cosigned)} of the {quorum} cosignatures it needs",
                                  needed=quorum, cosigned=sorted(name for name, _ in cosigned))
    return OpenedCheckpoint(checkpoint, opened)


class CosignatureVerifier(Ed25519Verifier):
    """A witness's tlog-cosignature/v1 key (type 0x04): 72-byte signatures, timestamp first."""

    alg = ALG_COSIGNATURE_V1
    signature_size = 8 + 64

    def message(self, text: bytes, signature: bytes) -> tuple[bytes, bytes]:
        return cosigned_message(text, cosignature_timestamp(signature)), signature[8:]


class CosignatureSigner(Ed25519Signer):
    """A witness's tlog-cosignature/v1 signing key."""

    alg = ALG_COSIGNATURE_V1
    verifier_class = CosignatureVerifier

    def sign(self, text: bytes, *, timestamp: int) -> bytes:  # type: ignore[override]
        """The 72-byte cosignature over the checkpoint note ``text`` at POSIX time ``timestamp``."""
        return timestamp.to_bytes(8, "big") + self._key.sign(cosigned_message(text, timestamp))


def cosigned_message(text: bytes, timestamp: int) -> bytes:
    """``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note text."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise MalformedNoteError(f"cosignature timestamp {timestamp} is out of range")
    return f"{COSIGNATURE_HEADER}time {timestamp}\n".encode() + text


def cosignature_timestamp(signature: bytes) -> int:
    """The POSIX time a cosignature's bytes (after the key ID) carry.

    Raises:
        MalformedNoteError: not 72 bytes, or a timestamp above 2**63 - 1.
    """
    if len(signature) != CosignatureVerifier.signature_size:
        raise MalformedNoteError(f"a cosignature is 72 bytes, not {len(signature)}")
    timestamp = int.from_bytes(signature[:8], "big")
    if timestamp > MAX_TIMESTAMP:
        raise MalformedNoteError(f"cosignature timestamp {timestamp} is out of range")
    return timestamp


def cosign(msg: bytes, checkpoint_origin: str, log: Ed25519Verifier, witness: CosignatureSigner,
           timestamp: int) -> Signature:
    """A witness's cosignature on a checkpoint the log signed (the caller checked its consistency).

    Raises:
        as :func:`open_checkpoint`.
    """
    opened = open_checkpoint(msg, checkpoint_origin, log)
    raw = witness.sign(opened.note.text.encode(), timestamp=timestamp)
    return Signature(witness.name, witness.key_id, raw)
