"""C2SP tlog-tiles: the tree served as tiles of 256 hashes, and the entries as bundles.

Tile ``N`` at tile level ``L`` holds the stored hashes at Merkle level ``8 * L``, indices ``256 * N`` up to
``256 * N + W - 1`` (``W`` = 256 for a full tile, 1..255 for the partial one at the right edge), served at
``tile/<L>/<N>[.p/<W>]``; ``N`` is written in 3-digit path elements, all but the last prefixed with ``x``
(1234067 -> ``x001/x234/067``). The entry bundle ``tile/entries/<N>[.p/<W>]`` holds the entries whose leaf
hashes tile ``0/N`` holds, each a big-endian uint16 length and its bytes.

:class:`TileHashes` is a stored-hash source (``registry.tlog.merkle``) that reads tiles, so proofs are
computed from what a log serves; a proof computed from tiles a log forged fails verification against the
checkpoint's root.

Example:
    >>> Tile(0, 1234067).path
    'tile/0/x001/x234/067'
    >>> [t.path for t in tiles_for_size(257)]
    ['tile/0/000', 'tile/0/001.p/1', 'tile/1/000.p/1']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.domain.errors import InvalidTileError
from registry.tlog.merkle import HASH_SIZE, MAX_TREE_SIZE, StoredHashes, leaf_hash, node_hash

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_TILE_LEVEL = 63
MAX_ENTRY_BYTES = 0xFFFF


@dataclass(frozen=True)
class Tile:
    """A Merkle tile: level, index and width (256 when full). ``level`` is the tile level, not the Merkle one."""

    level: int
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        if not 0 <= self.level <= MAX_TILE_LEVEL or self.index < 0 or not 1 <= self.width <= TILE_WIDTH:
            raise InvalidTileError(f"no tile at level {self.level}, index {self.index}, width {self.width}")

    @property
    def path(self) -> str:
        return f"tile/{self.level}/{_encode_index(self.index, self.width)}"


@dataclass(frozen=True)
class EntryBundle:
    """An entry bundle: the entries of level-0 tile ``index`` (``width`` of them)."""

    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        if self.index < 0 or not 1 <= self.width <= TILE_WIDTH:
            raise InvalidTileError(f"no entry bundle at index {self.index}, width {self.width}")

    @property
    def path(self) -> str:
        return f"tile/entries/{_encode_index(self.index, self.width)}"


def _encode_index(index: int, width: int) -> str:
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i:i + 3] for i in range(0, len(digits), 3)]
    path = "/".join([*("x" + g for g in groups[:-1]), groups[-1]])
    return path if width == TILE_WIDTH else f"{path}.p/{width}"


def parse_tile_path(path: str) -> Tile | EntryBundle:
    """The tile or entry bundle a path (after the log's prefix) names; only the canonical spelling.

    Raises:
        InvalidTileError: not ``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]`` as the spec writes them.
    """
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        raise InvalidTileError("a tile path is tile/<L>/<N>[.p/<W>]", path=path)
    width = TILE_WIDTH
    if len(parts) >= 4 and parts[-2].endswith(".p") and parts[-2] != ".p":
        width = _decimal(parts[-1], path)
        parts = [*parts[:-2], parts[-2][:-2]]
    groups = parts[2:]
    if not all(len(g) == 3 and g.isascii() and g.isdigit() for g in [groups[-1], *(g[1:] for g in groups[:-1])]) \
            or not all(g.startswith("x") for g in groups[:-1]):
        raise InvalidTileError("the index is not written in 3-digit elements, all but the last with x", path=path)
    digits = "".join(g.removeprefix("x") for g in groups)
    # Bounded before int(): past 4,300 digits int() raises ValueError; no tree has a tile index this long.
    if len(digits) > len(str(MAX_TREE_SIZE)):
        raise InvalidTileError("the index is larger than any tree's", path=path)
    index = int(digits)
    tile: Tile | EntryBundle
    if parts[1] == "entries":
        tile = EntryBundle(index, width)
    else:
        tile = Tile(_decimal(parts[1], path), index, width)
    if tile.path != path:
        raise InvalidTileError("not the canonical path of that tile", path=path)
    return tile


def _decimal(text: str, path: str) -> int:
    if not (text.isascii() and text.isdigit()) or (text != "0" and text.startswith("0")) or len(text) > 3:
        raise InvalidTileError(f"{text!r} is not a small decimal with no leading zeroes", path=path)
    return int(text)


def tile_of(tile_level: int, index: int, size: int) -> Tile:
    """The tile (full, or the partial one of the tree of ``size``) holding stored hash ``index`` at Merkle
    level ``8 * tile_level``.

    Raises:
        InvalidTileError: the tree of ``size`` has no such stored hash.
    """
    count = _stored_count(tile_level, size)
    if not 0 <= index < count:
        raise InvalidTileError(f"a tree of size {size} has no hash {index} at tile level {tile_level}")
    n = index // TILE_WIDTH
    return Tile(tile_level, n, min(TILE_WIDTH, count - n * TILE_WIDTH))


def tiles_for_size(size: int) -> list[Tile]:
    """Every tile a tree of ``size`` is served as, full and partial, by level then index."""
    return new_tiles(0, size)


def new_tiles(old_size: int, new_size: int) -> list[Tile]:
    """The tiles a log must write when it grows from ``old_size`` to ``new_size`` (those that did not exist:
    new full tiles and the new partial ones), by level then index."""
    if not 0 <= old_size <= new_size <= MAX_TREE_SIZE:
        raise ValueError(f"the tree cannot grow from {old_size} to {new_size}")
    out = []
    level = 0
    while (count := _stored_count(level, new_size)) > 0:
        old_count = _stored_count(level, old_size)
        for n in range(old_count // TILE_WIDTH, -(-count // TILE_WIDTH)):
            width = min(TILE_WIDTH, count - n * TILE_WIDTH)
            old_width = min(TILE_WIDTH, max(0, old_count - n * TILE_WIDTH))
            if width != old_width:
                out.append(Tile(level, n, width))
        level += 1
    return out


def entry_bundles_for_size(size: int) -> list[EntryBundle]:
    """The entry bundles of a tree of ``size``, full and the partial one."""
    return [EntryBundle(t.index, t.width) for t in tiles_for_size(size) if t.level == 0]


def _stored_count(tile_level: int, size: int) -> int:
    return size >> (TILE_HEIGHT * tile_level)


def build_tile(tile: Tile, source: StoredHashes) -> bytes:
    """The tile's bytes: its ``width`` stored hashes from ``source``, concatenated."""
    level = TILE_HEIGHT * tile.level
    start = tile.index * TILE_WIDTH
    return b"".join(source(level, start + i) for i in range(tile.width))


