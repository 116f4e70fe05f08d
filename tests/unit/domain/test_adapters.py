"""An adapter checked against its base (``registry/domain/adapters.py``), on adapters PEFT itself saved for the tiny
bases transformers builds (CPU torch): every LoRA-family type fits the base it was made for and is refused, with
every reason, on another; what is only told (a name, a pickle, a pattern) never refuses."""

from __future__ import annotations

import functools
import io
import json

import pytest

from registry.domain.adapters import (
    MAX_REASONS,
    AdapterCheck,
    AdapterInput,
    Reason,
    TensorSpec,
    check_adapter,
)
from registry.domain.errors import AdapterIncompatibleError
from registry.scanning import safetensors
from tests.support.tiny_adapter import base_model, peft_model, saved_adapter, tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files

NAMES = ("acme/llm",)


def header(data: bytes) -> dict[str, TensorSpec]:
    found, findings = safetensors.read_header(io.BytesIO(data), len(data))
    assert found is not None, findings
    return {t.name: TensorSpec(t.dtype, t.shape) for t in found.tensors}


@functools.cache
def base_tensors(kind: str) -> dict[str, TensorSpec]:
    if kind == "llama":
        return header(tiny_llm_files()["model.safetensors"])
    from safetensors.torch import save

    model = base_model(kind)
    # GPT-2 ties its head to its embedding: each saved as its own tensor, as save_pretrained does.
    return header(save({k: v.clone().contiguous() for k, v in model.state_dict().items()}))


def config_and_tensors(files: dict[str, bytes]) -> tuple[dict, dict[str, TensorSpec]]:
    return json.loads(files["adapter_config.json"]), header(files["adapter_model.safetensors"])


@functools.cache
def family(name: str, base: str = "llama") -> tuple[dict, dict[str, TensorSpec]]:
    """An adapter of each accepted PEFT type, saved by PEFT for ``base``."""
    from peft import AdaLoraConfig, IA3Config, LoHaConfig, LoKrConfig, LoraConfig

    configs = {
        "lora": lambda: LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        "dora": lambda: LoraConfig(r=4, target_modules=["o_proj"], use_dora=True),
        "embedding-and-head": lambda: LoraConfig(r=2, target_modules=["embed_tokens", "q_proj"],
                                                 modules_to_save=["lm_head"]),
        "adalora": lambda: AdaLoraConfig(init_r=4, target_r=2, total_step=10, target_modules=["q_proj", "k_proj"]),
        "loha": lambda: LoHaConfig(r=4, target_modules=["q_proj", "down_proj"]),
        "lokr": lambda: LoKrConfig(r=4, target_modules=["q_proj", "up_proj"]),
        "lokr-low-rank": lambda: LoKrConfig(r=2, target_modules=["o_proj"], decompose_both=True, decompose_factor=4),
        "gpt2": lambda: LoraConfig(r=4, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True),
        "ia3": lambda: IA3Config(target_modules=["q_proj"], feedforward_modules=[]),
    }
    config, tensors = config_and_tensors(saved_adapter(peft_model(base_model(base), configs[name]())))
    return {**config, "base_model_name_or_path": "acme/llm"}, tensors


def check(config, tensors, base="llama", **kw) -> AdapterCheck:
    return check_adapter(AdapterInput(config, tensors=tensors, **kw), base_tensors(base), NAMES)


def codes(reasons: tuple[Reason, ...]) -> list[str]:
    return sorted({r.code for r in reasons})


@pytest.mark.parametrize("name", ["lora", "dora", "embedding-and-head", "adalora", "loha", "lokr", "lokr-low-rank"])
def test_every_lora_family_type_peft_saves_fits_the_base_it_was_made_for(name):
    config, tensors = family(name)
    result = check(config, tensors)
    assert result.refusals == () and result.ok
    assert result.peft_type == config["peft_type"]


def test_a_conv1d_adapter_fan_in_fan_out_fits_its_gpt2_base_and_not_the_llama():
    config, tensors = family("gpt2", "gpt2")
    assert check(config, tensors, "gpt2").refusals == ()
    refused = check(config, tensors, "llama")
    assert codes(refused.refusals) == ["adapter.module-missing", "adapter.target-module"]


