"""The causal-lm runner on the tiny Llama transformers writes: real perplexity, round trips, chat
template and generation; and its refusals (pickled weights, a broken template, bad settings)."""

from __future__ import annotations

import json
import math
import pickle
import shutil
import time
from pathlib import Path

import pytest

from registry.evals.runners import RunContext, RunnerError, causal_lm, check_metrics
from tests.support.tiny_llm import write_tiny_llm

QUICK = {"texts": {"en": "The capital of France is Paris."}, "max_new_tokens": 3}


def _run(model: Path, settings: dict | None = None, trust_remote_code: bool = False):
    ctx = RunContext(model_dir=model, settings=settings or {}, evalsets=(), work_dir=model.parent, facts=None,
                     trust_remote_code=trust_remote_code, deadline=time.monotonic() + 300)
    result = causal_lm.run(ctx)
    assert check_metrics(result.metrics) == result.metrics
    return result


def _cases(result) -> dict[str, dict]:
    return {c["id"]: c for c in result.cases}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llm(tmp_path_factory.mktemp("causal-lm") / "model")


@pytest.fixture(scope="module")
def evaluated(tiny):
    return _run(tiny)


@pytest.fixture
def model(tmp_path, tiny):
    return Path(shutil.copytree(tiny, tmp_path / "model"))


def test_the_tiny_llama_is_evaluated_with_real_metrics(evaluated):
    m = evaluated.metrics
    assert sorted(evaluated.breakdown["language"]) == sorted(causal_lm.DEFAULT_TEXTS)
    for lang in causal_lm.DEFAULT_TEXTS:
        ppl = m[f"lm.perplexity.{lang}"]
        # A random model spreads its bets over the 320-token vocabulary: near 320, far from 1.
        assert 1 < ppl < 10_000 and math.isfinite(ppl), (lang, ppl)
        assert evaluated.breakdown["language"][lang]["lm.perplexity"] == ppl
        assert evaluated.breakdown["language"][lang]["lm.roundtrip_failures"] == 0
    assert m["lm.roundtrip_failures"] == 0
    assert m["lm.chat_template_present"] == 1 and m["lm.chat_template_ok"] == 1
    assert m["lm.generation_ok"] == 1 and 1 <= m["lm.generated_tokens"] <= 16
    assert m["lm.failed_checks"] == 0
    assert m["lm.parameters"] == 39072
    assert m["lm.load_seconds"] > 0
    cases = _cases(evaluated)
    assert cases["roundtrip:de"] | {"detail": ""} == {
        "evalset": "", "id": "roundtrip:de", "category": "tokenizer", "language": "de", "length": "short",
        "passed": True, "detail": ""}
    assert cases["perplexity:en"]["passed"] is None  # it measures
    assert all(c["passed"] is not False for c in evaluated.cases)


def test_perplexity_is_the_exponent_of_the_mean_next_token_loss(tiny, evaluated):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True, use_safetensors=True,
                                                 dtype=torch.float32)
    ids = tokenizer(causal_lm.DEFAULT_TEXTS["en"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    nll = -torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None]).mean().item()
    assert evaluated.metrics["lm.perplexity.en"] == pytest.approx(math.exp(nll), rel=1e-4)


def test_a_chat_template_that_does_not_parse_fails_its_check(model):
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}")
    result = _run(model, QUICK)
    m = result.metrics
    assert m["lm.chat_template_present"] == 1 and m["lm.chat_template_ok"] == 0
    assert m["lm.failed_checks"] == 1
    case = _cases(result)["chat_template"]
    assert case["passed"] is False and "TemplateSyntaxError" in case["detail"]
    # Generation falls back to a text of the settings, and still works.
    assert m["lm.generation_ok"] == 1


def test_a_model_without_a_chat_template_says_so(model):
    (model / "chat_template.jinja").unlink()
    result = _run(model, QUICK)
    assert result.metrics["lm.chat_template_present"] == 0
    assert result.metrics["lm.failed_checks"] == 0
    assert _cases(result)["chat_template"] | {"detail": ""} == {
        "evalset": "", "id": "chat_template", "category": "chat_template", "language": "", "length": "",
        "passed": None, "detail": ""}


