"""Exit codes of each refusal, the registry's problem types, and what the node's trust state persists."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest

from registry.client.api import RegistryApi
from registry.client.errors import EXIT_CODES, exit_code
from registry.domain.errors import (
    AdapterBaseMismatchError,
    AdapterBaseMovedError,
    DigestMismatchError,
    InvalidPathError,
    NotApprovedError,
    ReleaseNotFoundError,
    RevokedError,
    SignatureError,
)
from registry.node.trust import NodeTrust
from registry.signing.keys import SigningKey
from registry.signing.release import ReleaseExpiredError, ReleaseRollbackError
from registry.signing.trust_root import RootError, root_document, sign_root

LATER = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def test_the_seven_refusals_have_distinct_exit_codes():
    cases = {
        "signature": SignatureError("bad"), "expired": ReleaseExpiredError("old"),
        "rollback": ReleaseRollbackError("lower"), "digest": DigestMismatchError("f", expected="a", actual="b"),
        "revoked": RevokedError("acme/tiny", 2, "r"), "not-approved": NotApprovedError("acme/tiny", 2, "failed"),
        "manifest": InvalidPathError("../x", "segment '..' is not allowed"),
    }
    codes = {kind: exit_code(exc) for kind, exc in cases.items()}
    assert {kind: c[1] for kind, c in codes.items()} == {kind: kind for kind in cases}
    assert len({c[0] for c in codes.values()}) == len(cases)
    assert exit_code(RootError("x", reason="expired")) == (EXIT_CODES["expired"], "expired")
    assert exit_code(RootError("x", reason="signature")) == (EXIT_CODES["signature"], "signature")


def test_an_adapter_whose_base_is_not_the_bound_one_exits_with_the_next_free_code():
    moved = AdapterBaseMovedError("acme/llm-support@prod", 1, bound_base="acme/llm@1", bound_weights="a" * 64,
                                  base_alias="acme/llm@prod", base_version=2, base_weights="b" * 64)
    mismatch = AdapterBaseMismatchError("acme/llm-support@prod", "acme/llm@2", ["weights_digest"])
    assert exit_code(moved) == exit_code(mismatch) == (20, "adapter-base")
    assert sorted(EXIT_CODES.values()) == [0, 1, 2, *range(10, 21)]


def _api(status: int, problem: dict | None = None) -> RegistryApi:
    def handler(request: httpx.Request) -> httpx.Response:
        if problem is None:
            return httpx.Response(status)
        return httpx.Response(status, json=problem, headers={"content-type": "application/problem+json"})

    return RegistryApi("http://registry.test", "t", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("code,status,kind", [
    ("revoked", 409, "revoked"), ("not-approved", 409, "not-approved"), ("alias-not-found", 404, "error"),
    ("unavailable", 503, "network"),
    # An adapter's base alias moved to other weights: a code of its own; its base revoked: revoked.
    ("adapter-base-moved", 409, "adapter-base"), ("adapter-base-revoked", 409, "revoked"),
])
def test_problem_types_of_the_manifest_endpoint_map_to_exit_codes(code, status, kind):
    api = _api(status, {"type": f"https://modelreg.dev/problems/{code}", "status": status, "detail": code})
    with pytest.raises(Exception) as caught:
        api.manifest("acme", "tiny", "prod")
    assert exit_code(caught.value)[1] == kind


def test_a_304_is_none_and_a_404_trust_root_is_none():
    assert _api(304).manifest("acme", "tiny", "prod", etag='"x"') is None
    assert _api(404, {"type": "about:blank", "status": 404}).trust_root(7) is None


def _write_root(path, version, keys, signers):
    envelope = sign_root(root_document(version, [k.public_key for k in keys], 1, LATER), signers)
    path.write_text(json.dumps(envelope))
    return envelope


def test_walked_roots_and_serials_are_persisted_only_on_commit(tmp_path):
    k1, k2 = SigningKey.generate(), SigningKey.generate()
    _write_root(tmp_path / "root.json", 1, [k1], [k1])
    two = sign_root(root_document(2, [k2.public_key], 1, LATER), [k1, k2])
    trust = NodeTrust.load(tmp_path / "root.json", tmp_path / "cache")
    assert trust.refresh({2: two}.get, now=NOW).version == 2
    trust.accept("acme/tiny", "prod", 3)
    assert not (tmp_path / "cache" / "trust").exists()
    trust.commit()
    again = NodeTrust.load(tmp_path / "root.json", tmp_path / "cache")
    assert again.root.version == 2 and again.serial("acme/tiny", "prod") == 3
    # A lower serial committed later (a slow fetch of an older release) never lowers the one kept.
    again.accept("acme/tiny", "prod", 2)
    again.commit()
    assert NodeTrust.load(tmp_path / "root.json", tmp_path / "cache").serial("acme/tiny", "prod") == 3


def test_a_root_planted_in_the_cache_that_does_not_chain_to_the_pin_is_ignored(tmp_path):
    k1, evil = SigningKey.generate(), SigningKey.generate()
    _write_root(tmp_path / "root.json", 1, [k1], [k1])
    roots = tmp_path / "cache" / "trust" / "roots"
    roots.mkdir(parents=True)
    _write_root(roots / "2.json", 2, [evil], [evil])
    assert NodeTrust.load(tmp_path / "root.json", tmp_path / "cache").root.version == 1


def test_a_rotation_not_signed_by_the_previous_root_is_refused(tmp_path):
    k1, k2 = SigningKey.generate(), SigningKey.generate()
    _write_root(tmp_path / "root.json", 1, [k1], [k1])
    two = sign_root(root_document(2, [k2.public_key], 1, LATER), [k2])
    trust = NodeTrust.load(tmp_path / "root.json", tmp_path / "cache")
    with pytest.raises(RootError):
        trust.refresh({2: two}.get, now=NOW)
    assert trust.root.version == 1


def test_the_client_raises_the_domains_own_refusals_with_the_servers_message():
    api = _api(409, {"type": "https://modelreg.dev/problems/revoked", "status": 409,
                     "detail": "acme/tiny@2 was revoked: withdrawn"})
    with pytest.raises(RevokedError) as caught:
        api.manifest("acme", "tiny", "2")
    assert str(caught.value).startswith("acme/tiny@2 was revoked: withdrawn") and caught.value.code == "revoked"
    with pytest.raises(ReleaseNotFoundError):
        _api(404, {"type": "https://modelreg.dev/problems/alias-not-found", "status": 404}).manifest(
            "acme", "tiny", "prod")
