"""The runners on a LoRA adapter (issue 34), without a registry: ``causal-lm`` applies the adapter PEFT made for the
tiny Llama to that base and measures base + adapter, and refuses a pickled adapter or a missing base; an ``openai``
serve command gets ``{base_dir}``, ``{adapter_dir}`` and ``{adapter_name}`` and must start the base with the adapter;
a ``command`` gets ``{base_dir}``; which suites load the base at all."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from registry.evals.runners import AdapterOnBase, RunContext, RunnerError, causal_lm, command, needs_base
from registry.evals.runners.openai import adapter_values, fill_placeholders, placeholders_in
from tests.support.tiny_adapter import tiny_adapter_files, write_files
from tests.support.tiny_llm import write_tiny_llm

VLLM = ("vllm", "serve", "{base_dir}", "--port", "{port}", "--enable-lora", "--lora-modules",
        "{adapter_name}={adapter_dir}")
QUICK = {"texts": {"en": "The capital of France is Paris."}, "max_new_tokens": 2}


def _ctx(model_dir: Path, work: Path, settings: dict, adapter: AdapterOnBase | None) -> RunContext:
    work.mkdir(parents=True, exist_ok=True)
    return RunContext(model_dir=model_dir, settings=settings, evalsets=(), work_dir=work, facts=None,
                      trust_remote_code=False, deadline=time.monotonic() + 300, adapter=adapter)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapter-runs")
    return {"base": write_tiny_llm(root / "base"), "lora": write_files(root / "lora", tiny_adapter_files("lora")),
            "pickle": write_files(root / "pickle", tiny_adapter_files("pickle"))}


def test_causal_lm_measures_the_base_with_the_adapter_applied(dirs, tmp_path):
    on_base = AdapterOnBase("support", "acme/llm@1", dirs["base"])
    adapted = causal_lm.run(_ctx(dirs["lora"], tmp_path / "a", QUICK, on_base))
    alone = causal_lm.run(_ctx(dirs["base"], tmp_path / "b", QUICK, None))
    m = adapted.metrics
    assert m["lm.adapter_parameters"] > 0 and "lm.adapter_parameters" not in alone.metrics
    assert m["lm.parameters"] == alone.metrics["lm.parameters"] + m["lm.adapter_parameters"]
    assert math.isfinite(m["lm.perplexity.en"]) and m["lm.perplexity.en"] != alone.metrics["lm.perplexity.en"]
    assert m["lm.failed_checks"] == 0 and m["lm.generation_ok"] == 1


@pytest.mark.parametrize("adapter_dir,base,message", [
    ("pickle", True, "the adapter has no adapter_model.safetensors: causal-lm applies safetensors adapters only"),
    ("lora", False, "the adapter's base acme/llm@1 was not given to causal-lm"),
])
def test_causal_lm_refuses_a_pickled_adapter_and_an_adapter_without_its_base(dirs, tmp_path, adapter_dir, base,
                                                                              message):
    on_base = AdapterOnBase("support", "acme/llm@1", dirs["base"] if base else None)
    with pytest.raises(RunnerError, match=message):
        causal_lm.run(_ctx(dirs[adapter_dir], tmp_path, QUICK, on_base))


def test_an_openai_serve_command_starts_the_base_with_the_adapter_as_vllm_does(tmp_path):
    ctx = _ctx(Path("/run/model"), tmp_path, {}, AdapterOnBase("llm-support", "acme/llm@1", Path("/run/base")))
    values = adapter_values(ctx, placeholders_in(VLLM))
    argv = [fill_placeholders(a, model_dir=ctx.model_dir, port=8000, unit=values) for a in VLLM]
    assert argv == ["vllm", "serve", "/run/base", "--port", "8000", "--enable-lora", "--lora-modules",
                    "llm-support=/run/model"]


@pytest.mark.parametrize("serve,adapter,message", [
    # An adapter's files served alone, or the base alone: neither is the adapter on its base.
    (("vllm", "serve", "{model_dir}", "--port", "{port}"), True, "the serve command must start the base"),
    (("vllm", "serve", "{base_dir}", "--port", "{port}"), True, "the serve command must start the base"),
    # The adapter's placeholders for a version that is no adapter.
    (VLLM, False, "names {adapter_dir}, {adapter_name}, {base_dir}, but the version is no adapter"),
])
def test_an_openai_serve_command_that_does_not_serve_the_adapter_on_its_base_is_refused(tmp_path, serve, adapter,
                                                                                     message):
    ctx = _ctx(Path("/run/model"), tmp_path, {}, AdapterOnBase("s", "acme/llm@1", Path("/run/base"))
               if adapter else None)
    with pytest.raises(RunnerError, match=message.replace("{", r"\{").replace("}", r"\}")):
        adapter_values(ctx, placeholders_in(serve))


def test_a_command_gets_the_base_and_the_adapters_name(dirs, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import json, sys\nfrom pathlib import Path\nout, base, adapter, name = sys.argv[1:5]\n"
                      "json.dump({'metrics': {'probe.base_config': int((Path(base) / 'config.json').is_file()),\n"
                      "  'probe.adapter_config': int((Path(adapter) / 'adapter_config.json').is_file()),\n"
                      "  'probe.named': int(name == 'support')}}, open(out, 'w'))\n")
    settings = {"command": ["{python}", str(script), "{output}", "{base_dir}", "{model_dir}", "{adapter_name}"]}
    on_base = AdapterOnBase("support", "acme/llm@1", dirs["base"])
    result = command.run(_ctx(dirs["lora"], tmp_path / "work", settings, on_base))
    assert result.metrics == {"probe.base_config": 1.0, "probe.adapter_config": 1.0, "probe.named": 1.0}
    with pytest.raises(RunnerError, match=r"names \{base_dir\}, \{adapter_name\}, but the version is no adapter"):
        command.run(_ctx(dirs["base"], tmp_path / "other", settings, None))


@pytest.mark.parametrize("runner,settings,loads", [
    ("causal-lm", {}, True),
    ("weights-sanity", {}, False),
    ("openai", {"serve": list(VLLM)}, True),
    ("openai", {"endpoint": "http://eval.example/v1"}, False),
    ("command", {"command": ["lm_eval", "--model_args", "pretrained={base_dir},peft={model_dir}"]}, True),
    ("command", {"command": ["lm_eval", "--model_args", "pretrained={model_dir}"]}, False),
    ("openai", {"serve": "{base_dir}"}, False),
])
def test_which_suites_load_the_base(runner, settings, loads):
    assert needs_base(runner, json.loads(json.dumps(settings))) is loads