def test_a_tokenizer_that_does_not_decode_what_it_encodes(model):
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["decoder"] = None  # byte-level pieces ("Ġ" for a space) come back undecoded
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    result = _run(model, QUICK)
    assert result.metrics["lm.roundtrip_failures"] == 1
    assert result.breakdown["language"]["en"]["lm.roundtrip_failures"] == 1
    assert result.metrics["lm.failed_checks"] == 1
    case = _cases(result)["roundtrip:en"]
    assert case["passed"] is False and "ĠParis" in case["detail"]


def test_nan_weights_give_no_perplexity_and_a_failed_check(model):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(model / "model.safetensors")
    tensors["model.norm.weight"][:] = float("nan")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    result = _run(model, QUICK)
    assert "lm.perplexity.en" not in result.metrics
    assert _cases(result)["perplexity:en"]["passed"] is False
    assert result.metrics["lm.failed_checks"] == 1


class _CreatesMarker:
    """Unpickling this creates the marker file (``open(path, "w")``): a checkpoint that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _pickle_only(model: Path, marker: Path) -> None:
    for p in model.glob("*.safetensors"):
        p.unlink()
    (model / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": _CreatesMarker(marker)}))


def test_a_model_with_only_pickled_weights_is_refused_unread(model, tmp_path):
    marker = tmp_path / "unpickled"
    _pickle_only(model, marker)
    pickle.loads((model / "pytorch_model.bin").read_bytes())["weight"].close()  # the plant works ...
    assert marker.exists()
    marker.unlink()
    with pytest.raises(RunnerError, match="no safetensors weights"):
        _run(model)
    assert not marker.exists()  # ... and the runner never ran it


def test_an_index_without_its_shards_does_not_fall_back_to_the_pickle(model, tmp_path):
    marker = tmp_path / "unpickled"
    _pickle_only(model, marker)
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}))
    with pytest.raises(RunnerError, match="could not load"):
        _run(model, QUICK)
    assert not marker.exists()


def test_torch_load_is_refused_while_the_runner_works():
    import torch

    original = torch.load
    with causal_lm._no_torch_load():
        with pytest.raises(causal_lm.TorchLoadRefusedError):
            torch.load("anything.bin")
    assert torch.load is original


@pytest.mark.parametrize("settings, message", [
    ({"texts": {"EN": "x"}}, "texts"),
    ({"texts": {}}, "texts"),
    ({"texts": {"en": ""}}, "texts"),
    ({"threads": 0}, "threads"),
    ({"max_new_tokens": "16"}, "max_new_tokens"),
    ({"temperature": 1}, "no setting 'temperature'"),
])
def test_bad_settings(tiny, settings, message):
    with pytest.raises(RunnerError, match=message):
        _run(tiny, settings)


def test_remote_code_is_not_imported_unless_policy_allowed_it(model, tmp_path):
    marker = tmp_path / "imported"
    (model / "modeling_custom.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
        "class CustomConfig(LlamaConfig): pass\n"
        "class CustomModel(LlamaForCausalLM): config_class = CustomConfig\n"
        "class CustomTokenizer(PreTrainedTokenizerFast): pass\n")
    auto_maps = {"config.json": {"AutoConfig": "modeling_custom.CustomConfig",
                                 "AutoModelForCausalLM": "modeling_custom.CustomModel"},
                 "tokenizer_config.json": {"AutoTokenizer": [None, "modeling_custom.CustomTokenizer"]}}
    for name, auto_map in auto_maps.items():
        doc = json.loads((model / name).read_text())
        doc["auto_map"] = auto_map
        (model / name).write_text(json.dumps(doc))
    result = _run(model, QUICK, trust_remote_code=False)
    assert result.metrics["lm.failed_checks"] == 0
    assert not marker.exists()


def test_texts_are_cut_to_the_positions_the_model_knows(model):
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 16
    (model / "config.json").write_text(json.dumps(config))
    result = _run(model, {"texts": {"en": causal_lm.DEFAULT_TEXTS["en"]}, "max_new_tokens": 1,
                          "max_text_tokens": 100})  # the text is 97 tokens
    assert _cases(result)["perplexity:en"]["detail"].endswith("over 16 tokens")
    assert math.isfinite(result.metrics["lm.perplexity.en"])
