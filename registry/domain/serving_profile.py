"""Serving profiles: the engine and the settings of it that change outputs or capacity, for a GPU type and count.

A serving profile is a part of a release unit (issue 33). It arrives as a JSON-like mapping (the CLI reads
YAML, the API JSON; nothing here parses either)::

    {"engine": "vllm",
     "gpu": {"type": "H100-80GB", "count": 2},
     "settings": {"max_model_len": 8192, "max_num_seqs": 64, "dtype": "bfloat16", "kv_cache_dtype": "fp8",
                  "tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "generation_config": "auto",
                  "tool_call_parser": "hermes", "enable_auto_tool_choice": true}}

The field names are stable:

- ``engine``: one of :data:`ENGINE_SETTINGS` (``vllm`` for now).
- ``gpu.type``: a name from the operator's GPU table (policy data ``modelreg.config.gpus``), checked by
  :func:`fit_profile`, which has the table; ``gpu.count``: GPUs one engine replica spans, 1 to 256.
- ``settings``: the engine's own argument names with underscores (vLLM's ``--max-model-len`` is
  ``max_model_len``). :data:`ENGINE_SETTINGS` is the one table of what each engine allows, with types and
  ranges; a name not in it is refused, some with the reason they are never a profile's
  (:data:`REFUSED_SETTINGS`).

Decisions a reader would question:

- ``max_model_len`` and ``max_num_seqs`` are required: the capacity gate needs both, and vLLM's defaults for
  them depend on the model and the vLLM version.
- The settings the gate assumes are filled in when absent (``dtype`` and ``kv_cache_dtype`` ``auto``,
  ``tensor_parallel_size`` and ``pipeline_parallel_size`` 1, ``gpu_memory_utilization`` 0.9 (vLLM's
  default), ``generation_config`` ``auto``), so the digest names what is served and the engine config states
  it rather than leaving it to a version's default.
- ``tensor_parallel_size x pipeline_parallel_size`` must equal ``gpu.count``: a profile describes one engine
  replica, and a GPU it names but does not use would be a budget the gate counts and vLLM never touches.
  Data parallelism (more replicas) is a deployment's business, not the unit's.
- ``chat_template`` names one of the unit's own templates (``default``, or a named one such as
  ``tool_use``), never a path or inline text: the template is a component of the unit, reviewed and signed
  with it. The node resolves the name to the file it wrote and hands it to :func:`engine_config`.
- ``generation_config`` is ``auto`` (the unit's own ``generation_config.json``) or ``vllm`` (vLLM's
  defaults, ignoring the model's); a folder elsewhere is refused for the same reason.

The capacity gate, :func:`fit_profile`, applies the seed's memory model (:mod:`registry.domain.capacity`) per
GPU; what it approximates is in its docstring.

Example:
    >>> profile = parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1},
    ...                                  "settings": {"max_model_len": 4096, "max_num_seqs": 8}})
    >>> profile.settings["gpu_memory_utilization"], profile.tensor_parallel_size
    (0.9, 1)
    >>> profile.canonical_json()[:60]
    '{"engine":"vllm","gpu":{"count":1,"type":"L4"},"settings":{"'
    >>> parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1},
    ...                        "settings": {"max_model_len": 4096, "max_num_seqs": 8, "chat_template": "t.jinja"}})
    Traceback (most recent call last):
    ...
    registry.domain.errors.InvalidServingProfileError: invalid serving profile: settings.chat_template: ...
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Mapping

from registry.domain.capacity import KV_DTYPES, estimate_capacity
from registry.domain.errors import InvalidServingProfileError, ServingProfileDoesNotFitError
from registry.domain.text import printable

MAX_SETTINGS = 64
"""Settings one profile may hold (the vLLM table has fewer: more is hostile input, refused before reading)."""
MAX_NAME = 64
"""Characters of a GPU type, a setting name or a name-like setting value."""
MAX_GPUS = 256
"""GPUs one engine replica may span."""
MAX_PATH = 4096
"""Characters of a path handed to :func:`engine_config`."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Parser and quantization names as vLLM registers them (hermes, llama3_json, deepseek_r1, awq_marlin...).
_IDENT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# One of the unit's own chat templates: no dot or slash, so never a file.
_TEMPLATE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Setting:
    """One row of an engine's settings table.

    Attributes:
        kind: ``int``, ``float``, ``bool``, ``choice``, ``ident`` (a registered name, :data:`_IDENT_RE`) or
            ``template`` (a name of the unit's own chat templates).
        low: Smallest value of an ``int`` (inclusive) or ``float`` (exclusive).
        high: Largest value of an ``int`` or ``float`` (inclusive).
        choices: The values of a ``choice``.
        default: Filled in when absent (the value the gate assumes); None leaves it unset.
        required: The profile must state it.
        negatable: A ``bool`` whose engine default may be true: false is written as ``no-NAME: true``
            (vLLM's ``--no-enable-prefix-caching``); others are simply left out when false.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    default: Any = None
    required: bool = False
    negatable: bool = False


# vLLM's argument names and choices, as `vllm serve --help` and vllm/engine/arg_utils.py give them
# (--max-model-len, --kv-cache-dtype {auto,bfloat16,fp8,fp8_e4m3,fp8_e5m2}, --dtype {auto,half,float16,
# bfloat16,float,float32}, --generation-config, --chat-template-content-format {auto,string,openai}...).
# kv_cache_dtype leaves out vLLM's platform-specific fp8_inc (Intel Gaudi) and fp8_ds_mla (one kernel's
# layout), whose sizes the gate does not know.
_VLLM: dict[str, Setting] = {
    "max_model_len": Setting("int", 1, 16_777_216, required=True),
    "max_num_seqs": Setting("int", 1, 65_536, required=True),
    "max_num_batched_tokens": Setting("int", 1, 16_777_216),
    "dtype": Setting("choice", choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
                     default="auto"),
    "kv_cache_dtype": Setting("choice", choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"),
                              default="auto"),
    "tensor_parallel_size": Setting("int", 1, MAX_GPUS, default=1),
    "pipeline_parallel_size": Setting("int", 1, MAX_GPUS, default=1),
    "gpu_memory_utilization": Setting("float", 0.0, 1.0, default=0.9),
    "quantization": Setting("ident"),
    "seed": Setting("int", 0, 2**32 - 1),
    "enforce_eager": Setting("bool"),
    "enable_prefix_caching": Setting("bool", negatable=True),
    "enable_chunked_prefill": Setting("bool", negatable=True),
    "generation_config": Setting("choice", choices=("auto", "vllm"), default="auto"),
    "chat_template": Setting("template"),
    "chat_template_content_format": Setting("choice", choices=("auto", "string", "openai")),
    "tool_call_parser": Setting("ident"),
    "enable_auto_tool_choice": Setting("bool"),
    "reasoning_parser": Setting("ident"),
}

ENGINE_SETTINGS: Mapping[str, Mapping[str, Setting]] = MappingProxyType({"vllm": MappingProxyType(_VLLM)})
"""The one table: each engine a profile may name, and the settings it allows."""

REFUSED_SETTINGS: Mapping[str, str] = MappingProxyType({
    "model": "the model is the unit's own files",
    "tokenizer": "the tokenizer is a component of the unit",
    "revision": "the unit pins its files by digest",
    "tokenizer_revision": "the unit pins its files by digest",
    "code_revision": "the unit pins its files by digest",
    "trust_remote_code": "remote code is judged by the approval policy, never switched on by a profile",
    "tool_parser_plugin": "a plugin is code from a path outside the unit",
    "allowed_local_media_path": "it lets requests read the serving host's files",
    "download_dir": "the node decides where files live",
    "hf_config_path": "the config is a component of the unit",
    "hf_overrides": "it rewrites the unit's config",
    "data_parallel_size": "a profile is one engine replica; replicas are the deployment's",
    "cpu_offload_gb": "the capacity gate does not count offloaded weights",
})
"""Engine arguments a profile may never set, each with why (named in the refusal)."""


def _refuse(field_name: str, reason: str, **details: Any) -> InvalidServingProfileError:
    return InvalidServingProfileError(field_name, reason, **details)


def _shown(value: Any) -> str:
    """A hostile value as it may appear in a message: escaped and cut short."""
    # Cut before escaping: a megabyte of name costs no more than a short one.
    text = printable((value if isinstance(value, str) else repr(value))[:4 * MAX_NAME])
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _setting_value(name: str, row: Setting, value: Any) -> Any:
    where = f"settings.{name}"
    if row.kind == "int":
        if not _is_int(value):
            raise _refuse(where, f"must be an integer, not {type(value).__name__}")
        if not row.low <= value <= row.high:
            raise _refuse(where, f"{value} is out of range [{int(row.low)}, {int(row.high)}]")
        return value
    if row.kind == "float":
        if not (_is_int(value) or isinstance(value, float)):
            raise _refuse(where, f"must be a number, not {type(value).__name__}")
        number = float(value)
        # NaN fails every comparison, so it lands here too.
        if not row.low < number <= row.high:
            raise _refuse(where, f"{_shown(value)} is out of range ({row.low:g}, {row.high:g}]")
        return number
    if row.kind == "bool":
        if not isinstance(value, bool):
            raise _refuse(where, f"must be true or false, not {type(value).__name__}")
        return value
    if not isinstance(value, str):
        raise _refuse(where, f"must be a string, not {type(value).__name__}")
    if row.kind == "choice":
        if value not in row.choices:
            raise _refuse(where, f"{_shown(value)} is not one of {', '.join(row.choices)}", choices=list(row.choices))
        return value
    if row.kind == "template":
        if not _TEMPLATE_NAME_RE.match(value):
            raise _refuse(where, f"{_shown(value)} is not a name of the unit's own chat templates (such as "
                                 "'default' or 'tool_use'): a path or inline template is refused, the template is "
                                 "a component of the unit")
        return value
    if not _IDENT_RE.match(value):
        raise _refuse(where, f"{_shown(value)} is not a registered name (lowercase letters, digits, _ and -, "
                             f"at most {MAX_NAME})")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _refuse(where, f"must be an object, not {type(value).__name__}")
    return value


def _only_keys(value: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = min((_shown(k) for k in value if k not in allowed), default=None)
    if extra is not None:
        raise _refuse(f"{where}.{extra}" if where else extra,
                      f"unknown field; a serving profile has {', '.join(allowed)} here")


def _settings(engine: str, raw: Any) -> dict[str, Any]:
    raw = _mapping(raw, "settings")
    if len(raw) > MAX_SETTINGS:
        raise _refuse("settings", f"{len(raw)} settings, over the {MAX_SETTINGS} allowed", limit=MAX_SETTINGS)
    table = ENGINE_SETTINGS[engine]
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise _refuse("settings", f"setting names are strings, not {type(name).__name__}")
        if name in REFUSED_SETTINGS:
            raise _refuse(f"settings.{name}", f"never set by a serving profile: {REFUSED_SETTINGS[name]}")
        row = table.get(name)
        if row is None:
            shown = _shown(name)
            hint = (f"; write {name.replace('-', '_')} (underscores)" if name.replace("-", "_") in table
                    else f"; {engine} settings are {', '.join(sorted(table))}")
            raise _refuse(f"settings.{shown}", f"unknown {engine} setting {shown!r}{hint}")
        out[name] = _setting_value(name, row, value)
    for name, row in table.items():
        if name not in out:
            if row.required:
                raise _refuse(f"settings.{name}", "required: the capacity gate needs it")
            if row.default is not None:
                out[name] = row.default
    if out.get("enable_auto_tool_choice") and "tool_call_parser" not in out:
        raise _refuse("settings.enable_auto_tool_choice", "needs tool_call_parser (vLLM refuses to start without it)")
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class ServingProfile:
    """A validated serving profile; build it with :func:`parse_serving_profile`.

    Attributes:
        engine: The engine (``vllm``).
        gpu_type: The GPU type's name in the operator's table.
        gpu_count: GPUs one replica spans (``tensor_parallel_size x pipeline_parallel_size``).
        settings: Every setting, the gate's defaults filled in, sorted by name (read-only).
    """

    engine: str
    gpu_type: str
    gpu_count: int
    settings: Mapping[str, Any]

    @property
    def tensor_parallel_size(self) -> int:
        return self.settings["tensor_parallel_size"]

    @property
    def pipeline_parallel_size(self) -> int:
        return self.settings["pipeline_parallel_size"]

    def as_dict(self) -> dict[str, Any]:
        """The profile in its input shape, defaults filled in."""
        return {"engine": self.engine, "gpu": {"type": self.gpu_type, "count": self.gpu_count},
                "settings": dict(self.settings)}

    def canonical_json(self) -> str:
        """Sorted keys, no spaces: the bytes :attr:`digest` covers (equal profiles give equal text)."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)

    @property
    def digest(self) -> str:
        """sha256 hex of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def parse_serving_profile(data: Any) -> ServingProfile:
    """Validate a serving profile given as a JSON-like mapping.

    Args:
        data: ``{"engine": ..., "gpu": {"type": ..., "count": ...}, "settings": {...}}`` (module docstring).

    Raises:
        InvalidServingProfileError: Anything malformed, unknown or out of range; ``details['field']`` names it.
    """
    data = _mapping(data, "profile")
    _only_keys(data, ("engine", "gpu", "settings"), "")
    engine = data.get("engine")
    if engine not in ENGINE_SETTINGS:
        raise _refuse("engine", f"{_shown(engine)} is not a known engine; known: {', '.join(ENGINE_SETTINGS)}",
                      known=list(ENGINE_SETTINGS))
    gpu = _mapping(data.get("gpu"), "gpu")
    _only_keys(gpu, ("type", "count"), "gpu")
    gpu_type, count = gpu.get("type"), gpu.get("count")
    if not isinstance(gpu_type, str) or not _NAME_RE.match(gpu_type):
        raise _refuse("gpu.type", f"{_shown(gpu_type)} is not a GPU type name (letters, digits, '.', '_' and '-', "
                                  f"at most {MAX_NAME})")
    if not _is_int(count) or not 1 <= count <= MAX_GPUS:
        raise _refuse("gpu.count", f"{_shown(count)} is not an integer in [1, {MAX_GPUS}]")
    settings = _settings(engine, data.get("settings"))
    tp, pp = settings["tensor_parallel_size"], settings["pipeline_parallel_size"]
    if tp * pp != count:
        raise _refuse("settings.tensor_parallel_size",
                      f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} GPUs, but gpu.count is "
                      f"{count}: they must be equal (a profile is one engine replica)")
    return ServingProfile(engine=engine, gpu_type=gpu_type, gpu_count=count, settings=MappingProxyType(settings))


# --- the engine's own config file ------------------------------------------------------------------------------


ENGINE_CONFIG_FILES: Mapping[str, str] = MappingProxyType({"vllm": "vllm-config.yaml"})
"""The file name :func:`engine_config` gives each engine's config."""


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # Positional notation: YAML 1.1 (PyYAML) reads "1e-05" as a string.
        text = format(Decimal(repr(value)), "f")
        return text if "." in text else text + ".0"
    # A JSON string is a YAML double-quoted scalar; line breaks and control characters never get this far.
    return json.dumps(value, ensure_ascii=False)


