"""An adapter is evaluated on the base it is bound to (issue 34), on SQLite and PostgreSQL, through the real
``run_eval`` jobs: acme/llm@1 (the tiny Llama, in prod) is the base and acme/llm-support@1 a LoRA adapter PEFT made
for it. A ``causal-lm`` suite loads the base from the store and applies the adapter with PEFT: its perplexity is the
one PEFT gives base + adapter here, not the base's alone. Every result names the base it ran on (``ran_on``: the base
version and weights digest, and the adapter's), in the API too; a result that names another base is refused by the
approval and promotion policies with ``adapter.eval-base``; a base revoked while the adapter waits for its evals
fails them (``base_unusable``), never runs them on the adapter alone."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from safetensors.numpy import load
from sqlalchemy import select

from registry.db.models import EvalResult, VersionComponent
from registry.domain.aliases import make_target
from registry.domain.components import components_map
from registry.domain.errors import PromotionDeniedError
from registry.policy import default_policy_dir
from registry.services import adapters, aliases, approvals, revocations, units, versions
from tests.support.adapter_submissions import ADAPTER, api, approve_adapter, auth, base_row, submit_adapter
from tests.support.registry import drain
from tests.support.release_unit import NAME, TENANT, build_in_prod
from tests.support.tiny_adapter import tiny_adapter_files, write_files
from tests.support.tiny_llm import tiny_llm_files
from workers.handlers import build_handlers
from workers.loop import Worker

pytestmark = pytest.mark.seeded(builder=build_in_prod)

TEXT = "The capital of France is Paris. It lies on the river Seine."


@pytest.fixture
def lm_suite(container, tmp_path):
    """The shipped policy with one more suite, ``lm`` (causal-lm on one English text), for the adapter's model."""
    ours = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), ours)
    data = json.loads((ours / "data.json").read_text())
    data["modelreg"]["suites"]["lm"] = {"runner": "causal-lm", "applies_to": {"models": [f"{TENANT}/{ADAPTER}"]},
                                        "settings": {"texts": {"en": TEXT}, "max_new_tokens": 3}, "timeout_s": 300}
    (ours / "data.json").write_text(json.dumps(data))
    container.settings.policy_dir = ours
    container.__dict__.pop("policy", None)


