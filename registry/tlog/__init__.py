"""The verifiable audit log's pure core (issue 22, ADR 0011): RFC 9162 Merkle trees and proofs, C2SP signed
notes, checkpoints, cosignatures and tlog-tiles addressing.

It imports the standard library, ``cryptography`` (Ed25519) and ``registry.domain.errors`` only, so the
server's log worker and API, ``registry/client`` (fetch) and ``modelreg witness`` share it. Start with
``merkle`` (hashing, proofs, the right edge), then ``note`` (signed notes and keys), ``checkpoint``
(tree heads and cosignatures) and ``tiles`` (where each stored hash is served).

Example:
    >>> from registry.tlog.merkle import MemoryHashes, leaf_hash, root_hash
    >>> root_hash(1, MemoryHashes([leaf_hash(b"")])).hex()[:16]
    '6e340b9cffb37a98'
"""