def _path_argument(value: str | None, where: str) -> str | None:
    if value is None:
        return None
    # isprintable() also refuses U+0085 and U+2028, which YAML 1.1 counts as line breaks.
    if not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_PATH or not value.isprintable():
        raise _refuse(where, f"{_shown(value)} is not an absolute path of at most {MAX_PATH} printable characters")
    return value


def engine_config(profile: ServingProfile, *, chat_template_file: str | None,
                  generation_config_dir: str | None) -> tuple[str, bytes]:
    """The engine's own config file, written beside the unit's files: for vLLM the YAML of ``vllm serve --config``.

    Keys are vLLM's long option names without ``--``, sorted. The model directory is ``vllm serve``'s
    positional argument, not in the file; host, port and the served model name stay on the command line too
    (vLLM lets the command line override the file, so a node never needs to rewrite it). A false ``bool``
    is left out, or written ``no-NAME: true`` where the engine's default may be true. The same profile and
    paths always give the same bytes.

    Args:
        profile: The validated profile.
        chat_template_file: Where the node wrote the unit's template the profile names (``chat_template``);
            None exactly when the profile names none (vLLM then uses the tokenizer's own).
        generation_config_dir: The folder holding the unit's ``generation_config.json``; with
            ``generation_config: auto`` it is written as vLLM's ``generation-config`` (None: ``auto``, the
            model's folder).

    Raises:
        InvalidServingProfileError: The profile names a chat template and no file is given for it (or the
            other way round), or a path is not absolute or holds a control character.
    """
    chat_template_file = _path_argument(chat_template_file, "chat_template_file")
    generation_config_dir = _path_argument(generation_config_dir, "generation_config_dir")
    table = ENGINE_SETTINGS[profile.engine]
    lines = [f"# {profile.engine} engine config written by modelreg from serving profile sha256:{profile.digest}",
             "# vllm serve MODEL_DIR --config THIS_FILE"]
    options: dict[str, Any] = {}
    for name, value in profile.settings.items():
        if name == "chat_template":
            if chat_template_file is None:
                raise _refuse("chat_template_file", f"the profile names chat template {value!r}: give the file "
                                                    "the node wrote it to")
            continue
        if name == "generation_config" and value == "auto" and generation_config_dir is not None:
            value = generation_config_dir
        row = table[name]
        if row.kind == "bool" and not value:
            if row.negatable:
                options["no-" + name.replace("_", "-")] = True
            continue
        options[name.replace("_", "-")] = value
    if chat_template_file is not None:
        if "chat_template" not in profile.settings:
            raise _refuse("chat_template_file", "the profile names no chat template (vLLM then uses the tokenizer's "
                                                "own): a file given anyway would serve a template the profile hides")
        options["chat-template"] = chat_template_file
    lines += [f"{key}: {_yaml_scalar(options[key])}" for key in sorted(options)]
    return ENGINE_CONFIG_FILES[profile.engine], ("\n".join(lines) + "\n").encode()