def perplexity(tmp_path, *, adapted: bool) -> float:
    """The tiny Llama's perplexity on TEXT as the causal-lm runner measures it, with the adapter applied by PEFT
    from the submitted files, or without it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = write_files(tmp_path / "base", tiny_llm_files())
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, use_safetensors=True, dtype=torch.float32).eval()
    if adapted:
        adapter = write_files(tmp_path / "adapter", tiny_adapter_files("lora"))
        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False).eval()
    ids = tokenizer(TEXT, return_tensors="pt", add_special_tokens=True)["input_ids"]
    with torch.no_grad():
        return math.exp(model(input_ids=ids, labels=ids).loss.item())


def results(container, number: int = 1) -> dict[str, EvalResult]:
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, ADAPTER, number)
        rows = session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)).all()
        session.expunge_all()
    return {r.suite: r for r in rows}


def test_a_causal_lm_suite_runs_on_base_and_adapter_and_the_record_names_both_digests(container, people, in_prod,
                                                                                      lm_suite, tmp_path):
    sam = people["tokens"]["sam"]
    weights, _ = base_row(container)
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        drain(container)
        shown = client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions/1/evals", headers=auth(sam))
        log = client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions/1/evals/lm/log", headers=auth(sam))
    assert shown.status_code == 200, shown.text
    found = results(container)
    lm = found["lm"]
    assert lm.status == "completed", (lm.reason, lm.error)
    # PEFT applied the adapter to the base loaded from the store: the perplexity is base + adapter's, not the base's.
    assert lm.metrics["lm.perplexity.en"] == pytest.approx(perplexity(tmp_path, adapted=True), rel=1e-4)
    assert lm.metrics["lm.perplexity.en"] != pytest.approx(perplexity(tmp_path, adapted=False), rel=1e-3)
    lora = load(tiny_adapter_files("lora")["adapter_model.safetensors"])
    assert lm.metrics["lm.adapter_parameters"] == sum(t.size for t in lora.values())
    assert lm.metrics["lm.generation_ok"] == 1 and lm.metrics["lm.failed_checks"] == 0
    with container.session_factory() as session:
        adapter_weights = components_map(units.components_of(
            session, versions.find_version_unchecked(session, TENANT, ADAPTER, 1)))["weights"]
    ran_on = {"base_model": f"{TENANT}/{NAME}", "base_version": 1, "base_weights_digest": weights,
              "adapter_weights_digest": adapter_weights}
    # Every suite's record names the base it ran on and the adapter's own weights, and the API shows it.
    assert {suite: r.ran_on for suite, r in found.items()} == {"lm": ran_on, "sanity": ran_on}
    assert {e["suite"]: e["ran_on"] for e in shown.json()["evals"]} == {"lm": ran_on, "sanity": ran_on}
    with container.session_factory() as session:
        base = versions.find_version_unchecked(session, TENANT, NAME, 1)
        # The base's own results name none: it is no adapter.
        assert [r.ran_on for r in session.scalars(select(EvalResult).where(EvalResult.version_id == base.id))] \
            == [None]
    assert f"causal-lm: applied adapter {ADAPTER} ({lm.metrics['lm.adapter_parameters']:g} parameters) to its base " \
           "acme/llm@1" in log.text


def test_a_result_that_ran_on_another_base_is_refused_by_approval_and_promotion(container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        drain(container)
    with container.session_factory() as session:
        version, decision = approvals.evaluate(session, people["admin"], TENANT, ADAPTER, 1, engine=container.policy)
        # The policies see the binding the adapter's statement signs.
        assert adapters.statement_binding(version) is not None
    assert not [u for u in decision.unmet if u["code"] == "adapter.eval-base"]
    assert approve_adapter(container, people, 1) == "approved"
    # A result that names acme/llm@2's weights, which this adapter is not bound to.
    other = "f" * 64
    with container.session_factory() as session:
        sanity = session.scalar(select(EvalResult).where(EvalResult.suite == "sanity", EvalResult.version_id == (
            versions.find_version_unchecked(session, TENANT, ADAPTER, 1).id)))
        sanity_id, bound = sanity.id, dict(sanity.ran_on)
        sanity.ran_on = {**bound, "base_version": 2, "base_weights_digest": other}
        session.commit()
    with container.session_factory() as session:
        _, decision = approvals.evaluate(session, people["admin"], TENANT, ADAPTER, 1, engine=container.policy)
    [unmet] = [u for u in decision.unmet if u["code"] == "adapter.eval-base"]
    assert (unmet["suite"], unmet["satisfiable"]) == ("sanity", False)
    assert unmet["message"] == (f"eval suite sanity ran on acme/llm@2 (weights sha256:{other[:12]}...), not on the "
                                f"base the adapter is bound to, acme/llm@1 (weights sha256:"
                                f"{bound['base_weights_digest'][:12]}...): a result counts only for the base it ran on")
    with container.session_factory() as session, pytest.raises(PromotionDeniedError) as denied:
        aliases.promote(session, people["mia"], TENANT, ADAPTER, "prod", make_target(1), policy=container.policy,
                        clock=container.clock)
    assert [u["code"] for u in denied.value.details["unmet"]] == ["adapter.eval-base"]
    # A result that names no base (recorded before results named one: the adapter alone) covers none either.
    with container.session_factory() as session:
        session.get(EvalResult, sanity_id).ran_on = None
        session.commit()
    with container.session_factory() as session, pytest.raises(PromotionDeniedError):
        aliases.promote(session, people["mia"], TENANT, ADAPTER, "prod", make_target(1), policy=container.policy,
                        clock=container.clock)
    with container.session_factory() as session:
        session.get(EvalResult, sanity_id).ran_on = bound
        session.commit()
    with container.session_factory() as session:
        moved = aliases.promote(session, people["mia"], TENANT, ADAPTER, "prod", make_target(1),
                                policy=container.policy, clock=container.clock)
        assert moved.version.number == 1


def _revoke_base(container, people) -> tuple[str, str]:
    with container.session_factory() as session:
        revocations.revoke(session, people["admin"], TENANT, NAME, 1, "bad weights", clock=container.clock)
    return "base_unusable", "not evaluated: its base acme/llm@1 was revoked"


def _swap_base_weights(container, people) -> tuple[str, str]:
    """acme/llm@1's recorded weights component edited in the database: no longer the weights the adapter is bound to."""
    with container.session_factory() as session:
        base = versions.find_version_unchecked(session, TENANT, NAME, 1)
        row = session.scalar(select(VersionComponent).where(VersionComponent.version_id == base.id,
                                                            VersionComponent.name == "weights"))
        bound, row.digest = row.digest, "0" * 64
        session.commit()
    return "integrity", f"the base acme/llm@1 records weights sha256:{'0' * 64}, not the bound sha256:{bound}"


@pytest.mark.parametrize("change", [_revoke_base, _swap_base_weights], ids=["revoked", "other-weights"])
def test_a_base_that_is_no_longer_the_bound_one_fails_the_adapters_evals_unrun(container, people, in_prod, change):
    """Between the adapter's seal and its eval runs its base is revoked, or its recorded weights are not the bound
    ones any more: the evals fail with the reason, and nothing runs on the adapter alone."""
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
    worker = Worker(container, build_handlers(), worker_id="adapter-evals")
    while results(container).get("sanity") is None:
        assert worker.run_once(), "no job left before the adapter's evals were queued"
    reason, error = change(container, people)
    drain(container)
    sanity = results(container)["sanity"]
    assert (sanity.status, sanity.reason, sanity.error) == ("failed", reason, error)
    assert sanity.log_digest is None and sanity.duration_ms == 0 and sanity.ran_on["base_version"] == 1
