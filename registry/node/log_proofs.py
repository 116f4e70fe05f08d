"""A node's proof that a release is in the registry's verifiable log, as everyone else sees it (ADR 0011).

When the node's trust root names a log, a release is accepted only with the ``log`` object the manifest
answer carries beside the envelope: a checkpoint and, for each event that made the release what it is,
the event's body and its inclusion proof. :func:`verify_release_log` checks, before any byte is fetched:

1. the checkpoint is the root's log's (origin), signed by its log key, cosigned by the root's quorum of its
   witnesses and by the node's own quorum of the witnesses it names (``--witness``, ``--witness-quorum``);
2. the events are the version's approval (``version.approved`` of ``tenant/model@N``) and, for an alias,
   a move of that alias (``alias.promoted`` or ``alias.rolled_back`` of ``tenant/model@alias``) to this
   version (or to a canary of it for this tenant), each at leaf index ``id - 1``, and each proven included
   in the checkpoint's tree (its commitment's leaf hash, :mod:`registry.tlog.events`);
3. the checkpoint extends the newest one this node accepted before for that log: not a smaller tree, the
   same root at the same size, else a consistency proof (the registry's, verified here) between them.

The checkpoint to keep is returned; :class:`registry.node.trust.NodeTrust` writes it beside the serials
only after the fetch succeeded. Every failure is a :class:`LogProofError` or a note error (exit ``log``).

Usage (a sketch, not run as a doctest)::

    keep = verify_release_log(release, response.log, trust.root.log, kept=trust.log_checkpoint(origin),
                              consistency=api.log_consistency)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry.domain.errors import LogProofError
from registry.domain.events import ALIAS_MOVE_ACTIONS, APPROVED_ACTION
from registry.signing.release import Release
from registry.signing.trust_root import LogTrust
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, CosignatureVerifier, open_checkpoint
from registry.tlog.events import commitment
from registry.tlog.note import MAX_NOTE_BYTES

MAX_ENTRIES = 8
"""A release is proven by two events; a node reads no more than this many."""


@dataclass(frozen=True)
class WitnessPolicy:
    """The witnesses a node requires on its own (beside its trust root's): ``quorum`` of ``witnesses``."""

    witnesses: tuple[CosignatureVerifier, ...]
    quorum: int


def verify_release_log(release: Release, proof: Any, log: LogTrust, *, kept: bytes | None,
                       consistency: Callable[[int, int], Any], node: WitnessPolicy | None = None) -> bytes:
    """Check that ``release`` is proven in ``log`` by ``proof`` (the manifest answer's ``log``).

    Args:
        kept: the newest checkpoint this node accepted for ``log.origin`` before, or None.
        consistency: ``(first, second)`` -> the registry's consistency proof answer (``{"hashes": [...]}``).
        node: the witnesses the node requires itself.

    Returns:
        The checkpoint (signed note bytes) to keep once the fetch succeeded.

    Raises:
        LogProofError: no proof, a malformed one, events that are not this release's, an inclusion proof
            that does not verify, a checkpoint smaller than or forked from the kept one.
        MalformedNoteError, NoteSignatureError, UnverifiedNoteError, MalformedCheckpointError: the
            checkpoint is not signed by the log key or lacks a required cosignature.
    """
    if not isinstance(proof, Mapping):
        raise LogProofError("missing", f"the registry sent {release.model}@{release.ref} without a proof that "
                                       f"it is in the log {log.origin}: refused (the trust root names that log)")
    note, entries = proof.get("checkpoint"), proof.get("entries")
    if not isinstance(note, str) or len(note) > MAX_NOTE_BYTES:
        raise LogProofError("malformed", "the release's log proof has no checkpoint")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
        raise LogProofError("malformed", f"the release's log proof holds 1 to {MAX_ENTRIES} entries")
    msg = note.encode()
    checkpoint = open_checkpoint(msg, log.origin, log.log_verifier(), witnesses=log.witness_verifiers(),
                                 quorum=log.quorum).checkpoint
    if node is not None:
        open_checkpoint(msg, log.origin, log.log_verifier(), witnesses=node.witnesses, quorum=node.quorum)
    events = [_included(entry, checkpoint) for entry in entries]
    _check_events(release, events)
    if kept is not None:
        _check_extends(open_checkpoint(kept, log.origin, log.log_verifier()).checkpoint, checkpoint, consistency)
    return msg


def _included(entry: Any, checkpoint: Checkpoint) -> Mapping[str, Any]:
    """The event of one entry, once its inclusion in ``checkpoint``'s tree is proven."""
    if not isinstance(entry, Mapping):
        raise LogProofError("malformed", "a log proof entry is an object")
    index, event, hashes = entry.get("index"), entry.get("event"), entry.get("inclusion_proof")
    if type(index) is not int or not isinstance(event, Mapping) or event.get("id") != index + 1:
        raise LogProofError("index", "a log proof entry's index is not its event's id - 1")
    leaf = merkle.leaf_hash(commitment(event))
    merkle.verify_inclusion(leaf, index, checkpoint.size, merkle.decode_hashes(hashes), checkpoint.root_hash)
    return event


def _check_events(release: Release, events: Sequence[Mapping[str, Any]]) -> None:
    """The events include this version's approval and, for an alias, a move of it to this version."""
    tenant = release.model.split("/", 1)[0]
    ours = [e for e in events if e.get("tenant") == tenant]
    if not any(e.get("action") == APPROVED_ACTION and e.get("subject") == f"{release.model}@{release.version}"
               for e in ours):
        raise LogProofError("event", f"the log proof holds no approval of {release.model}@{release.version}")
    if release.ref.isdigit():
        return
    if not any(e.get("action") in ALIAS_MOVE_ACTIONS and e.get("subject") == f"{release.model}@{release.ref}"
               and _moves_to(e.get("details"), release) for e in ours):
        raise LogProofError("event", f"the log proof holds no move of {release.model}@{release.ref} to version "
                                     f"{release.version}")


def _moves_to(details: Any, release: Release) -> bool:
    if not isinstance(details, Mapping):
        return False
    if details.get("to") == release.version:
        return True
    canary = details.get("to_canary")
    if not isinstance(canary, Mapping) or canary.get("version") != release.version:
        return False
    tenants = canary.get("tenants")
    return isinstance(tenants, list) and release.tenant in tenants


def _check_extends(old: Checkpoint, new: Checkpoint, consistency: Callable[[int, int], Any]) -> None:
    if new.size < old.size:
        raise LogProofError("sizes", f"the release's checkpoint (size {new.size}) is smaller than the one this "
                                     f"node accepted before ({old.size}): a truncated or forked log",
                            old_size=old.size, new_size=new.size)
    if new.size == old.size:
        if new.root_hash != old.root_hash:
            raise LogProofError("root", f"the log has another root at size {old.size} than the checkpoint this "
                                        "node accepted before: a forked log", old_size=old.size)
        return
    answer = consistency(old.size, new.size)
    hashes = merkle.decode_hashes(answer.get("hashes") if isinstance(answer, Mapping) else None)
    merkle.verify_consistency(old.size, new.size, old.root_hash, new.root_hash, hashes)