@pytest.mark.parametrize("name", ["lora", "loha", "lokr", "adalora"])
def test_each_type_made_for_a_wider_base_is_refused_with_every_shape(name):
    config, tensors = family(name, "wide-llama")
    result = check(config, tensors)
    assert codes(result.refusals) == ["adapter.shape"]
    # Every module of both layers is named (LoKr: one Kronecker product each; the others: each factor).
    assert len({r.detail["module"] for r in result.refusals}) == 4
    assert all("needs" in r.message or "Kronecker" in r.message for r in result.refusals)


def test_the_builders_adapter_for_another_base_is_refused_and_its_own_fits():
    assert check(*config_and_tensors(tiny_adapter_files("lora"))).refusals == ()
    shapes = check(*config_and_tensors(tiny_adapter_files("other_shapes")))
    assert shapes.refused_total == 8  # lora_A and lora_B of q_proj and v_proj in both layers
    first = shapes.refusals[0]
    assert first.detail["shape"] == [4, 48] and first.detail["expected"] == [4, 32]
    modules = check(*config_and_tensors(tiny_adapter_files("other_modules")))
    assert [r.detail.get("target") for r in modules.refusals if r.code == "adapter.target-module"] == ["c_attn"]


def test_a_peft_type_outside_the_lora_family_is_refused():
    config, tensors = family("ia3")
    result = check(config, tensors)
    assert codes(result.refusals) == ["adapter.peft-type"]
    assert "LORA" in result.refusals[0].message and result.refusals[0].detail["peft_type"] == "'IA3'"


def test_a_rank_other_than_the_configured_one_is_refused():
    config, tensors = family("lora")
    assert codes(check({**config, "r": 8}, tensors).refusals) == ["adapter.shape"]
    # A rank pattern sets ranks per module: the pairs then only have to agree with each other.
    assert check({**config, "r": 8, "rank_pattern": {"q_proj": 4}}, tensors).refusals == ()


def test_the_name_of_another_base_is_a_finding_never_a_refusal():
    config, tensors = family("lora")
    result = check({**config, "base_model_name_or_path": "meta-llama/Llama-3.1-8B"}, tensors)
    assert result.refusals == ()
    assert [(f.code, f.detail["named"]) for f in result.findings] == [
        ("adapter.base-name-differs", "meta-llama/Llama-3.1-8B")]
    assert check({**config, "base_model_name_or_path": "acme/llm"}, tensors).findings == ()


def test_a_pattern_of_target_modules_is_never_evaluated_and_the_tensors_decide():
    config, tensors = family("lora")
    # Catastrophic backtracking if anything ran it against the module names.
    result = check({**config, "target_modules": "(a+)+$"}, tensors)
    assert result.refusals == () and codes(result.findings) == ["adapter.target-modules-pattern"]
    wide_config, wide = family("lora", "wide-llama")
    assert codes(check({**wide_config, "target_modules": ".*"}, wide).refusals) == ["adapter.shape"]


def test_a_list_of_target_modules_must_name_the_tensors_modules():
    config, tensors = family("lora")
    result = check({**config, "target_modules": ["q_proj", "k_proj"]}, tensors)
    assert codes(result.refusals) == ["adapter.module-not-targeted"]
    assert {r.detail["module"].rsplit(".", 1)[1] for r in result.refusals} == {"v_proj"}


def test_a_whole_base_tensor_only_for_a_module_to_save():
    config, tensors = family("embedding-and-head")
    assert codes(check({**config, "modules_to_save": None}, tensors).refusals) == ["adapter.module-not-targeted"]
    head = "base_model.model.lm_head.weight"
    result = check(config, {**tensors, head: TensorSpec("F32", (320, 16))})
    assert [(r.code, r.detail["expected"]) for r in result.refusals] == [("adapter.shape", [320, 32])]


def test_dtypes_must_be_floating_and_a_different_float_is_told():
    config, tensors = family("lora")
    name = next(iter(tensors))
    as_int = check(config, {**tensors, name: TensorSpec("I32", tensors[name].shape)})
    assert codes(as_int.refusals) == ["adapter.dtype"]
    as_bf16 = check(config, {n: TensorSpec("BF16", s.shape) for n, s in tensors.items()})
    assert as_bf16.refusals == () and codes(as_bf16.findings) == ["adapter.dtype-differs"]


