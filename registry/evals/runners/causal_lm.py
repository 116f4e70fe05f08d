"""The ``causal-lm`` runner: the verified weights loaded with transformers on CPU, and checked working.

It needs the ``eval`` extra (CPU torch and transformers). The model is loaded from ``ctx.model_dir``
only (``local_files_only``, the hub switched offline), from safetensors only (``use_safetensors``, and
``torch.load`` refused outright while loading: nothing is ever unpickled), in float32, with
``trust_remote_code`` exactly as policy allowed it. Then, each a case:

================  ==================================================================================
chat_template     the tokenizer's chat template parses and renders a sample conversation
roundtrip:<lang>  decoding the encoded text of each language gives the text back
perplexity:<lang> perplexity of the model on that text (``lm.perplexity.<lang>``), which must be finite
generation        greedy generation of ``max_new_tokens`` from a prompt produces tokens
================  ==================================================================================

A LoRA adapter (``ctx.adapter``) is evaluated on its base: the tokenizer and the model are loaded as above from
the base's verified files (``ctx.adapter.base_dir``), then PEFT applies the adapter in ``ctx.model_dir``
(``PeftModel.from_pretrained``, inference only) from its ``adapter_model.safetensors`` (a pickled
``adapter_model.bin`` is refused, and ``torch.load`` stays refused while PEFT loads); every check then runs on base +
adapter, and ``lm.adapter_parameters`` counts the parameters the adapter added.

Settings (all optional): ``threads`` (torch threads, default 2), ``max_new_tokens`` (default 16),
``max_text_tokens`` (texts are cut to this many tokens, default 512) and ``texts``
(``{language: text}``, replacing the built-in ``DEFAULT_TEXTS``).

Example:
    >>> sorted(DEFAULT_TEXTS)
    ['de', 'en', 'es', 'fr', 'zh']
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from registry.evals.cases import length_bucket
from registry.evals.runners import MAX_CASE_DETAIL, RunContext, RunnerError, RunnerResult

DEFAULT_TEXTS = {
    "en": "The capital of France is Paris. It lies on the river Seine, and millions of people visit its "
          "museums every year. What is the weather like in Berlin today?",
    "de": "Die Hauptstadt von Frankreich ist Paris. Sie liegt an der Seine, und jedes Jahr besuchen "
          "Millionen Menschen ihre Museen. Wie ist das Wetter heute in Berlin?",
    "fr": "La capitale de la France est Paris. Elle se trouve sur la Seine, et des millions de personnes "
          "visitent ses musées chaque année. Quel temps fait-il à Berlin aujourd'hui ?",
    "es": "La capital de Francia es París. Está a orillas del Sena, y millones de personas visitan sus "
          "museos cada año. ¿Qué tiempo hace hoy en Berlín?",
    "zh": "法国的首都是巴黎。它位于塞纳河畔，每年有数百万人参观它的博物馆。今天柏林的天气怎么样？",
}
SAMPLE_CONVERSATION = (
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Germany?"},
)
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[a-z0-9]{2,8})?")
ADAPTER_SAFETENSORS = "adapter_model.safetensors"
MAX_TEXT_CHARS = 20_000
MAX_TEXTS = 32


def run(ctx: RunContext) -> RunnerResult:
    """Load the model under ``ctx.model_dir`` and check it works.

    Raises:
        RunnerError: bad settings, no safetensors weights, the eval extra not installed, or a model
            transformers cannot load.
    """
    settings = _settings(ctx.settings)
    if ctx.adapter is not None:
        if ctx.adapter.base_dir is None:
            raise RunnerError(f"the adapter's base {ctx.adapter.base_ref} was not given to causal-lm")
        if not (ctx.model_dir / ADAPTER_SAFETENSORS).is_file():
            raise RunnerError(f"the adapter has no {ADAPTER_SAFETENSORS}: causal-lm applies safetensors adapters "
                              "only, never a pickled adapter_model.bin")
    if not _has_safetensors(_weights_dir(ctx)):
        raise RunnerError("no safetensors weights: causal-lm loads safetensors only, never pickled weights")
    with _offline(), _no_torch_load():
        try:
            import torch
            import transformers
        except ImportError as e:
            raise RunnerError(f"causal-lm needs the eval extra (CPU torch and transformers): {e}") from None
        torch.set_num_threads(settings["threads"])
        started = time.monotonic()
        tokenizer, model = _load(ctx, transformers, torch)
        base_parameters = sum(p.numel() for p in model.parameters())
        if ctx.adapter is not None:
            model = _apply_adapter(ctx, model)
        load_seconds = time.monotonic() - started
        print(f"causal-lm: loaded {type(model).__name__} in {load_seconds:.1f}s", flush=True)
        checks = Checks()
        metrics: dict[str, float] = {"lm.load_seconds": round(load_seconds, 3),
                                     "lm.parameters": sum(p.numel() for p in model.parameters())}
        if ctx.adapter is not None:
            metrics["lm.adapter_parameters"] = metrics["lm.parameters"] - base_parameters
            print(f"causal-lm: applied adapter {ctx.adapter.name} ({metrics['lm.adapter_parameters']} parameters) "
                  f"to its base {ctx.adapter.base_ref}", flush=True)
        prompt = _chat_template(tokenizer, checks, metrics)
        breakdown: dict[str, dict[str, float]] = {}
        max_tokens = _max_tokens(model, settings["max_text_tokens"])
        for lang, text in settings["texts"].items():
            _deadline(ctx)
            breakdown[lang] = _language(tokenizer, model, torch, lang, text, max_tokens, checks)
            if "lm.perplexity" in breakdown[lang]:
                metrics[f"lm.perplexity.{lang.replace('-', '_')}"] = breakdown[lang]["lm.perplexity"]
        _deadline(ctx)
        prompt = prompt or next(iter(settings["texts"].values()))
        _generation(tokenizer, model, torch, prompt, settings["max_new_tokens"], checks, metrics)
    metrics["lm.roundtrip_failures"] = sum(v["lm.roundtrip_failures"] for v in breakdown.values())
    metrics["lm.failed_checks"] = sum(1 for c in checks.cases if c["passed"] is False)
    for case in checks.cases:
        if case["passed"] is False:
            print(f"causal-lm: FAILED {case['id']}: {case['detail']}", file=sys.stderr)
    return RunnerResult(metrics=metrics, cases=checks.cases, breakdown={"language": breakdown})


# --- settings and loading ---------------------------------------------------------------------------

def _int_setting(settings: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = settings.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise RunnerError(f"causal-lm setting {key} is an integer from {low} to {high}")
    return value


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    known = {"threads", "max_new_tokens", "max_text_tokens", "texts"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise RunnerError(f"causal-lm has no setting {unknown[0]!r} (it knows {', '.join(sorted(known))})")
    texts = settings.get("texts", DEFAULT_TEXTS)
    if (not isinstance(texts, dict) or not 1 <= len(texts) <= MAX_TEXTS
            or not all(isinstance(k, str) and _LANGUAGE.fullmatch(k) for k in texts)
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_TEXT_CHARS for v in texts.values())):
        raise RunnerError(f"causal-lm setting texts is {{language: text}}: 1 to {MAX_TEXTS} lowercase "
                          f"language tags, each text 1 to {MAX_TEXT_CHARS} characters")
    return {"threads": _int_setting(settings, "threads", 2, 1, 64),
            "max_new_tokens": _int_setting(settings, "max_new_tokens", 16, 1, 512),
            "max_text_tokens": _int_setting(settings, "max_text_tokens", 512, 2, 8192),
            "texts": dict(texts)}


def _weights_dir(ctx: RunContext) -> Path:
    """Where the model's weights (and tokenizer) are: the version's files, or an adapter's base."""
    if ctx.adapter is not None and ctx.adapter.base_dir is not None:
        return ctx.adapter.base_dir
    return ctx.model_dir


