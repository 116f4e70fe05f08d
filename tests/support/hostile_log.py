"""A verifiable log that the test runs as an attacker who holds the registry's database and log key would:
its own audit events, Merkle tree, checkpoints, cosignatures and proofs, each of which it can forge.

What it builds is what the registry serves (the manifest answer's ``log``; ``/log/proof/consistency``),
made with the same pure code (``registry.tlog``), so an honest use of it is accepted by a node and every
deviation is the test's deliberate forgery.
"""

from __future__ import annotations

import base64
from typing import Any

from registry.signing.trust_root import LogTrust
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, CosignatureSigner, cosign, sign_checkpoint
from registry.tlog.events import commitment
from registry.tlog.note import Ed25519Signer, sign_note

ORIGIN = "registry.test/log"
TIMESTAMP = 1_790_000_000


def _b64(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


class HostileLog:
    def __init__(self, origin: str = ORIGIN) -> None:
        self.origin = origin
        self.key = Ed25519Signer.generate(origin)
        self.witnesses = [CosignatureSigner.generate(f"witness-{i}.test") for i in range(2)]
        self.events: list[dict[str, Any]] = []

    def trust(self, quorum: int = 1) -> LogTrust:
        """The trust root's log: this key, both witnesses, ``quorum`` of them required."""
        return LogTrust(self.origin, self.key.verifier().vkey, tuple(w.verifier().vkey for w in self.witnesses),
                        quorum)

    def append(self, action: str, subject: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        event = {"id": len(self.events) + 1, "at": f"2026-12-03T00:00:{len(self.events) % 60:02d}.000000Z",
                 "actor": "alice", "action": action, "subject": subject, "tenant": "acme",
                 "details": details or {}, "prev_hash": "0" * 64, "hash": f"{len(self.events) + 1:064x}"}
        self.events.append(event)
        return event

    def release_events(self, version: int = 1, alias: str = "prod") -> tuple[dict[str, Any], dict[str, Any]]:
        """An approval of ``acme/tiny@version`` and a promotion of ``alias`` to it, with filler around."""
        self.append("version.submitted", f"acme/tiny@{version}")
        approval = self.append("version.approved", f"acme/tiny@{version}", {"state": "approved"})
        move = self.append("alias.promoted", f"acme/tiny@{alias}",
                           {"from": None, "to": version, "from_canary": None, "to_canary": None})
        self.append("version.submitted", "acme/other@1")
        return approval, move

    def tree(self, events: list[dict[str, Any]] | None = None) -> merkle.MemoryHashes:
        return merkle.MemoryHashes(merkle.leaf_hash(commitment(e)) for e in (self.events if events is None else events))

    def checkpoint(self, size: int | None = None, *, events: list[dict[str, Any]] | None = None,
                   key: Ed25519Signer | None = None, cosigners: tuple[int, ...] = (0,)) -> str:
        """A checkpoint of the first ``size`` leaves, signed by ``key`` (the log's) and cosigned."""
        events = self.events if events is None else events
        size = len(events) if size is None else size
        body = Checkpoint(self.origin, size, merkle.root_hash(size, self.tree(events)))
        signed = sign_checkpoint(body, key or self.key)
        cosignatures = [cosign(signed, self.origin, (key or self.key).verifier(), self.witnesses[i], TIMESTAMP)
                        for i in cosigners]
        return sign_note(body.text(), key or self.key, keep=cosignatures).decode()

    def entry(self, event: dict[str, Any], size: int, *, events: list[dict[str, Any]] | None = None,
              index: int | None = None) -> dict[str, Any]:
        index = event["id"] - 1 if index is None else index
        proof = merkle.inclusion_proof(index, size, self.tree(events))
        return {"index": event["id"] - 1, "event": event, "inclusion_proof": _b64(proof)}

    def proof(self, events: tuple[dict[str, Any], ...], size: int | None = None, **checkpoint: Any) -> dict[str, Any]:
        """The manifest answer's ``log``: a checkpoint at ``size`` and the entries of ``events`` in it."""
        size = len(self.events) if size is None else size
        return {"checkpoint": self.checkpoint(size, **checkpoint),
                "entries": [self.entry(e, size) for e in events]}

    def consistency(self, first: int, second: int,
                    events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"first": first, "second": second,
                "hashes": _b64(merkle.consistency_proof(first, second, self.tree(events)))}
