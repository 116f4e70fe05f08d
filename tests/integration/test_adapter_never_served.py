"""A pickle adapter with a planted payload, through the real pipeline, on SQLite and PostgreSQL: flagged ``unsafe``,
failed, and served by no channel: the release API refuses it, ``/hf`` lists and serves none of its files by number
or commit, ``/v2`` has no manifest, tag or blob of it, and no alias can be moved to it.

The world is the release-unit one (``tests/support/release_unit.py``): acme/llm@1 approved and in ``prod``; the
adapter (``tests/support/tiny_adapter.py``'s ``pickle_payload``: PEFT's LoRA saved with ``torch.save`` plus one
entry whose unpickling calls ``os.getcwd``) is submitted ``adapter_of`` it.
"""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select

from registry.db.models import OciArtifact
from registry.domain.aliases import make_target
from registry.domain.errors import PromotionDeniedError
from registry.services import aliases, versions
from tests.support.adapter_submissions import ADAPTER, PROBLEMS, api, auth, shown, submit_adapter
from tests.support.registry import drain, role_token
from tests.support.release_unit import TENANT, build_in_prod
from tests.support.tiny_adapter import tiny_adapter_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)

REPO = f"{TENANT}/{ADAPTER}"
PICKLE = "adapter_model.bin"


def test_a_planted_pickle_adapter_is_flagged_unsafe_fails_and_is_served_by_no_channel(container, people, in_prod):
    sam = people["tokens"]["sam"]
    files = tiny_adapter_files("pickle_payload")
    node = role_token(container, "node-1", TENANT, "node")
    with api(container) as client:
        assert submit_adapter(client, sam, files, "acme/llm@1", label="planted").status_code == 202
        drain(container)
        doc = shown(client, sam, 1)
        scans = client.get(f"/v1/models/{REPO}/versions/1/scans", headers=auth(sam)).json()
        assert {f["path"]: f["verdict"] for f in scans["files"]}[PICKLE] == "unsafe"
        assert (doc["state"], doc["failure_reason"]) == ("failed", "unsafe_file")

        # No release: the release API refuses to issue one, by number, to a serving node as to its submitter.
        for token in (node, sam):
            r = client.get(f"/v1/models/{REPO}/manifest", params={"ref": "1"}, headers=auth(token))
            assert (r.status_code, r.json()["type"]) == (409, PROBLEMS + "not-approved"), r.text

        # /hf: no revision names it (by number or by its commit), so no file is listed or served.
        revisions = ["1", "main", "prod"] + ([doc["manifest_digest"][:40]] if doc["manifest_digest"] else [])
        for revision in revisions:
            for method, path in (("GET", f"/hf/api/models/{REPO}/revision/{revision}"),
                                 ("GET", f"/hf/api/models/{REPO}/tree/{revision}"),
                                 ("POST", f"/hf/api/models/{REPO}/paths-info/{revision}"),
                                 ("HEAD", f"/hf/{REPO}/resolve/{revision}/{PICKLE}"),
                                 ("GET", f"/hf/{REPO}/resolve/{revision}/{PICKLE}"),
                                 ("GET", f"/hf/{REPO}/resolve/{revision}/adapter_config.json")):
                r = client.request(method, path, headers=auth(node), data={"paths": [PICKLE]} if method == "POST"
                                   else None)
                assert r.status_code == 404, (method, path, r.status_code)
                assert r.headers["x-error-code"] == "RevisionNotFound", (method, path)
                assert PICKLE.encode() not in r.content and b"lora" not in r.content

        # /v2: no manifest, no tag, and the pickle's bytes are no blob of the repository.
        for ref in ("1", "1-image", "prod"):
            r = client.get(f"/v2/{REPO}/manifests/{ref}", headers=auth(node))
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN"), ref
        assert client.get(f"/v2/{REPO}/tags/list", headers=auth(node)).json()["tags"] == []
        pickle_digest = "sha256:" + hashlib.sha256(files[PICKLE]).hexdigest()
        r = client.get(f"/v2/{REPO}/blobs/{pickle_digest}", headers=auth(node))
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "BLOB_UNKNOWN")

    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, ADAPTER, 1)
        assert session.scalars(select(OciArtifact).where(OciArtifact.version_id == version.id)).all() == []
        # No alias can give it to anyone: the promotion policy refuses a version that is not approved.
        with pytest.raises(PromotionDeniedError):
            aliases.promote(session, people["mia"], TENANT, ADAPTER, "prod", make_target(1),
                            policy=container.policy, clock=container.clock)
