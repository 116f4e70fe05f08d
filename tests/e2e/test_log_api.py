"""The verifiable audit log's public read API (``/log/...``) served by a real uvicorn server, on SQLite and
PostgreSQL, read as a C2SP tlog-tiles client would.

What is checked: the checkpoint verifies with the log key ``/v1/keys`` serves and has the spec's content
type and a short cache; tiles and entry bundles have the spec's type and immutable caching, and hash to the
checkpoint's root; pymerkle (an independent RFC 9162 implementation) fed the commitments agrees on every
root the tiles give; inclusion and consistency proofs fetched over HTTP verify with the pure core; bad
tile paths, trees the log has not reached and nonsense proof requests are problem+json.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from pymerkle import InmemoryTree

from api.app import create_app
from registry import audit
from registry.services import tlog
from registry.tlog import merkle
from registry.tlog.checkpoint import open_checkpoint
from registry.tlog.note import parse_verifier_key
from registry.tlog.tiles import EntryBundle, TileHashes, entry_bundles_for_size, parse_entry_bundle
from tests.support.live_app import serve_in_thread

EVENTS = 700


@pytest.fixture
def log(container):
    """A registry whose log holds EVENTS events and a checkpoint of them, served on loopback."""
    with container.session_factory() as session:
        for i in range(EVENTS):
            audit.append(session, actor="alice", action="test.event", subject=f"thing/{i}", tenant="acme")
        session.commit()
    tlog.integrate_audit_log(container.session_factory, batch=300)
    tlog.sign_checkpoint_if_due(container.session_factory, container.log_key, interval=10, now=container.clock.now())
    with serve_in_thread(create_app(container)) as url, httpx.Client(base_url=url) as client:
        yield client


def opened_checkpoint(client):
    key = client.get("/v1/keys").json()["log"]
    r = client.get("/log/checkpoint")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["cache-control"] == "public, max-age=5"
    return open_checkpoint(r.content, key["origin"], parse_verifier_key(key["verifier_key"])).checkpoint


def fetch_tile(client, tile) -> bytes:
    r = client.get(f"/log/{tile.path}")
    assert r.status_code == 200, (tile.path, r.text)
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    return r.content


def test_tiles_hash_to_the_signed_root_and_pymerkle_agrees_on_every_root(log):
    checkpoint = opened_checkpoint(log)
    assert checkpoint.size == EVENTS
    source = TileHashes(EVENTS, lambda tile: fetch_tile(log, tile))
    assert merkle.root_hash(EVENTS, source) == checkpoint.root_hash
    commitments = []
    for bundle in entry_bundles_for_size(EVENTS):
        commitments += parse_entry_bundle(bundle, fetch_tile(log, bundle))
    theirs = InmemoryTree(algorithm="sha256")
    for commitment in commitments:
        theirs.append_entry(commitment)
    for size in (1, 2, 255, 256, 257, 511, 512, 513, EVENTS):
        # Smaller trees from the partial tiles of that size, as a client that saved that checkpoint reads them.
        assert merkle.root_hash(size, TileHashes(size, lambda tile: fetch_tile(log, tile))) == theirs.get_root(size)


def test_proofs_fetched_over_http_verify_with_the_pure_core(log):
    checkpoint = opened_checkpoint(log)
    bundle = EntryBundle(1)
    commitments = parse_entry_bundle(bundle, fetch_tile(log, bundle))
    for index in (256, 300, 511):
        r = log.get("/log/proof/inclusion", params={"index": index, "size": EVENTS})
        assert r.status_code == 200, r.text
        body = r.json()
        hashes = [base64.b64decode(h) for h in body["hashes"]]
        leaf = merkle.leaf_hash(commitments[index - 256])
        assert base64.b64decode(body["leaf_hash"]) == leaf
        merkle.verify_inclusion(leaf, index, EVENTS, hashes, checkpoint.root_hash)
    for first in (1, 256, 300, EVENTS):
        old_root = merkle.root_hash(first, TileHashes(first, lambda tile: fetch_tile(log, tile)))
        body = log.get("/log/proof/consistency", params={"first": first, "second": EVENTS}).json()
        merkle.verify_consistency(first, EVENTS, old_root, checkpoint.root_hash,
                                  [base64.b64decode(h) for h in body["hashes"]])


BAD_TILE_PATHS = [
    "tile/0/0", "tile/0/000.p/0", "tile/0/000.p/256", "tile/00/000", "tile/0/x000", "tile/0/001/002",
    "tile/0/003", "tile/0/002.p/189", "tile/3/000.p/1", "tile/entries/003", "tile/-1/000", "tile/0/000.p/01",
    "tile/entries/", "tile/64/000",
    # An index of 4,503 digits (past int()'s 4,300): a 404, not a 500.
    "tile/0/" + "x999/" * 1500 + "999", "tile/entries/" + "x123/" * 1500 + "456.p/7"]
BAD_PROOFS = [
    ("inclusion", {"index": 5, "size": 5}, 422, "log-proof-request-invalid"),
    ("inclusion", {"index": 0, "size": EVENTS + 1}, 404, "log-tree-not-found"),
    ("inclusion", {"index": -1, "size": 3}, 422, None),
    ("consistency", {"first": 9, "second": 3}, 422, "log-proof-request-invalid"),
    ("consistency", {"first": 1, "second": 2**63}, 422, None),
    ("consistency", {"first": 1, "second": "9" * 5000}, 422, None),
    ("consistency", {"first": 1, "second": EVENTS + 1}, 404, "log-tree-not-found"),
]


def test_a_path_that_is_no_tile_of_the_log_and_a_proof_it_cannot_give_are_problems(log):
    for path in BAD_TILE_PATHS:
        r = log.get(f"/log/{path}")
        assert r.status_code == 404, (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"].endswith("/log-tile-not-found"), path
    for route, params, status, code in BAD_PROOFS:
        r = log.get(f"/log/proof/{route}", params=params)
        assert r.status_code == status, (route, params, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        if code is not None:
            assert r.json()["type"].endswith("/" + code)


def test_before_the_first_checkpoint_there_is_none(container):
    with serve_in_thread(create_app(container)) as url:
        r = httpx.get(f"{url}/log/checkpoint")
    assert r.status_code == 404
    assert r.json()["type"].endswith("/log-checkpoint-not-found")
