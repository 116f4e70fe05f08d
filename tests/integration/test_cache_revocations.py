"""The node's reader of the event stream against the real API: revocations applied to a real node cache.

Two approved versions of one model share their tokenizer and config files (only the weights differ);
``prod`` gives the first, ``stable`` the second, and ``warm_once`` caches both. A revocation read from
``GET /v1/events`` removes the revoked version's own blobs and keeps the shared ones; the cursor kept in
the cache lets a restarted reader apply a revocation made while it was down; a refused token is told.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from api.app import create_app
from registry.client.api import RegistryApi
from registry.domain.aliases import make_target
from registry.domain.errors import RevokedError
from registry.domain.refs import parse_ref
from registry.node.cache import NodeCache
from registry.node.fetch import warm_once
from registry.node.opener import NodePolicy, ReleaseOpener
from registry.node.revocations import RevocationFollower
from registry.services import aliases, revocations
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files


@pytest.fixture
def node(container, tmp_path):
    admin = make_admin(container, "acme")
    numbers = [awaiting_version(container, admin, tmp_path / f"m{seed}", "acme", "tiny", seed=seed,
                                files=tiny_model_files(seed)) for seed in (41, 42)]
    for number, alias in zip(numbers, ("prod", "stable")):
        approve_standin(container, "acme", "tiny", number)
        with container.session_factory() as session:
            aliases.promote(session, admin, "acme", "tiny", alias, make_target(number), policy=container.policy,
                            clock=container.clock)
    token = role_token(container, "node-1", "acme", "node")
    with serve_in_thread(create_app(container)) as url:
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        with RegistryApi(url, token) as api:
            yield {"url": url, "api": api, "root": root, "admin": admin, "numbers": numbers,
                   "cache_dir": tmp_path / "cache"}


def _warm(node, cache: NodeCache, ref: str):
    opener = ReleaseOpener(node["api"], NodePolicy(node["root"]), state_dir=cache.root)
    return warm_once(parse_ref(ref), opener=opener, cache=cache, etag=None, wait=None)[1]


def _revoke(container, node, number: int) -> None:
    with container.session_factory() as session:
        revocations.revoke(session, node["admin"], "acme", "tiny", number, "bad weights", clock=container.clock)


def _digests(seed: int) -> set[str]:
    import hashlib

    return {hashlib.sha256(data).hexdigest() for data in tiny_model_files(seed).values()}


def _cached(cache: NodeCache) -> set[str]:
    return {b.digest for b in cache.blobs() if b.tenant == "acme"}


def test_a_revocation_removes_the_versions_own_blobs_keeps_shared_ones_and_survives_a_restart(container, node):
    first, second = node["numbers"]
    cache = NodeCache(node["cache_dir"])
    assert _warm(node, cache, "acme/tiny@prod").version == first
    assert _warm(node, cache, "acme/tiny@stable").version == second
    shared = _digests(41) & _digests(42)
    own_first, own_second = _digests(41) - _digests(42), _digests(42) - _digests(41)
    assert shared and own_first and own_second and _cached(cache) >= _digests(41) | _digests(42)
    told: list = []
    follower = RevocationFollower(node["api"], cache, on_revoked=told.append, on_problem=pytest.fail)
    follower.catch_up()
    assert not told and follower.cursor > 0

    _revoke(container, node, first)
    follower.catch_up()
    [report] = told
    assert (report.tenant, report.model, report.version) == ("acme", "tiny", first)
    assert set(report.removed) == own_first and set(report.kept) == shared
    assert not _cached(cache) & own_first and _cached(cache) >= shared | own_second
    follower.catch_up()
    assert len(told) == 1, "a revocation is applied once"
    # The alias on the revoked version is refused by the registry, and the cache never takes it back.
    with pytest.raises(RevokedError):
        _warm(node, cache, "acme/tiny@prod")
    assert cache.is_revoked("acme", "tiny", first)

    # The warmer is down while the second version is revoked; a new one resumes from the saved cursor.
    cursor = follower.cursor
    cache.close()
    _revoke(container, node, second)
    restarted = NodeCache(node["cache_dir"])
    told_after: list = []
    again = RevocationFollower(node["api"], restarted, on_revoked=told_after.append, on_problem=pytest.fail)
    assert again.cursor == cursor
    again.catch_up()
    assert [r.version for r in told_after] == [second]
    assert not _cached(restarted) & (_digests(41) | _digests(42))
    assert restarted.revocation_totals()["revoked_versions"] == 2


def test_a_refused_token_is_told_and_empty_answers_are_not_polled_faster_than_once_a_second(container, node):
    cache = NodeCache(node["cache_dir"])
    problems: list[str] = []
    with RegistryApi(node["url"], "mr_not-a-token") as refused:
        follower = RevocationFollower(refused, cache, on_revoked=pytest.fail, on_problem=problems.append)
        stop = threading.Event()
        thread = threading.Thread(target=follower.run, args=(stop,))
        thread.start()
        time.sleep(0.5)
        stop.set()
        thread.join(5)
    assert len(problems) == 1 and "refuses the node's token" in problems[0] and "HTTP 401" in problems[0]

    reads: list[float] = []
    three_reads = threading.Event()
    api = node["api"]
    real_events = api.events

    def counted(*args, **kwargs):
        reads.append(time.monotonic())
        if len(reads) >= 3:
            three_reads.set()
        return real_events(*args, **kwargs)

    api.events = counted  # the real server answers; the test only counts the reads
    follower = RevocationFollower(api, cache, on_revoked=pytest.fail, on_problem=pytest.fail, wait=None)
    stop = threading.Event()
    thread = threading.Thread(target=follower.run, args=(stop,))
    thread.start()
    # Three reads of an empty stream, however long the machine takes to make them; then their spacing.
    assert three_reads.wait(60), reads
    stop.set()
    thread.join(5)
    assert len(reads) >= 3, reads
    assert all(b - a >= 0.95 for a, b in zip(reads, reads[1:])), reads