# --- the capacity gate ---------------------------------------------------------------------------------------------

_TWO_BYTES = ("auto", "half", "float16", "bfloat16")


def kv_cache_element(profile: ServingProfile) -> tuple[str, int]:
    """The KV cache's element type and bytes under the profile: ``(label, bytes)``.

    vLLM's ``auto`` KV dtype follows the model dtype; a ``dtype`` of ``auto`` serves 32-bit checkpoints in 16
    bits, so only an explicit ``float``/``float32`` gives 4-byte KV elements.

    Example:
        >>> base = {"engine": "vllm", "gpu": {"type": "L4", "count": 1},
        ...         "settings": {"max_model_len": 8, "max_num_seqs": 1}}
        >>> kv_cache_element(parse_serving_profile(base))
        ('fp16', 2)
        >>> base["settings"]["kv_cache_dtype"] = "fp8_e5m2"
        >>> kv_cache_element(parse_serving_profile(base))
        ('fp8', 1)
    """
    kv, dtype = profile.settings["kv_cache_dtype"], profile.settings["dtype"]
    if kv.startswith("fp8"):
        return "fp8", KV_DTYPES["fp8"]
    if kv == "bfloat16" or dtype == "bfloat16":
        return "bf16", KV_DTYPES["fp16"]
    if dtype in _TWO_BYTES:
        return "fp16", KV_DTYPES["fp16"]
    return "fp32", 2 * KV_DTYPES["fp16"]


