"""An adapter checked against its base at seal (issue 34, part 1), on SQLite and PostgreSQL: one PEFT made for
another base (other shapes, other modules) fails with every reason, unsigned; a pickle adapter is checked by its
config only (its tensors are never unpickled) and one with a planted payload is flagged unsafe by the scanner and
never served."""

from __future__ import annotations

import pytest

from registry.services import approvals
from tests.support.adapter_submissions import (
    ADAPTER,
    PROBLEMS,
    api,
    auth,
    events,
    shown,
    submit_adapter,
)
from tests.support.registry import drain
from tests.support.release_unit import TENANT, build_in_prod
from tests.support.tiny_adapter import tiny_adapter_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)


@pytest.mark.parametrize("variant,codes", [
    ("other_shapes", {"adapter.shape"}),
    ("other_modules", {"adapter.target-module", "adapter.module-missing"}),
])
def test_an_adapter_made_for_another_base_fails_at_seal_with_every_reason(container, people, in_prod, variant, codes):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files(variant), "acme/llm@1").status_code == 202
        drain(container)
        doc = shown(client, sam, 1)
    assert (doc["state"], doc["failure_reason"]) == ("failed", "adapter_incompatible")
    detail = doc["failure_detail"]
    assert {r["code"] for r in detail["reasons"]} == codes
    assert detail["total"] == len(detail["reasons"]) == (8 if variant == "other_shapes" else 3)
    assert detail["message"].startswith("the adapter does not fit its base acme/llm@1: ")
    assert doc["adapter_of"]["check"]["refusals"] == detail["reasons"]
    assert doc["manifest_digest"] is None, "a refused adapter is never signed"
    [failed] = events(container, "version.failed", f"{TENANT}/{ADAPTER}@1")
    assert failed["reason"] == "adapter_incompatible" and failed["reasons"] == detail["reasons"]


def test_a_pickle_adapter_is_checked_by_its_config_and_a_planted_payload_is_flagged_unsafe_and_never_served(
        container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("pickle"), "acme/llm@1", label="clean").status_code == 202
        assert submit_adapter(client, sam, tiny_adapter_files("pickle_payload"), "acme/llm@1",
                      label="planted").status_code == 202
        drain(container)
        clean, planted = shown(client, sam, 1), shown(client, sam, 2)
        scans = client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions/2/scans", headers=auth(sam)).json()
        manifest = client.get(f"/v1/models/{TENANT}/{ADAPTER}/manifest", params={"ref": "2"}, headers=auth(sam))
    # Its tensors are not unpickled to be checked: the check says so, and the scanner judges the file.
    assert clean["state"] == "awaiting_approval"
    assert [f["code"] for f in clean["adapter_of"]["check"]["findings"]] == ["adapter.weights-unchecked"]
    assert planted["adapter_of"]["check"]["refusals"] == []
    verdicts = {f["path"]: f["verdict"] for f in scans["files"]}
    assert verdicts["adapter_model.bin"] == "unsafe"
    assert (planted["state"], planted["failure_reason"]) == ("failed", "unsafe_file")
    # Never served: no approval reaches it, and no release is issued.
    assert manifest.status_code == 409 and manifest.json()["type"] == PROBLEMS + "not-approved"
    with container.session_factory() as session, pytest.raises(Exception) as refused:
        approvals.decide(session, people["sec"], TENANT, ADAPTER, 2,
                         approvals.ApprovalRequest("approve", "security", "", ["adapter_model.bin"]),
                         ports=container.ports)
    assert getattr(refused.value, "code", None) == "not-awaiting-approval"


