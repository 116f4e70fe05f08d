"""RFC 9162 §2.1 Merkle trees: hashing, tree heads, inclusion and consistency proofs, and the right edge.

Every computation reads the tree through a *stored-hash source*: a callable ``source(level, index)`` giving
the hash of the perfect subtree ``D[index * 2**level : (index + 1) * 2**level]`` (level 0: leaf hashes).
Those are exactly the hashes a log keeps (and that tlog-tiles serves), so the same functions run on an
in-memory list (:class:`MemoryHashes`), on stored tiles (``registry.tlog.tiles.TileHashes``) or on the
database. :class:`CompactRange` integrates new leaves in order and says which stored hashes each one
completes, without reading back anything but its own right edge.

Verification needs no source: it raises :class:`~registry.domain.errors.LogProofError` or returns nothing.

Example:
    >>> hashes = MemoryHashes([leaf_hash(b"a"), leaf_hash(b"b"), leaf_hash(b"c")])
    >>> root = root_hash(3, hashes)
    >>> proof = inclusion_proof(2, 3, hashes)
    >>> verify_inclusion(leaf_hash(b"c"), 2, 3, proof, root)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence

from registry.domain.errors import LogProofError

HASH_SIZE = 32
#: MTH({}) = SHA-256 of the empty string (RFC 9162 §2.1.1).
EMPTY_ROOT = hashlib.sha256(b"").digest()
#: Tree sizes are unsigned 63-bit (checkpoints, cosignature timestamps and Go's tlog share this bound).
MAX_TREE_SIZE = 2**63 - 1

StoredHashes = Callable[[int, int], bytes]
"""``source(level, index)``: the hash of perfect subtree ``index`` at ``level``; raises ``LookupError``
when it does not hold it."""


def leaf_hash(entry: bytes) -> bytes:
    """``SHA-256(0x00 || entry)``: the hash of one leaf (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an interior node (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def perfect_subtrees(start: int, end: int) -> list[tuple[int, int]]:
    """The maximal perfect subtrees covering ``D[start:end]``, left to right, as ``(level, index)``.

    For ``start = 0`` these are the subtrees named by the set bits of ``end``, largest first.
    """
    out = []
    while start < end:
        level = (end - start).bit_length() - 1
        while start % (1 << level):
            level -= 1
        out.append((level, start >> level))
        start += 1 << level
    return out


def subtree_hash(start: int, end: int, source: StoredHashes) -> bytes:
    """MTH(D[start:end]) for a range that is a node of the tree (``start`` aligned to its width's power of 2).

    Raises:
        ValueError: the range is empty or not a node of any tree.
    """
    width = end - start
    if width <= 0 or start % (1 << (width - 1).bit_length()):
        raise ValueError(f"[{start}, {end}) is not a subtree")
    hashes = [source(level, index) for level, index in perfect_subtrees(start, end)]
    return _fold(hashes)


def root_hash(size: int, source: StoredHashes) -> bytes:
    """MTH(D[0:size]), the tree head of the first ``size`` leaves (``EMPTY_ROOT`` for 0)."""
    _check_size(size)
    return EMPTY_ROOT if size == 0 else subtree_hash(0, size, source)


def inclusion_proof(index: int, size: int, source: StoredHashes) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 §2.1.3.1, leaf end first.

    Raises:
        ValueError: ``index`` is not a leaf of a tree of ``size``.
    """
    _check_size(size)
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of size {size}")
    proof = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            proof.append(subtree_hash(start + k, end, source))
            end = start + k
        else:
            proof.append(subtree_hash(start, start + k, source))
            start += k
    proof.reverse()
    return proof


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf`` is leaf ``index`` of the tree of ``size`` whose head is ``root`` (RFC 9162 §2.1.3.2).

    Raises:
        LogProofError: the proof does not prove it (a wrong index, length, hash or root).
    """
    if not 0 <= index < size <= MAX_TREE_SIZE:
        raise LogProofError("index", f"leaf {index} is not in a tree of size {size}", index=index, size=size)
    _check_hashes([leaf, root, *proof])
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise LogProofError("length", f"inclusion proof has more than the hashes a tree of size {size} needs",
                                index=index, size=size, length=len(proof))
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise LogProofError("length", f"inclusion proof has fewer hashes than a tree of size {size} needs",
                            index=index, size=size, length=len(proof))
    if not hmac.compare_digest(r, root):
        raise LogProofError("root", f"inclusion proof of leaf {index} does not lead to the root of size {size}",
                            index=index, size=size)


def consistency_proof(old_size: int, new_size: int, source: StoredHashes) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) of RFC 9162 §2.1.4.1 (empty when either size is 0 or they are equal).

    Raises:
        ValueError: ``old_size`` is larger than ``new_size``.
    """
    _check_size(new_size)
    if not 0 <= old_size <= new_size:
        raise ValueError(f"no consistency proof from size {old_size} to size {new_size}")
    if old_size in (0, new_size):
        return []
    proof = []
    start, end, complete = 0, new_size, True
    while old_size != end:
        k = _split(end - start)
        if old_size <= start + k:
            proof.append(subtree_hash(start + k, end, source))
            end = start + k
        else:
            proof.append(subtree_hash(start, start + k, source))
            start += k
            complete = False
    if not complete:
        proof.append(subtree_hash(start, end, source))
    proof.reverse()
    return proof


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """Check that the tree of ``new_size`` with head ``new_root`` extends the one of ``old_size`` with head
    ``old_root`` (RFC 9162 §2.1.4.2; from size 0 the old head must be the empty tree's and the proof empty).

    Raises:
        LogProofError: the trees are not shown consistent (sizes backwards, a fork, a wrong proof).
    """
    if old_size < 0 or new_size > MAX_TREE_SIZE:
        raise LogProofError("sizes", f"tree sizes {old_size} and {new_size} are out of range",
                            old_size=old_size, new_size=new_size)
    if old_size > new_size:
        raise LogProofError("sizes", f"tree size went back from {old_size} to {new_size}",
                            old_size=old_size, new_size=new_size)
    _check_hashes([old_root, new_root, *proof])
    if old_size == 0 or old_size == new_size:
        if proof:
            raise LogProofError("length", f"a consistency proof from size {old_size} to {new_size} is empty",
                                old_size=old_size, new_size=new_size, length=len(proof))
        expected = EMPTY_ROOT if old_size == 0 else new_root
        if not hmac.compare_digest(old_root, expected):
            raise LogProofError("old-root", f"the tree of size {old_size} has another root",
                                old_size=old_size, new_size=new_size)
        return
    if not proof:
        raise LogProofError("length", f"consistency proof from size {old_size} to {new_size} is empty",
                            old_size=old_size, new_size=new_size, length=0)
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise LogProofError("length", f"consistency proof from size {old_size} to {new_size} is too long",
                                old_size=old_size, new_size=new_size, length=len(proof))
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise LogProofError("length", f"consistency proof from size {old_size} to {new_size} is too short",
                            old_size=old_size, new_size=new_size, length=len(proof))
    if not hmac.compare_digest(fr, old_root):
        raise LogProofError("old-root", f"consistency proof does not lead to the root of size {old_size}",
                            old_size=old_size, new_size=new_size)
    if not hmac.compare_digest(sr, new_root):
        raise LogProofError("root", f"consistency proof does not lead to the root of size {new_size}",
                            old_size=old_size, new_size=new_size)


class CompactRange:
    """The right edge of a tree: the roots of the maximal perfect subtrees covering ``D[0:size]``.

    It is all a log needs to append leaves in order and compute its head; :meth:`append` returns the stored
    hashes each new leaf completes, for the caller to keep (in tiles). Rebuild it after a restart with
    :meth:`from_hashes` (``source`` reading what was stored).
    """

    def __init__(self) -> None:
        self.size = 0
        self._edge: list[bytes] = []

    @classmethod
    def from_hashes(cls, size: int, source: StoredHashes) -> CompactRange:
        """The right edge of the stored tree of ``size`` leaves."""
        _check_size(size)
        edge = cls()
        edge.size = size
        edge._edge = [source(level, index) for level, index in perfect_subtrees(0, size)]
        return edge

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add leaf ``self.size``; returns the ``(level, index, hash)`` it completes, the leaf's own first."""
        _check_hashes([leaf])
        index, level, h = self.size, 0, leaf
        completed = [(0, index, h)]
        while index >> level & 1:
            h = node_hash(self._edge.pop(), h)
            level += 1
            completed.append((level, index >> level, h))
        self._edge.append(h)
        self.size += 1
        return completed

    def hashes(self) -> list[bytes]:
        """The edge itself: the hashes of ``perfect_subtrees(0, size)``, left to right (what to store)."""
        return list(self._edge)

    def root(self) -> bytes:
        """MTH(D[0:size])."""
        return _fold(self._edge) if self._edge else EMPTY_ROOT


class MemoryHashes:
    """Every stored hash of a tree held in a dict: a stored-hash source for tests and small trees."""

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self._stored: dict[tuple[int, int], bytes] = {}
        self._edge = CompactRange()
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        return self._edge.size

    def append(self, leaf: bytes) -> None:
        for level, index, h in self._edge.append(leaf):
            self._stored[(level, index)] = h

    def __call__(self, level: int, index: int) -> bytes:
        return self._stored[(level, index)]


def _split(width: int) -> int:
    """The largest power of two smaller than ``width`` (> 1): the size of the left subtree."""
    return 1 << ((width - 1).bit_length() - 1)


def _fold(hashes: Sequence[bytes]) -> bytes:
    h = hashes[-1]
    for left in reversed(hashes[:-1]):
        h = node_hash(left, h)
    return h


def _check_size(size: int) -> None:
    if not 0 <= size <= MAX_TREE_SIZE:
        raise ValueError(f"tree size {size} is out of range")


def _check_hashes(hashes: Iterable[bytes]) -> None:
    for h in hashes:
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise LogProofError("hash", "a proof hash is not 32 bytes")


MAX_PROOF_HASHES = 64
"""The most hashes a proof may carry (a tree of 2**64 leaves needs no more)."""


def decode_hashes(hashes: object) -> list[bytes]:
    """A proof's hashes: a list of at most 64 base64 strings of 32 bytes each.

    Raises:
        LogProofError: anything else (``reason`` ``hash``).
    """
    if not isinstance(hashes, list) or len(hashes) > MAX_PROOF_HASHES or not all(isinstance(h, str) for h in hashes):
        raise LogProofError("hash", f"a proof is a list of at most {MAX_PROOF_HASHES} base64 hashes")
    try:
        decoded = [base64.b64decode(h, validate=True) for h in hashes]
    except (binascii.Error, ValueError):
        raise LogProofError("hash", "a proof hash is not base64") from None
    if any(len(h) != HASH_SIZE for h in decoded):
        raise LogProofError("hash", "a proof hash is not 32 bytes")
    return decoded
