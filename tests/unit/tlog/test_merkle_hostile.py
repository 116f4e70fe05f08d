"""Proofs a hostile or broken log could send: each is refused with the check that caught it."""

import pytest

from registry.domain.errors import LogProofError
from registry.tlog.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MemoryHashes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [leaf_hash(i.to_bytes(2, "big")) for i in range(300)]
TREE = MemoryHashes(LEAVES)
FORK = MemoryHashes([*LEAVES[:200], leaf_hash(b"forged"), *LEAVES[201:]])


def _reason(excinfo) -> str:
    return excinfo.value.reason


@pytest.mark.parametrize("size", [1, 2, 7, 8, 9, 200, 255, 256, 257, 300])
def test_a_proof_for_another_leaf_is_refused(size):
    root = root_hash(size, TREE)
    for index in range(0, size, max(1, size // 7)):
        proof = inclusion_proof(index, size, TREE)
        other = (index + 1) % size
        if other != index:
            with pytest.raises(LogProofError) as e:
                verify_inclusion(LEAVES[other], index, size, proof, root)  # another leaf's hash
            assert _reason(e) == "root"
            with pytest.raises(LogProofError):
                verify_inclusion(LEAVES[index], other, size, proof, root)  # the proof at another index


@pytest.mark.parametrize("size", [2, 5, 8, 100, 256, 300])
def test_a_proof_of_the_wrong_length_is_refused(size):
    root = root_hash(size, TREE)
    index = size // 3
    proof = inclusion_proof(index, size, TREE)
    with pytest.raises(LogProofError) as e:
        verify_inclusion(LEAVES[index], index, size, [*proof, LEAVES[0]], root)
    assert _reason(e) == "length"
    with pytest.raises(LogProofError) as e:
        verify_inclusion(LEAVES[index], index, size, proof[:-1], root)
    assert _reason(e) in ("length", "root")
    old = size // 2 + 1
    cproof = consistency_proof(old, size, TREE)
    if cproof:
        with pytest.raises(LogProofError) as e:
            verify_consistency(old, size, root_hash(old, TREE), root, [*cproof, LEAVES[0]])
        assert _reason(e) == "length"
        with pytest.raises(LogProofError):
            verify_consistency(old, size, root_hash(old, TREE), root, cproof[:-1])


def test_a_smaller_trees_proof_and_root_do_not_pass_for_a_larger_tree():
    """Without the final length check, a proof in the tree of 256 leads to its root, an interior node of 300's."""
    with pytest.raises(LogProofError) as e:
        verify_inclusion(LEAVES[3], 3, 300, inclusion_proof(3, 256, TREE), root_hash(256, TREE))
    assert _reason(e) == "length"


def test_a_leaf_outside_the_tree_and_bad_hashes_are_refused():
    root = root_hash(10, TREE)
    with pytest.raises(LogProofError) as e:
        verify_inclusion(LEAVES[10], 10, 10, inclusion_proof(9, 10, TREE), root)
    assert _reason(e) == "index"
    with pytest.raises(LogProofError):
        verify_inclusion(LEAVES[0], -1, 10, [], root)
    with pytest.raises(LogProofError) as e:
        verify_inclusion(LEAVES[0][:31], 0, 10, inclusion_proof(0, 10, TREE), root)
    assert _reason(e) == "hash"
    with pytest.raises(LogProofError):
        verify_inclusion(LEAVES[0], 0, 1, [], EMPTY_ROOT)
    verify_inclusion(LEAVES[0], 0, 1, [], LEAVES[0])


@pytest.mark.parametrize("old,new", [(201, 300), (250, 256), (256, 300), (201, 201), (210, 211)])
def test_a_fork_is_not_consistent(old, new):
    """Two different roots at one size (leaf 200 replaced): no proof links one fork to the other."""
    forked_old = root_hash(old, FORK)
    assert forked_old != root_hash(old, TREE)
    with pytest.raises(LogProofError) as e:
        verify_consistency(old, new, forked_old, root_hash(new, TREE), consistency_proof(old, new, TREE))
    # a power-of-two old size is not in its proof: the fork's root then leads to another new root
    assert _reason(e) == ("root" if old & (old - 1) == 0 and old < new else "old-root")
    with pytest.raises(LogProofError) as e:
        verify_consistency(old, new, root_hash(old, TREE), root_hash(new, FORK), consistency_proof(old, new, FORK))
    assert _reason(e) in ("old-root", "root")


def test_the_forks_own_proof_does_not_lead_to_the_honest_root():
    with pytest.raises(LogProofError) as e:
        verify_consistency(150, 300, root_hash(150, TREE), root_hash(300, TREE), consistency_proof(150, 300, FORK))
    assert _reason(e) == "root"


def test_a_smaller_tree_after_a_larger_one_is_refused():
    with pytest.raises(LogProofError) as e:
        verify_consistency(300, 200, root_hash(300, TREE), root_hash(200, TREE), consistency_proof(200, 300, TREE))
    assert _reason(e) == "sizes"
    with pytest.raises(ValueError):
        consistency_proof(300, 200, TREE)


def test_size_zero_and_equal_sizes_take_an_empty_proof_and_matching_roots():
    verify_consistency(0, 300, EMPTY_ROOT, root_hash(300, TREE), [])
    with pytest.raises(LogProofError) as e:
        verify_consistency(0, 300, LEAVES[0], root_hash(300, TREE), [])
    assert _reason(e) == "old-root"
    with pytest.raises(LogProofError) as e:
        verify_consistency(0, 300, EMPTY_ROOT, root_hash(300, TREE), [LEAVES[0]])
    assert _reason(e) == "length"
    verify_consistency(300, 300, root_hash(300, TREE), root_hash(300, TREE), [])
    with pytest.raises(LogProofError):
        verify_consistency(300, 300, root_hash(300, FORK), root_hash(300, TREE), [])
    with pytest.raises(LogProofError) as e:
        verify_consistency(5, 300, root_hash(5, TREE), root_hash(300, TREE), [])
    assert _reason(e) == "length"


def test_the_right_edge_reports_every_stored_hash_once_and_resumes_from_stored_hashes():
    edge, stored = CompactRange(), {}
    for leaf in LEAVES[:100]:
        for level, index, h in edge.append(leaf):
            assert (level, index) not in stored
            stored[(level, index)] = h
    assert all(stored[k] == TREE(*k) for k in stored)
    assert len(stored) == 100 + 50 + 25 + 12 + 6 + 3 + 1
    resumed = CompactRange.from_hashes(100, TREE)
    for leaf in LEAVES[100:]:
        resumed.append(leaf)
    assert resumed.size == 300 and resumed.root() == root_hash(300, TREE)
    with pytest.raises(LogProofError):
        CompactRange().append(b"short")
