"""The node cache applies a revocation: the version's blobs go, blobs a live version lists stay, it never returns."""

from __future__ import annotations

import hashlib
import threading

import pytest

from registry.domain.errors import InvalidInputError
from registry.node.cache import NodeCache


def _put(cache: NodeCache, tenant: str, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    partial = cache.partial_path(tenant, digest)
    partial.write_bytes(data)
    cache.commit(tenant, digest, len(data), partial)
    return digest, len(data)


@pytest.fixture
def cache(tmp_path):
    return NodeCache(tmp_path / "cache")


def _cached(cache: NodeCache, tenant: str, digest: str) -> bool:
    return cache.blob_path(tenant, digest).exists()


def test_revoked_version_loses_its_own_blobs_and_keeps_those_a_live_version_lists(cache):
    shared, own, other = (_put(cache, "acme", data) for data in (b"tokenizer", b"weights-1", b"weights-2"))
    assert cache.hold("acme", "tiny", 1, dict([shared, own]))
    assert cache.hold("acme", "tiny", 2, dict([shared, other]))
    report = cache.remove_revoked("acme", "tiny", 1)
    assert report.held and report.newly_revoked
    assert report.removed == [own[0]] and report.removed_bytes == own[1] and report.kept == [shared[0]]
    assert not _cached(cache, "acme", own[0])
    assert _cached(cache, "acme", shared[0]) and _cached(cache, "acme", other[0])
    assert cache.revocation_totals() == {"revoked_versions": 1, "revoked_blobs_removed": 1,
                                         "revoked_bytes_removed": own[1]}
    # Once the other version is revoked too, the shared blob has no live holder left.
    second = cache.remove_revoked("acme", "tiny", 2)
    assert sorted(second.removed) == sorted([shared[0], other[0]]) and not second.kept
    assert not any(cache.blobs())
    assert cache.revocation_totals()["revoked_versions"] == 2


def test_a_revocation_applied_twice_counts_once_and_another_tenants_blob_is_not_touched(cache):
    blob = _put(cache, "acme", b"weights")
    same_bytes_elsewhere = _put(cache, "beta", b"weights")
    cache.hold("acme", "tiny", 1, dict([blob]))
    cache.hold("beta", "tiny", 1, dict([same_bytes_elsewhere]))
    assert cache.remove_revoked("acme", "tiny", 1).removed == [blob[0]]
    again = cache.remove_revoked("acme", "tiny", 1)
    assert again.held and not again.newly_revoked and not again.removed
    assert cache.revocation_totals()["revoked_versions"] == 1
    assert _cached(cache, "beta", blob[0]) and not cache.is_revoked("beta", "tiny", 1)


def test_a_revoked_version_is_never_held_again_and_an_unheld_revocation_is_remembered(cache):
    blob = _put(cache, "acme", b"weights")
    report = cache.remove_revoked("acme", "tiny", 7)  # revoked before the cache ever held it
    assert not report.held and not report.removed and cache.is_revoked("acme", "tiny", 7)
    assert cache.hold("acme", "tiny", 7, dict([blob])) is False
    # Held-but-refused versions still list their blobs, so the removal that follows finds them.
    assert cache.remove_revoked("acme", "tiny", 7).removed == [blob[0]]
    assert cache.revocation_totals()["revoked_versions"] == 0, "it was not newly revoked"
    assert ("acme", "tiny", 7, True) in cache.held_versions()


def test_the_state_survives_a_new_cache_object_on_the_same_directory(cache, tmp_path):
    cache.set_state("events.cursor http://r", "42")
    cache.remove_revoked("acme", "tiny", 3)
    cache.close()
    reopened = NodeCache(tmp_path / "cache")
    assert reopened.state("events.cursor http://r") == "42" and reopened.is_revoked("acme", "tiny", 3)
    assert reopened.state("nothing") is None


def test_removal_waits_for_a_fetch_holding_the_blobs_lock(cache):
    blob = _put(cache, "acme", b"weights")
    cache.hold("acme", "tiny", 1, dict([blob]))
    done = threading.Event()
    with cache.digest_lock("acme", blob[0]):
        worker = threading.Thread(target=lambda: (cache.remove_revoked("acme", "tiny", 1), done.set()))
        worker.start()
        assert not done.wait(0.3), "the blob was removed while a fetch held its lock"
        assert _cached(cache, "acme", blob[0])
    worker.join(5)
    assert done.is_set() and not _cached(cache, "acme", blob[0])


def test_hostile_names_are_refused(cache):
    with pytest.raises(InvalidInputError):
        cache.remove_revoked("../etc", "tiny", 1)
    with pytest.raises(InvalidInputError):
        cache.hold("acme", "tiny", 1, {"not-a-digest": 1})


def test_revocation_follows_an_adapters_binding_within_the_event_s_tenant_only():
    from registry.node.revocations import revocations_of

    revoked = {"type": "dev.modelreg.version.revoked", "data": {
        "tenant": "acme", "model": "llm", "version": 1,
        "adapters": ["acme/llm-support@2", "globex/theirs@1", "acme/../x@1", "acme/x@0", 7, "acme/y@3"]}}
    assert revocations_of(revoked) == [("acme", "llm", 1), ("acme", "llm-support", 2), ("acme", "y", 3)]

    def unservable(reason: str, **subject) -> dict:
        return {"type": "dev.modelreg.adapter.unservable", "data": {"tenant": "globex", "model": "theirs",
                                                                     "reason": reason, **subject}}

    # Another tenant's adapter comes in its own tenant's event, naming the version; a moved base is no revocation.
    assert revocations_of(unservable("base-revoked", version=1)) == [("globex", "theirs", 1)]
    assert revocations_of(unservable("base-moved", alias="prod")) == []
    assert revocations_of(unservable("base-revoked", alias="prod")) == []
    assert revocations_of({"type": "dev.modelreg.alias.promoted", "data": {"tenant": "acme"}}) == []