def _has_safetensors(root: Path) -> bool:
    return (root / "model.safetensors").is_file() or (root / "model.safetensors.index.json").is_file()


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """The hub switched off while loading (``local_files_only`` is passed as well); restored afterwards."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update({n: "1" for n in names})
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


class TorchLoadRefusedError(RunnerError):
    """Something tried ``torch.load`` (which unpickles) while the model was loading."""


@contextlib.contextmanager
def _no_torch_load() -> Iterator[None]:
    """``torch.load`` replaced by a refusal while the runner works: weights come from safetensors only."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            yield
            return
    original = torch.load

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TorchLoadRefusedError("refused torch.load (it unpickles) while loading the model")

    torch.load = refuse
    try:
        yield
    finally:
        torch.load = original


def _load(ctx: RunContext, transformers: Any, torch: Any) -> tuple[Any, Any]:
    common = {"local_files_only": True, "trust_remote_code": ctx.trust_remote_code}
    root = str(_weights_dir(ctx))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(root, **common)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            root, use_safetensors=True, dtype=torch.float32, device_map=None, **common)
    except TorchLoadRefusedError:
        raise
    except Exception as e:  # transformers raises anything from OSError to ValueError on a bad model
        raise RunnerError(f"transformers could not load the model: {type(e).__name__}: {e}"[:1000]) from None
    model.eval()
    return tokenizer, model


