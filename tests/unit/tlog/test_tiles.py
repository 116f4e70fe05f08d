"""C2SP tlog-tiles: paths, the tiles a tree is served as, and proofs computed from tiles alone."""

import random

import pytest

from registry.domain.errors import InvalidTileError, LogProofError
from registry.tlog.merkle import (
    MemoryHashes,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    verify_consistency,
    verify_inclusion,
)
from registry.tlog.tiles import (
    EntryBundle,
    Tile,
    TileHashes,
    build_tile,
    check_entry_bundle,
    encode_entry_bundle,
    entry_bundles_for_size,
    new_tiles,
    parse_entry_bundle,
    parse_tile_path,
    tile_of,
    tiles_for_size,
)


@pytest.mark.parametrize("tile,path", [
    (Tile(0, 1234067), "tile/0/x001/x234/067"),
    (Tile(0, 0), "tile/0/000"),
    (Tile(1, 5), "tile/1/005"),
    (Tile(2, 1000), "tile/2/x001/000"),
    (Tile(0, 1234067, 7), "tile/0/x001/x234/067.p/7"),
    (Tile(63, 999, 255), "tile/63/999.p/255"),
    (EntryBundle(1234067), "tile/entries/x001/x234/067"),
    (EntryBundle(3, 1), "tile/entries/003.p/1"),
])
def test_paths_round_trip(tile, path):
    assert tile.path == path
    assert parse_tile_path(path) == tile


@pytest.mark.parametrize("path", [
    "tile/0/67", "tile/0/0067", "tile/0/x000/067", "tile/0/001/067", "tile/0/x001/x234",
    "tile/00/000", "tile/64/000", "tile/-1/000", "tile/0/000.p/0", "tile/0/000.p/256", "tile/0/000.p/07",
    "tile/0/000.p/", "tile/0/000.p", "tile/0/x1/000", "tile/entries/67", "tiles/0/000", "tile/0",
    "tile/0/000/", "tile/a/000", "tile/0/0x1", "tile/0/\u0661\u0662\u0663",
    "tile/0/" + "x999/" * 1500 + "999",  # 4,503 digits: past int()'s limit, still an InvalidTileError
])
def test_non_canonical_paths_are_refused(path):
    with pytest.raises(InvalidTileError):
        parse_tile_path(path)


def test_the_tiles_of_the_specs_examples():
    assert [t.path for t in tiles_for_size(256)] == ["tile/0/000", "tile/1/000.p/1"]
    tiles = tiles_for_size(70000)
    level0 = [t for t in tiles if t.level == 0]
    assert len([t for t in level0 if t.width == 256]) == 273 and level0[-1] == Tile(0, 273, 112)
    assert [t for t in tiles if t.level > 0] == [Tile(1, 0), Tile(1, 1, 17), Tile(2, 0, 1)]
    assert tiles_for_size(0) == [] and tiles_for_size(1) == [Tile(0, 0, 1)]
    assert entry_bundles_for_size(513) == [EntryBundle(0), EntryBundle(1), EntryBundle(2, 1)]


def test_new_tiles_are_what_growth_adds():
    assert new_tiles(100, 100) == []
    assert new_tiles(100, 101) == [Tile(0, 0, 101)]
    assert new_tiles(255, 256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert new_tiles(300, 600) == [Tile(0, 1), Tile(0, 2, 88), Tile(1, 0, 2)]
    for old, new in [(0, 70000), (1000, 70000), (65535, 65537)]:
        grown = set(tiles_for_size(new)) - set(tiles_for_size(old))
        assert set(new_tiles(old, new)) == grown
    with pytest.raises(ValueError):
        new_tiles(10, 9)


def test_where_a_stored_hash_lives():
    assert tile_of(0, 300, 70000) == Tile(0, 1)
    assert tile_of(0, 69999, 70000) == Tile(0, 273, 112)
    assert tile_of(1, 272, 70000) == Tile(1, 1, 17)
    with pytest.raises(InvalidTileError):
        tile_of(0, 70000, 70000)


SIZE = 70_000
ENTRIES = [i.to_bytes(4, "big") for i in range(SIZE)]
TREE = MemoryHashes(leaf_hash(e) for e in ENTRIES)
CHECKPOINTS = [1, 255, 256, 257, 511, 40_000, 65535, 65536, 65537, SIZE]


@pytest.fixture(scope="module")
def served():
    """What a log would serve after checkpoints at each of CHECKPOINTS: the tiles of each of those sizes."""
    return {t: build_tile(t, TREE) for size in CHECKPOINTS for t in tiles_for_size(size)}


def test_proofs_from_tiles_equal_proofs_from_leaves(served):
    rng = random.Random(22)
    for size in CHECKPOINTS:
        hashes = TileHashes(size, served.__getitem__)
        root = root_hash(size, hashes)
        assert root == root_hash(size, TREE)
        for index in {0, size - 1, rng.randrange(size)}:
            proof = inclusion_proof(index, size, hashes)
            assert proof == inclusion_proof(index, size, TREE)
            verify_inclusion(leaf_hash(ENTRIES[index]), index, size, proof, root)
        for old in {1, size, rng.randint(1, size)}:
            assert consistency_proof(old, size, hashes) == consistency_proof(old, size, TREE)


def test_a_tile_reader_touches_only_the_tiles_of_its_size(served):
    read = []
    hashes = TileHashes(40_000, lambda t: read.append(t) or served[t])
    root_hash(40_000, hashes)
    assert set(read) <= set(tiles_for_size(40_000)) and len(read) == len(set(read))
    with pytest.raises(LookupError):
        hashes(0, 40_000)


def test_a_forged_tile_makes_the_proof_fail(served):
    root = root_hash(SIZE, TREE)
    forged = dict(served)
    data = bytearray(forged[Tile(0, 3)])
    data[0] ^= 1
    forged[Tile(0, 3)] = bytes(data)
    hashes = TileHashes(SIZE, forged.__getitem__)
    with pytest.raises(LogProofError):
        verify_inclusion(leaf_hash(ENTRIES[770]), 770, SIZE, inclusion_proof(770, SIZE, hashes), root)
    short = dict(served)
    short[Tile(0, 3)] = served[Tile(0, 3)][:-1]
    with pytest.raises(InvalidTileError):
        inclusion_proof(770, SIZE, TileHashes(SIZE, short.__getitem__))
    old = root_hash(1000, TREE)
    with pytest.raises(LogProofError):
        verify_consistency(1000, SIZE, old, root, consistency_proof(1000, SIZE, hashes))


def test_entry_bundles_round_trip_and_match_their_level0_tile(served):
    bundle = EntryBundle(273, 112)
    entries = ENTRIES[273 * 256:]
    data = encode_entry_bundle(entries)
    assert data[:6] == b"\x00\x04" + ENTRIES[273 * 256]
    assert parse_entry_bundle(bundle, data) == entries
    check_entry_bundle(bundle, entries, served[Tile(0, 273, 112)])
    with pytest.raises(InvalidTileError):
        check_entry_bundle(bundle, [b"x", *entries[1:]], served[Tile(0, 273, 112)])
    for bad in [data[:-1], data[:-6], data + b"\x00"]:
        with pytest.raises(InvalidTileError):
            parse_entry_bundle(bundle, bad)
    with pytest.raises(InvalidTileError):
        encode_entry_bundle([b"x" * 65536])
    with pytest.raises(InvalidTileError):
        encode_entry_bundle([])