def test_tensors_that_are_no_saved_peft_adapters_are_refused():
    config, tensors = family("lora")
    a_name = next(n for n in tensors if n.endswith("lora_A.weight"))
    unprefixed = {n.removeprefix("base_model.model."): s for n, s in tensors.items()}
    assert codes(check(config, unprefixed).refusals) == ["adapter.no-tensors", "adapter.tensor-name"]
    lone = {n: s for n, s in tensors.items() if n != a_name.replace("lora_A", "lora_B")}
    assert [r.detail["missing"] for r in check(config, lone).refusals] == ["B"]
    stranger = {**tensors, "base_model.model.model.layers.0.self_attn.q_proj.whatever": TensorSpec("F32", (1,))}
    assert codes(check(config, stranger).refusals) == ["adapter.tensor-name"]
    assert codes(check(config, {}).refusals) == ["adapter.no-tensors"]


@pytest.mark.parametrize("config,expected", [
    (None, "adapter.config-invalid"),
    ({"peft_type": "LORA", "r": 4}, "adapter.config-invalid"),
    ({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]}, "adapter.config-invalid"),
    ({"peft_type": "LORA", "r": True, "target_modules": ["q_proj"]}, "adapter.config-invalid"),
    ({"peft_type": "LORA", "r": 4, "target_modules": [""]}, "adapter.config-invalid"),
    ({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "fan_in_fan_out": "yes"}, "adapter.config-invalid"),
    ({"peft_type": 7, "r": 4, "target_modules": ["q_proj"]}, "adapter.peft-type"),
])
def test_a_config_that_is_not_valid_peft_is_refused(config, expected):
    _, tensors = family("lora")
    result = check(config, tensors)
    assert expected in codes(result.refusals)


def test_every_problem_is_reported_at_once():
    config, tensors = family("lora", "wide-llama")
    result = check({**config, "target_modules": ["q_proj", "v_proj", "c_attn"],
                    "base_model_name_or_path": "someone/else"}, tensors)
    assert codes(result.refusals) == ["adapter.shape", "adapter.target-module"]
    assert codes(result.findings) == ["adapter.base-name-differs"]
    with pytest.raises(AdapterIncompatibleError) as raised:
        result.require("acme/llm@1")
    err = raised.value
    assert err.code == "adapter-incompatible" and err.details["total"] == result.refused_total == 9
    assert len(err.details["reasons"]) == 9 and err.details["findings"][0]["code"] == "adapter.base-name-differs"
    assert "(and 8 more)" in err.message


def test_the_reasons_listed_are_bounded():
    config, _ = family("lora")
    many = {f"base_model.model.nowhere.m{i}.lora_A.weight": TensorSpec("F32", (4, 4)) for i in range(200)}
    result = check({**config, "target_modules": "x"}, many)
    assert len(result.refusals) == MAX_REASONS and result.refused_total == 200


def test_a_pickle_adapter_is_told_unchecked_and_its_config_still_checked():
    config, _ = family("lora")
    result = check_adapter(AdapterInput(config, pickle_only=True), base_tensors("llama"), NAMES)
    assert result.refusals == () and codes(result.findings) == ["adapter.weights-unchecked"]
    other = check_adapter(AdapterInput({**config, "target_modules": ["c_attn"]}, pickle_only=True),
                          base_tensors("llama"), NAMES)
    assert codes(other.refusals) == ["adapter.target-module"]


def test_missing_files_and_an_unreadable_base_refuse():
    config, tensors = family("lora")
    assert codes(check_adapter(AdapterInput(config), base_tensors("llama"), NAMES).refusals) == [
        "adapter.weights-missing"]
    missing = AdapterInput(config_error=("adapter.config-missing", "no adapter_config.json"), tensors=tensors)
    assert codes(check_adapter(missing, base_tensors("llama"), NAMES).refusals) == ["adapter.config-missing"]
    no_base = check_adapter(AdapterInput(config, tensors=tensors), None, NAMES, base_error="GGUF only")
    assert [(r.code, r.detail["reason"]) for r in no_base.refusals] == [("adapter.base-weights", "GGUF only")]
    quantized = {**base_tensors("llama"),
                 "model.layers.0.self_attn.q_proj.weight": TensorSpec("I32", (32, 4))}
    assert codes(check_adapter(AdapterInput(config, tensors=tensors), quantized, NAMES).refusals) == [
        "adapter.base-module-unsupported"]