@dataclass(frozen=True)
class CapacityFit:
    """Whether a profile fits its GPUs, per GPU, with the arithmetic a person can check.

    Attributes:
        fits: The estimate is at most the budget. False also when it cannot be shown (``reason`` says why).
        per_gpu_needed: Bytes one GPU needs (weights and KV cache), None when a fact is unknown.
        per_gpu_budget: Bytes one GPU offers: memory x utilization - the runtime margin.
        arithmetic: The computation, one line per step.
        reason: Why it does not fit, or None.
    """

    fits: bool
    per_gpu_needed: int | None
    per_gpu_budget: int
    arithmetic: list[str] = field(default_factory=list)
    reason: str | None = None
    gpu: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "per_gpu_needed": self.per_gpu_needed, "per_gpu_budget": self.per_gpu_budget,
                "arithmetic": list(self.arithmetic), "reason": self.reason, "gpu": self.gpu}

    def require(self) -> CapacityFit:
        """This fit, when it fits.

        Raises:
            ServingProfileDoesNotFitError: It does not, or cannot be shown to; the arithmetic in its details.
        """
        if not self.fits:
            raise ServingProfileDoesNotFitError(self.gpu, self.reason or "does not fit",
                                                arithmetic=list(self.arithmetic), per_gpu_needed=self.per_gpu_needed,
                                                per_gpu_budget=self.per_gpu_budget)
        return self