def tile_hashes(tile: Tile, data: bytes) -> list[bytes]:
    """The hashes in a tile's bytes.

    Raises:
        InvalidTileError: the bytes are not ``width`` hashes.
    """
    if len(data) != tile.width * HASH_SIZE:
        raise InvalidTileError(f"{tile.path} is {len(data)} bytes, not {tile.width * HASH_SIZE}", path=tile.path)
    return [data[i:i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def encode_entry_bundle(entries: Sequence[bytes]) -> bytes:
    """Entries as a bundle: each a big-endian uint16 length, then its bytes.

    Raises:
        InvalidTileError: no entries, more than 256, or one longer than 65535 bytes.
    """
    if not 1 <= len(entries) <= TILE_WIDTH:
        raise InvalidTileError(f"a bundle holds 1 to 256 entries, not {len(entries)}")
    if any(len(e) > MAX_ENTRY_BYTES for e in entries):
        raise InvalidTileError("an entry is longer than 65535 bytes")
    return b"".join(len(e).to_bytes(2, "big") + e for e in entries)


def parse_entry_bundle(bundle: EntryBundle, data: bytes) -> list[bytes]:
    """The entries in a bundle's bytes.

    Raises:
        InvalidTileError: a truncated entry, or not ``bundle.width`` entries.
    """
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise InvalidTileError(f"{bundle.path} ends inside a length", path=bundle.path)
        length = int.from_bytes(data[at:at + 2], "big")
        if at + 2 + length > len(data):
            raise InvalidTileError(f"{bundle.path} ends inside an entry", path=bundle.path)
        entries.append(data[at + 2:at + 2 + length])
        at += 2 + length
    if len(entries) != bundle.width:
        raise InvalidTileError(f"{bundle.path} holds {len(entries)} entries, not {bundle.width}", path=bundle.path)
    return entries


def check_entry_bundle(bundle: EntryBundle, entries: Iterable[bytes], level0: bytes) -> None:
    """Check that each entry hashes to its leaf hash in the bundle's level-0 tile bytes.

    Raises:
        InvalidTileError: an entry whose leaf hash is not the tile's.
    """
    tile = Tile(0, bundle.index, bundle.width)
    for i, (entry, expected) in enumerate(zip(entries, tile_hashes(tile, level0), strict=True)):
        if leaf_hash(entry) != expected:
            raise InvalidTileError(f"entry {bundle.index * TILE_WIDTH + i} does not hash to its leaf",
                                   path=bundle.path)


def tiles_read(size: int, compute: Callable[[StoredHashes], object]) -> set[Tile]:
    """The tiles of the tree of ``size`` that ``compute`` reads through a :class:`TileHashes`, found by
    running it once over placeholder hashes: which hashes a root or proof reads depends on the sizes and
    indices, never on the hashes. A caller reads them all at once and passes them to :class:`TileHashes`.

    Example:
        >>> from registry.tlog.merkle import inclusion_proof
        >>> sorted(t.path for t in tiles_read(300, lambda source: inclusion_proof(3, 300, source)))
        ['tile/0/000', 'tile/0/001.p/44']
    """
    touched: set[Tile] = set()

    def placeholder(level: int, index: int) -> bytes:
        if (index + 1) << level > size:
            raise LookupError(f"a tree of size {size} has no stored hash {index} at level {level}")
        tile_level, rest = divmod(level, TILE_HEIGHT)
        touched.add(tile_of(tile_level, index << rest, size))
        return bytes(HASH_SIZE)

    compute(placeholder)
    return touched


class TileHashes:
    """A stored-hash source for the tree of ``size`` reading tiles through ``read_tile(tile) -> bytes``.

    Each tile is read once, and none of those given as ``read`` (see :func:`tiles_read`). Hashes between
    tile levels (Merkle levels not a multiple of 8) are computed
    from the tile below. ``read_tile`` may raise ``LookupError`` for a tile it lacks.
    """

    def __init__(self, size: int, read_tile: Callable[[Tile], bytes], *,
                 read: Mapping[Tile, bytes] = {}) -> None:
        self.size = size
        self._read = read_tile
        self._tiles: dict[Tile, list[bytes]] = {tile: tile_hashes(tile, data) for tile, data in read.items()}

    def __call__(self, level: int, index: int) -> bytes:
        if (index + 1) << level > self.size:
            raise LookupError(f"a tree of size {self.size} has no stored hash {index} at level {level}")
        tile_level, rest = divmod(level, TILE_HEIGHT)
        first = index << rest
        hashes = self._hashes(tile_of(tile_level, first, self.size))
        offset = first % TILE_WIDTH
        span = hashes[offset:offset + (1 << rest)]
        while len(span) > 1:
            span = [node_hash(span[i], span[i + 1]) for i in range(0, len(span), 2)]
        return span[0]

    def _hashes(self, tile: Tile) -> list[bytes]:
        if tile not in self._tiles:
            self._tiles[tile] = tile_hashes(tile, self._read(tile))
        return self._tiles[tile]

