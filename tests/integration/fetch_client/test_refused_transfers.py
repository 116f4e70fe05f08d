"""What the registry answers or serves and where DEST is: a flipped blob, a revoked or unapproved version,
a network cut, a DEST with other content or inside the node cache; each refused with its own code and one
stderr line, DEST left as it was."""

from __future__ import annotations

import pytest

from tests.support.fetch_node import (
    assert_refused,
    build_node_world,
    refusal_leaves_dest_as_it_was,
    revoke,
    tree,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


def _flipped_blob(node) -> None:
    node.release()
    big = next(f for f in node.files if f["path"] == "big.txt")
    stored = node.blob_file(big["sha256"])
    stored.chmod(0o644)
    data = bytearray(stored.read_bytes())
    data[2_500_000] ^= 0x01
    stored.write_bytes(bytes(data))


def _not_approved(node) -> None:
    node.standin.problems[("acme", "tiny", "prod")] = (409, {"code": "not-approved",
                                                             "detail": "acme/tiny@1 is not approved"})


def _network(node) -> None:
    node.release()
    node.standin.cut_network()


@pytest.mark.parametrize("attack,code,kind", [
    (_flipped_blob, 13, "digest"), (revoke, 14, "revoked"), (_not_approved, 15, "not-approved"),
    (_network, 16, "network"),
])
@pytest.mark.parametrize("dest_kind", ["absent", "empty"])
@pytest.mark.parametrize("cache", ["cache", "no-cache"])
def test_each_refused_transfer_leaves_dest_as_it_was(node, attack, code, kind, dest_kind, cache):
    refusal_leaves_dest_as_it_was(node, attack, code, kind, dest_kind, cache)


def test_a_dest_with_other_content_is_refused_untouched(node):
    node.release()
    dest = node.tmp / "busy"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    assert_refused(node.fetch(dest), 17, "destination")
    assert tree(dest) == {"notes.txt": b"mine"}
    assert node.standin.blob_gets == []  # refused before a byte was downloaded


def test_a_dest_inside_its_own_cache_or_holding_it_is_refused_as_usage(node):
    node.release()
    (node.tmp / "cache-link").symlink_to(node.cache, target_is_directory=True)
    for dest in (node.cache / "models", node.cache / "tenants" / "acme" / "blobs" / "x", node.cache,
                 node.tmp / "cache-link" / "models", node.tmp):
        result = node.fetch(dest)
        assert_refused(result, 2, "usage")
        assert "inside the node cache" in result.stderr
    assert not (node.cache / "models").exists() and not (node.cache / "tenants" / "acme" / "blobs").exists()
    assert node.standin.blob_gets == []
