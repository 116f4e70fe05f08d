"""A node given an adapter's release whose ``adapter_of`` does not name the base release it fetched (another
weights digest, another statement, another version) refuses both before a byte of either is downloaded: exit 20
(``adapter-base``), one stderr line naming what differs, DEST and the node's trust state as they were.

The stand-in is the attacker: it signs, with the node's pinned key, the real base release of ``acme/tiny@1`` and
an adapter's release for ``acme/tiny-support@prod`` whose ``adapter_of`` is off by one field."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json

import pytest

from registry.domain.components import components_map, unit_components
from registry.domain.files import FileEntry
from registry.signing.release import release_payload, sign_release
from tests.support.fetch_node import NOW, assert_refused, build_node_world, tree

pytestmark = pytest.mark.seeded(builder=build_node_world)

CONFIG = json.dumps({"peft_type": "LORA", "r": 4, "base_model_name_or_path": "x"}).encode()


def _weights(node) -> str:
    entries = [FileEntry(f["path"], f["size"], f["sha256"]) for f in node.files]
    return components_map(unit_components(entries, {}))["weights"]


def _serve_adapter(node, **wrong) -> None:
    """The base's release (by number, as the adapter's names it) and an adapter's release naming it, but ``wrong``."""
    node.release(ref=str(wrong.get("version", 1)))
    files = [{"path": "adapter_config.json", "size": len(CONFIG), "sha256": hashlib.sha256(CONFIG).hexdigest()}]
    statement = json.dumps({"predicate": {"resources": [{"name": f["path"], "digest": f["sha256"]}
                                                        for f in files]}}).encode()
    bundle = {"dsseEnvelope": {"payload": base64.b64encode(statement).decode()}}
    adapter_of = {"model": "acme/tiny", "ref": "prod", "version": 1, "bound_version": 1,
                  "weights_digest": _weights(node), "statement_digest": node.statement_digest,
                  "served_name": "acme/tiny", **wrong}
    payload = release_payload(
        model="acme/tiny-support", ref="prod", tenant="acme", version=1,
        source={"kind": "upload", "repo": "adapter", "revision": "0" * 40}, files=files, license=None, facts=None,
        statement_digest=hashlib.sha256(statement).hexdigest(), approval_digest="d" * 64, serial=1,
        issued_at=NOW - dt.timedelta(minutes=1), expires_at=NOW + dt.timedelta(hours=1), adapter_of=adapter_of)
    node.standin.manifests[("acme", "tiny-support", "prod")] = {
        "envelope": sign_release(payload, [node.key]), "transport": {}, "signature_bundle": bundle,
        "trust_root_version": 1}


@pytest.mark.parametrize("wrong,differ", [
    ({"weights_digest": "0" * 64}, "weights_digest"),
    ({"statement_digest": "e" * 64}, "statement_digest"),
    ({"version": 2}, "version"),
])
def test_an_adapter_release_naming_another_base_is_refused_before_any_download(node, wrong, differ):
    _serve_adapter(node, **wrong)
    dest = node.tmp / "loras"
    refused = node.fetch(dest, "acme/tiny-support@prod", "--with-base")
    assert_refused(refused, 20, "adapter-base")
    assert f"names another base than the release of acme/tiny@{wrong.get('version', 1)}" in refused.stderr
    assert f"{differ} differ" in refused.stderr, refused.stderr
    assert tree(dest) is None and node.standin.blob_gets == []
    assert [g["key"] for g in node.standin.manifest_gets] == [("acme", "tiny-support", "prod"),
                                                              ("acme", "tiny", str(wrong.get("version", 1)))]
    assert not (node.cache / "trust" / "serials.json").exists()