def _gib(n: int | float) -> str:
    return f"{n / 2**30:.2f} GiB"


def _cell(facts: Mapping[str, Any], group: str, name: str) -> Any:
    cells = facts.get(group)
    cell = cells.get(name) if isinstance(cells, Mapping) else None
    return cell.get("value") if isinstance(cell, Mapping) else None


def _gpu_memory(gpus: Mapping[str, Any], gpu_type: str) -> int:
    entry = gpus.get(gpu_type) if isinstance(gpus, Mapping) else None
    if entry is None:
        known = sorted(k for k in gpus if isinstance(k, str)) if isinstance(gpus, Mapping) else []
        raise _refuse("gpu.type", f"unknown GPU type {gpu_type!r}; known: {', '.join(known) or 'none'} "
                                  "(operators add theirs under modelreg.config.gpus in the policy data)", known=known)
    memory = entry.get("memory_bytes") if isinstance(entry, Mapping) else None
    if not _is_int(memory) or memory <= 0:
        raise _refuse("gpu.type", f"the GPU table's entry for {gpu_type!r} has no positive integer memory_bytes")
    return memory


def fit_profile(profile: ServingProfile, facts: Mapping[str, Any] | None, gpus: Mapping[str, Any], *,
                runtime_margin_bytes: int) -> CapacityFit:
    """Does the profile fit its GPUs? The seed's memory model at ``max_model_len x max_num_seqs``, per GPU.

    Per GPU: the weights (their stored tensor bytes) split over ``tensor_parallel_size x
    pipeline_parallel_size`` GPUs, plus the KV cache for ``max_num_seqs`` sequences of ``max_model_len``
    tokens at the profile's KV dtype, split over the pipeline stages by layers and over tensor-parallel
    ranks by KV heads. The budget is the GPU's memory x ``gpu_memory_utilization`` minus the runtime margin.
    What is approximate:

    - KV heads fewer than ``tensor_parallel_size`` are replicated (each rank holds at least one, as vLLM
      does), and a latent (MLA) cache is whole on every rank; pipeline stages hold ``ceil(layers / pp)``
      layers each. Rounding goes towards more memory.
    - Weights are split evenly (embeddings and norms replicated on every rank are not added), at their
      stored size: an online ``quantization`` that shrinks them is not credited (an upper bound); an
      explicit ``dtype`` ``float``/``float32`` doubles them unless every stored tensor is F32.
    - Activations, CUDA graphs and the rest of :data:`registry.domain.capacity.NOT_COUNTED` are what the
      runtime margin stands for; sliding windows are not reduced (an upper bound).

    A fact it needs that is unknown (no weight bytes, no KV shape) means the profile cannot be shown to fit:
    ``fits`` is false and ``reason`` says which (fail closed). :meth:`CapacityFit.require` raises.

    Args:
        profile: The validated profile.
        facts: The version's facts document (``weights`` and ``architecture`` cells); None before they are read.
        gpus: The GPU table, policy data ``modelreg.config.gpus``: name -> ``{"memory_bytes": int}``.
        runtime_margin_bytes: Bytes per GPU kept for the runtime (``serving_runtime_margin_bytes``).

    Raises:
        InvalidServingProfileError: The profile's GPU type is not in the table (the known ones named), or
            its entry there is malformed.
        ValueError: ``runtime_margin_bytes`` is not a non-negative integer.
    """
    if not _is_int(runtime_margin_bytes) or runtime_margin_bytes < 0:
        raise ValueError(f"runtime_margin_bytes ({runtime_margin_bytes!r}) must be a non-negative integer")
    if not isinstance(facts, Mapping):
        facts = {}  # facts not read yet: every figure unknown, so it cannot be shown to fit
    settings = profile.settings
    tp, pp, count = profile.tensor_parallel_size, profile.pipeline_parallel_size, profile.gpu_count
    context, sequences = settings["max_model_len"], settings["max_num_seqs"]
    utilization = settings["gpu_memory_utilization"]
    memory = _gpu_memory(gpus, profile.gpu_type)
    gpu = f"{count} x {profile.gpu_type}"
    budget = math.floor(memory * utilization) - runtime_margin_bytes
    lines = [f"GPU {profile.gpu_type}: {memory / 1e9:.2f} GB = {_gib(memory)} each; {count} GPU{'s' * (count > 1)} "
             f"(tensor parallel {tp} x pipeline parallel {pp})",
             f"budget {_gib(memory)} x {utilization:g} - {_gib(runtime_margin_bytes)} margin = {_gib(budget)}"]
    estimate = estimate_capacity(facts, context=context, sequences=sequences)
    missing = []
    if estimate.weight_bytes is None:
        missing.append(f"weight bytes ({estimate.unknown.get('tensor_bytes', 'not recorded')})")
    if estimate.kv_bytes_per_token is None:
        why = "; ".join(f"{k}: {v}" for k, v in sorted(estimate.unknown.items()) if k != "tensor_bytes")
        missing.append(f"KV cache bytes per token ({why or 'attention shape not recorded'})")
    if missing:
        reason = "cannot be shown to fit: unknown " + " and ".join(missing)
        return CapacityFit(False, None, budget, [*lines, reason], reason, gpu)

    weights, upcast = estimate.weight_bytes, ""
    stored = _cell(facts, "weights", "dtypes")
    if settings["dtype"] in ("float", "float32") and not (isinstance(stored, Mapping) and set(stored) == {"F32"}):
        weights, upcast = 2 * weights, " x 2 (dtype float32 over 16-bit or unknown stored dtypes)"
    weights_per_gpu = -(-weights // count)
    lines.append(f"weights {_gib(estimate.weight_bytes)}{upcast} / {count} GPU{'s' * (count > 1)} = "
                 f"{_gib(weights_per_gpu)}")

    label, element = kv_cache_element(profile)
    # KV bytes are linear in the element size; the fp8 figure is the element count per token.
    per_token = estimate.kv_bytes_per_token["fp8"] // KV_DTYPES["fp8"] * element
    kv_total = per_token * context * sequences
    layers = _cell(facts, "architecture", "num_hidden_layers")
    layers_per_stage = -(-layers // pp)
    if estimate.attention == "mla":
        heads, heads_per_rank, split = 1, 1, "a latent cache is whole on every tensor-parallel rank"
    else:
        heads = _cell(facts, "architecture", "num_key_value_heads")
        heads_per_rank = -(-heads // tp)
        split = (f"{heads} KV heads over tensor parallel {tp}" + (", replicated" if heads < tp else ""))
    if pp > 1:
        split += f"; {layers_per_stage} of {layers} layers per pipeline stage"
    numerator, denominator = heads_per_rank * layers_per_stage, heads * layers
    kv_per_gpu = -(-kv_total * numerator // denominator)
    divisor = math.gcd(numerator, denominator)
    numerator, denominator = numerator // divisor, denominator // divisor
    share = ("" if numerator == denominator else f" / {denominator}" if numerator == 1
             else f" x {numerator}/{denominator}")
    total = f" = {_gib(kv_total)}{share}" if share else ""
    lines.append(f"KV {context} tokens x {sequences} seqs x {per_token} B/token ({label}){total} = "
                 f"{_gib(kv_per_gpu)} ({split})")
    lines += [f"note: {note}" for note in estimate.notes]
    needed = weights_per_gpu + kv_per_gpu
    fits = needed <= budget
    verdict = (f"needed {_gib(weights_per_gpu)} + {_gib(kv_per_gpu)} = {_gib(needed)} "
               f"{'<=' if fits else '>'} {_gib(budget)} per GPU: {'fits' if fits else 'does not fit'}")
    lines.append(verdict)
    reason = None if fits else f"{_gib(needed)} needed per GPU, {_gib(budget)} available"
    return CapacityFit(fits, needed, budget, lines, reason, gpu)
