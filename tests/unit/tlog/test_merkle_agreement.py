"""registry.tlog.merkle agrees with pymerkle (an independent RFC 9162 implementation, PyPI) on every tree of
1 to 1,000 leaves: tree heads, inclusion proofs and consistency proofs, each side verifying the other's.

pymerkle's default hashing (``security=True``) is RFC 9162's: ``0x00`` before a leaf, ``0x01`` before a node.
Its proofs carry more than RFC 9162's (the leaf or old subtree first, and a finer split of one subtree in
consistency proofs); ``_rfc_consistency`` turns one into RFC 9162's so the two are compared hash for hash.
The finer split cannot be rebuilt from an RFC 9162 consistency proof, so pymerkle's verifier checks its own
consistency proofs against our tree heads, and ours checks its (converted) proofs.
"""

import random

import pytest
from pymerkle import ConsistencyProof, InclusionProof, InmemoryTree

from registry.tlog.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MemoryHashes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)

SIZES = 1000


@pytest.fixture(scope="module")
def trees():
    rng = random.Random(22)
    entries = [rng.randbytes(rng.randrange(0, 64)) for _ in range(SIZES)]
    theirs = InmemoryTree(algorithm="sha256")
    assert theirs.security  # RFC 9162 prefixes
    for entry in entries:
        theirs.append_entry(entry)
    ours = MemoryHashes(leaf_hash(e) for e in entries)
    return entries, theirs, ours


def _rfc_consistency(proof: ConsistencyProof) -> list[bytes]:
    """pymerkle's consistency path as RFC 9162 writes it."""
    rule, subset, path = proof.rule, proof.subset, proof.path
    if subset[0] == 1:
        # The old tree's subtree comes first; RFC 9162 leaves it out when it is the old tree itself.
        return path[1:] if not any(subset[1:]) else list(path)
    # pymerkle splits the subtree right of the old tree's edge down to one leaf; RFC 9162 gives its root,
    # after the old tree's subtree (left out when it is the old tree itself).
    j = subset.index(1)
    right = path[0]
    for bit, h in zip(rule[:j - 1], path[1:j]):
        right = node_hash(h, right) if bit == 1 else node_hash(right, h)
    return ([path[j]] if any(subset[j + 1:]) else []) + [right] + list(path[j + 1:])


def test_tree_heads_agree_for_every_size(trees):
    entries, theirs, ours = trees
    edge = CompactRange()
    for size in range(1, SIZES + 1):
        edge.append(leaf_hash(entries[size - 1]))
        expected = theirs.get_root(size)
        assert root_hash(size, ours) == expected, size
        assert edge.root() == expected, size


def test_inclusion_proofs_agree_and_verify_both_ways(trees):
    entries, theirs, ours = trees
    rng = random.Random(9162)
    for size in range(1, SIZES + 1):
        root = theirs.get_root(size)
        for index in {0, size - 1, rng.randrange(size), rng.randrange(size)}:
            leaf = leaf_hash(entries[index])
            mine = inclusion_proof(index, size, ours)
            their = theirs.prove_inclusion(index + 1, size)
            assert mine == their.path[1:], (index, size)
            verify_inclusion(leaf, index, size, their.path[1:], root)
            InclusionProof("sha256", True, size, index + 1, their.rule, [leaf, *mine]).verify(
                leaf, root, index=index + 1, size=size)


def test_consistency_proofs_agree_hash_for_hash(trees):
    _, theirs, ours = trees
    rng = random.Random(6962)
    for size in range(1, SIZES + 1):
        new_root = theirs.get_root(size)
        for old in {1, size, 1 << (size.bit_length() - 1), rng.randint(1, size), rng.randint(1, size)}:
            old_root = theirs.get_root(old)
            mine = consistency_proof(old, size, ours)
            their = theirs.prove_consistency(old, size)
            assert mine == _rfc_consistency(their), (old, size)
            verify_consistency(old, size, old_root, new_root, _rfc_consistency(their))
            their.verify(old_root, new_root, prior_size=old, later_size=size)


def test_from_size_zero_every_tree_is_consistent_with_the_empty_one(trees):
    _, theirs, ours = trees
    assert consistency_proof(0, 17, ours) == []
    verify_consistency(0, 17, EMPTY_ROOT, theirs.get_root(17), [])
    assert root_hash(0, ours) == EMPTY_ROOT == theirs.get_root(0)
