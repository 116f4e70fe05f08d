"""Holding the registry's verifiable audit log to a checkpoint saved earlier (``modelreg audit verify
--checkpoint``), with the checkpoint, tiles and one proof, never a replay of the events.

The saved checkpoint must be signed by the log key (``--log-key``, else the key ``/v1/keys`` serves, which
counts only if the saved checkpoint verifies with it: a key the server swapped in did not sign that). The
log's current checkpoint must be signed by the same key for the same origin, be at least as large, and be
proven to extend the saved one twice: by a consistency proof computed here from the tiles it serves, and
by the one ``/log/proof/consistency`` answers. Any other outcome raises; nothing is trusted on the server's
word.

Usage (a sketch, not run as a doctest)::

    with RegistryApi(url, None) as api:
        extension = verify_log_extends(api, Path("checkpoint").read_bytes())
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.domain.errors import LogProofError
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, open_checkpoint, parse_checkpoint
from registry.tlog.merkle import decode_hashes
from registry.tlog.note import parse_note, parse_verifier_key
from registry.tlog.tiles import TileHashes


@dataclass(frozen=True, slots=True)
class LogExtension:
    """What was proven: the log ``origin`` at ``new_size`` extends the saved checkpoint at ``old_size``."""

    origin: str
    old_size: int
    new_size: int
    checkpoint: bytes
    """The log's current signed checkpoint: save it to check the next time from there."""


def verify_log_extends(api: Any, saved: bytes, log_key: str | None = None) -> LogExtension:
    """Prove that the log ``api`` serves today extends the signed checkpoint ``saved``.

    Args:
        api: a :class:`registry.client.api.RegistryApi` (its ``keys``, ``log_checkpoint``, ``log_tile``,
            ``log_consistency``).
        saved: the signed checkpoint kept earlier (the bytes of ``/log/checkpoint``).
        log_key: the log's verifier key string; default the one the registry serves.

    Raises:
        MalformedNoteError, MalformedCheckpointError, NoteSignatureError, UnverifiedNoteError: a checkpoint
            that is not the log's, or not signed by its key.
        LogProofError: the log is smaller than the saved tree, has another root at its size (a fork), or
            a proof that does not verify.
        RegistryError: the registry could not be read (a missing tile, a bad answer).
    """
    origin = parse_checkpoint(parse_note(saved).text).origin
    verifier = parse_verifier_key(log_key or _served_log_key(api))
    old = open_checkpoint(saved, origin, verifier).checkpoint
    current = api.log_checkpoint()
    new = open_checkpoint(current, origin, verifier).checkpoint
    if new.size < old.size:
        raise LogProofError("sizes", f"the log's tree of size {new.size} is smaller than the saved checkpoint's "
                                     f"{old.size}: it was truncated", old_size=old.size, new_size=new.size)
    if new.size == old.size and new.root_hash != old.root_hash:
        raise LogProofError("root", f"the log has another root at size {old.size} than the saved checkpoint: "
                                    "a forked log", old_size=old.size, new_size=new.size)
    _check_consistent(old, new, merkle.consistency_proof(old.size, new.size, TileHashes(new.size, api.log_tile)))
    served = api.log_consistency(old.size, new.size)
    _check_consistent(old, new, _hashes(served))
    return LogExtension(origin, old.size, new.size, current)


def _check_consistent(old: Checkpoint, new: Checkpoint, proof: list[bytes]) -> None:
    merkle.verify_consistency(old.size, new.size, old.root_hash, new.root_hash, proof)


def _served_log_key(api: Any) -> str:
    log = api.keys().get("log")
    if not isinstance(log, dict) or not isinstance(log.get("verifier_key"), str):
        raise LogProofError("key", "the registry serves no log key: pass --log-key")
    return log["verifier_key"]


def _hashes(answer: Any) -> list[bytes]:
    """The ``hashes`` of a proof answer, each base64 of 32 bytes."""
    return decode_hashes(answer.get("hashes") if isinstance(answer, dict) else None)