def _apply_adapter(ctx: RunContext, model: Any) -> Any:
    """The base ``model`` with the LoRA adapter in ``ctx.model_dir`` applied by PEFT, for inference."""
    assert ctx.adapter is not None
    try:
        from peft import PeftModel
    except ImportError as e:
        raise RunnerError(f"causal-lm needs PEFT (the eval extra) to apply an adapter: {e}") from None
    try:
        adapted = PeftModel.from_pretrained(model, str(ctx.model_dir), is_trainable=False)
    except TorchLoadRefusedError:
        raise
    except Exception as e:  # PEFT raises anything from ValueError to KeyError on an adapter that does not fit
        raise RunnerError(f"PEFT could not apply the adapter to its base {ctx.adapter.base_ref}: "
                          f"{type(e).__name__}: {e}"[:1000]) from None
    adapted.eval()
    return adapted


def _max_tokens(model: Any, setting: int) -> int:
    """Texts are cut to the setting, and to the positions the model knows."""
    positions = getattr(model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 1:
        return min(setting, positions)
    return setting


def _deadline(ctx: RunContext) -> None:
    if time.monotonic() > ctx.deadline:
        raise RunnerError("causal-lm ran past its deadline")


# --- checks -----------------------------------------------------------------------------------------

class Checks:
    def __init__(self) -> None:
        self.cases: list[dict[str, Any]] = []

    def add(self, case_id: str, category: str, passed: bool | None, detail: str, language: str = "",
            chars: int | None = None) -> None:
        self.cases.append({"evalset": "", "id": case_id, "category": category, "language": language,
                           "length": length_bucket(chars) if chars is not None else "",
                           "passed": passed, "detail": detail[:MAX_CASE_DETAIL]})


def _chat_template(tokenizer: Any, checks: Checks, metrics: dict[str, float]) -> str | None:
    """Render the sample conversation; return the rendered prompt, or None."""
    template = getattr(tokenizer, "chat_template", None)
    metrics["lm.chat_template_present"] = 1 if template else 0
    if not template:
        metrics["lm.chat_template_ok"] = 0
        checks.add("chat_template", "chat_template", None, "the tokenizer has no chat template")
        return None
    try:
        rendered = tokenizer.apply_chat_template(list(SAMPLE_CONVERSATION), tokenize=False,
                                                 add_generation_prompt=True)
    except Exception as e:  # jinja2's TemplateSyntaxError, a template's raise_exception, ...
        metrics["lm.chat_template_ok"] = 0
        checks.add("chat_template", "chat_template", False, f"does not render: {type(e).__name__}: {e}")
        return None
    # Assistant turns may be reworded (reasoning templates strip their thinking); the user's may not.
    missing = [m["content"] for m in SAMPLE_CONVERSATION
               if m["role"] == "user" and (not isinstance(rendered, str) or m["content"] not in rendered)]
    if missing:
        metrics["lm.chat_template_ok"] = 0
        checks.add("chat_template", "chat_template", False,
                   f"the rendering lacks the user's messages {missing}")
        return None
    metrics["lm.chat_template_ok"] = 1
    checks.add("chat_template", "chat_template", True, f"renders {len(rendered)} characters")
    return rendered


def _language(tokenizer: Any, model: Any, torch: Any, lang: str, text: str, max_tokens: int,
              checks: Checks) -> dict[str, float]:
    out: dict[str, float] = {}
    ids = tokenizer.encode(text, add_special_tokens=False)
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    # A leading space some tokenizers add or drop (sentencepiece's "▁") is no round-trip failure.
    ok = decoded.strip() == text.strip()
    detail = (f"{len(ids)} tokens" if ok
              else f"decodes to {decoded[:200]!r} ({_first_difference(text, decoded)})")
    checks.add(f"roundtrip:{lang}", "tokenizer", ok, detail, lang, len(text))
    out["lm.roundtrip_failures"] = 0 if ok else 1
    out["lm.tokens"] = len(ids)

    encoded = tokenizer(text, return_tensors="pt", add_special_tokens=True)
    input_ids = encoded["input_ids"][:, :max_tokens]
    if input_ids.shape[1] < 2:
        checks.add(f"perplexity:{lang}", "perplexity", False, "the text is under 2 tokens", lang, len(text))
        return out
    try:
        with torch.no_grad():
            loss = model(input_ids=input_ids, labels=input_ids).loss.item()
    except Exception as e:  # a forward pass that fails on the model's own tokens is the finding
        checks.add(f"perplexity:{lang}", "perplexity", False,
                   f"the forward pass raised {type(e).__name__}: {e}", lang, len(text))
        return out
    perplexity = math.exp(loss) if math.isfinite(loss) and loss < 700 else math.inf
    if not math.isfinite(perplexity):
        checks.add(f"perplexity:{lang}", "perplexity", False, f"loss {loss}: perplexity is not finite", lang,
                   len(text))
        return out
    out["lm.perplexity"] = perplexity
    checks.add(f"perplexity:{lang}", "perplexity", None,
               f"perplexity {perplexity:.3f} over {input_ids.shape[1]} tokens", lang, len(text))
    return out


def _first_difference(a: str, b: str) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at character {i}"


def _generation(tokenizer: Any, model: Any, torch: Any, prompt: str, max_new_tokens: int, checks: Checks,
                metrics: dict[str, float]) -> None:
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    started = time.monotonic()
    try:
        with torch.no_grad():
            output = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=pad, temperature=None, top_p=None, top_k=None)
    except Exception as e:  # the smoke test: whatever generation raises is its failure
        metrics["lm.generation_ok"] = 0
        metrics["lm.generated_tokens"] = 0
        checks.add("generation", "generation", False, f"generate raised {type(e).__name__}: {e}")
        return
    produced = output[0, encoded["input_ids"].shape[1]:]
    n = int(produced.shape[0])
    seconds = time.monotonic() - started
    metrics["lm.generation_ok"] = 1 if n > 0 else 0
    metrics["lm.generated_tokens"] = n
    metrics["lm.generation_seconds"] = round(seconds, 3)
    text = tokenizer.decode(produced, skip_special_tokens=True)
    checks.add("generation", "generation", n > 0, f"{n} tokens in {seconds:.2f}s: {text[:200]!r}")
