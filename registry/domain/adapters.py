"""A LoRA adapter checked against its base model: PEFT's ``adapter_config.json`` and the adapter's tensors
against the base's tensor names, shapes and dtypes. No I/O: the caller reads the config and the safetensors
headers (never a tensor's data, never a pickle) and passes what they say.

An adapter is a version of its own model bound to a base version (``registry/services/adapters.py``). PEFT
saves it as ``adapter_config.json`` beside ``adapter_model.safetensors`` (or a pickle, ``adapter_model.bin``),
the tensors named ``base_model.model.<module>.<kind>`` where ``<module>`` is the base module's name as in the
base's own checkpoint (``model.layers.0.self_attn.q_proj``, whose weight is ``<module>.weight``).

The LoRA family accepted (:data:`LORA_FAMILY`) is the PEFT types whose saved tensors are low-rank factors of a
base ``Linear`` (or ``Embedding``) weight, so their shapes follow from the base's: ``LORA`` (with DoRA's
magnitude vector and LoRA biases), ``ADALORA`` (LoRA's ``lora_A``/``lora_B`` plus the singular values
``lora_E``), ``LOHA`` (two Hadamard-multiplied low-rank pairs) and ``LOKR`` (Kronecker factors, each whole or
low-rank). Other PEFT types (prompt tuning, IA3, VeRA, BOFT, ...) are refused: their tensors are not low-rank
factors of base weights, and the serving engines (vLLM, KServe, Dynamo) load LoRA only.

What is refused (:attr:`AdapterCheck.refusals`, every one listed) and what is only told
(:attr:`AdapterCheck.findings`) is decided by :func:`check_adapter`. ``target_modules`` given as a regular
expression is never evaluated here (a submitter's pattern could take exponential time): the tensors decide.

Example:
    >>> base = {"model.q_proj.weight": TensorSpec("F32", (32, 16))}
    >>> config = {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "base_model_name_or_path": "x/y"}
    >>> ok = check_adapter(AdapterInput(config, tensors={
    ...     "base_model.model.model.q_proj.lora_A.weight": TensorSpec("F32", (4, 16)),
    ...     "base_model.model.model.q_proj.lora_B.weight": TensorSpec("F32", (32, 4))}), base, ("x/y",))
    >>> ok.refusals, ok.peft_type
    ((), 'LORA')
    >>> bad = check_adapter(AdapterInput(config, tensors={
    ...     "base_model.model.model.q_proj.lora_A.weight": TensorSpec("F32", (4, 8)),
    ...     "base_model.model.model.q_proj.lora_B.weight": TensorSpec("F32", (32, 4))}), base, ("x/y",))
    >>> [r.code for r in bad.refusals]
    ['adapter.shape']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

from registry.domain.errors import AdapterIncompatibleError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_SAFETENSORS = "adapter_model.safetensors"
ADAPTER_PICKLE = "adapter_model.bin"
PEFT_PREFIX = "base_model.model."
"""Every tensor name of a saved PEFT adapter starts with it; the rest is the base module's name and the kind."""

LORA_FAMILY: tuple[str, ...] = ("LORA", "ADALORA", "LOHA", "LOKR")
"""The ``peft_type`` values accepted: low-rank factors of base weights, whose shapes the base decides."""
FLOATING = frozenset({"F16", "BF16", "F32", "F64"})
"""Safetensors dtypes an adapter's tensors may have (PEFT computes the update in floating point)."""
MAX_CONFIG_BYTES = 1 << 20
"""A larger ``adapter_config.json`` is refused unread."""
MAX_BASE_REF_LENGTH = 256
"""The longest ``adapter_of`` a submission may give (a reference or ``sha256:<hex>``)."""
MAX_REASONS = 50
"""Refusals listed at most (the count of the rest is told)."""

# A tensor's kind: its name's ending after the module, and the factor it is.
_KINDS: dict[str, tuple[tuple[str, str], ...]] = {
    "LORA": (("lora_A.weight", "A"), ("lora_B.weight", "B"), ("lora_B.bias", "bias"),
             ("lora_embedding_A", "emb_A"), ("lora_embedding_B", "emb_B"),
             ("lora_magnitude_vector.weight", "magnitude"), ("lora_magnitude_vector", "magnitude")),
    "ADALORA": (("lora_A", "A"), ("lora_B", "B"), ("lora_E", "E"),
                ("lora_A.weight", "A"), ("lora_B.weight", "B")),
    "LOHA": (("hada_w1_a", "w1_a"), ("hada_w1_b", "w1_b"), ("hada_w2_a", "w2_a"), ("hada_w2_b", "w2_b")),
    "LOKR": (("lokr_w1", "w1"), ("lokr_w1_a", "w1_a"), ("lokr_w1_b", "w1_b"),
             ("lokr_w2", "w2"), ("lokr_w2_a", "w2_a"), ("lokr_w2_b", "w2_b")),
}
_BASE_LAYER = ".base_layer"
"""PEFT saves a targeted embedding's own weight under ``<module>.base_layer.weight`` (``save_embedding_layers``)."""


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor as a safetensors header declares it."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reason:
    """One thing the check found: a stable ``code``, a sentence, and the data it is about."""

    code: str
    message: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.detail}


@dataclass(frozen=True, slots=True)
class AdapterInput:
    """What the caller read of the adapter's files.

    Attributes:
        config: ``adapter_config.json`` parsed (strict JSON), or None when it could not be (``config_error``).
        config_error: Why there is no config: ``(code, message)``, ``adapter.config-missing`` or
            ``adapter.config-invalid``.
        tensors: ``adapter_model.safetensors``'s header, name -> spec; None when there is none.
        tensors_error: Why the header could not be read (a refusal), or None.
        pickle_only: The weights are only in ``adapter_model.bin``: a pickle, never unpickled, so its tensors
            cannot be checked (a finding; the scanner judges the file).
    """

    config: Any = None
    config_error: tuple[str, str] | None = None
    tensors: Mapping[str, TensorSpec] | None = None
    tensors_error: str | None = None
    pickle_only: bool = False


@dataclass(frozen=True)
class AdapterCheck:
    """The outcome: every refusal (the adapter does not fit, fail closed) and every finding (told only)."""

    refusals: tuple[Reason, ...]
    findings: tuple[Reason, ...]
    peft_type: str | None = None
    refused_total: int = 0
    """How many refusals there were (``refusals`` lists the first :data:`MAX_REASONS`)."""

    @property
    def ok(self) -> bool:
        return not self.refusals

    def as_dict(self) -> dict[str, Any]:
        return {"peft_type": self.peft_type, "refusals": [r.as_dict() for r in self.refusals],
                "refused_total": self.refused_total, "findings": [f.as_dict() for f in self.findings]}

    def require(self, base: str) -> None:
        """Raise when the adapter does not fit ``base`` (its ``tenant/name@N``).

        Raises:
            AdapterIncompatibleError: naming every refusal (and the findings beside them).
        """
        if self.refusals:
            raise AdapterIncompatibleError(base, [r.as_dict() for r in self.refusals],
                                           [f.as_dict() for f in self.findings], total=self.refused_total)


def base_modules(base_tensors: Mapping[str, TensorSpec]) -> dict[str, dict[str, TensorSpec]]:
    """The base's modules, named as PEFT names them, from its tensor names: ``module -> {parameter: spec}``.

    >>> spec = TensorSpec("F32", (2, 2))
    >>> sorted(base_modules({"model.q_proj.weight": spec, "model.q_proj.bias": spec, "lm_head.weight": spec}))
    ['lm_head', 'model.q_proj']
    """
    modules: dict[str, dict[str, TensorSpec]] = {}
    for name, spec in base_tensors.items():
        module, dot, parameter = name.rpartition(".")
        if dot:
            modules.setdefault(module, {})[parameter] = spec
    return modules


def targets(module: str, target_modules: Collection[str]) -> bool:
    """Whether PEFT's list form of ``target_modules`` selects ``module``: the name itself or its last parts.

    >>> targets("model.layers.0.self_attn.q_proj", ["q_proj"]), targets("model.x_q_proj", ["q_proj"])
    (True, False)
    """
    return any(module == t or module.endswith("." + t) for t in target_modules)


class _Collector:
    def __init__(self) -> None:
        self.refusals: list[Reason] = []
        self.findings: list[Reason] = []

    def refuse(self, code: str, message: str, **detail: Any) -> None:
        self.refusals.append(Reason(code, message, detail))

    def tell(self, code: str, message: str, **detail: Any) -> None:
        self.findings.append(Reason(code, message, detail))

    def result(self, peft_type: str | None) -> AdapterCheck:
        return AdapterCheck(tuple(self.refusals[:MAX_REASONS]), tuple(self.findings), peft_type, len(self.refusals))


def check_adapter(adapter: AdapterInput, base_tensors: Mapping[str, TensorSpec] | None,
                  base_names: Collection[str], *, base_error: str | None = None) -> AdapterCheck:
    """Check an adapter against its base.

    Args:
        adapter: What was read of the adapter's files.
        base_tensors: The base's safetensors tensors (every shard), name -> spec; None when unreadable.
        base_names: The names the base goes by (``tenant/name``, its upstream repository...): a
            ``base_model_name_or_path`` that is none of them is a finding, never a refusal (the digest
            binding decides which base it is).
        base_error: Why ``base_tensors`` is None.

    Returns:
        Every refusal and finding.
    """
    out = _Collector()
    config = _check_config(adapter, base_names, out)
    if base_tensors is None:
        out.refuse("adapter.base-weights", f"the base's weights cannot be checked against: {base_error}",
                   reason=base_error)
        return out.result(config.peft_type if config else None)
    modules = base_modules(base_tensors)
    if config is not None and isinstance(config.targets, tuple):
        for target in config.targets:
            if not any(targets(m, (target,)) for m in modules):
                out.refuse("adapter.target-module", f"target module {target!r} is no module of the base",
                           target=target)
    if adapter.pickle_only:
        out.tell("adapter.weights-unchecked",
                 f"{ADAPTER_PICKLE} is a pickle: its tensors' names and shapes are not checked (that would mean "
                 "unpickling it); the scanner judges the file", path=ADAPTER_PICKLE)
    elif adapter.tensors_error is not None:
        out.refuse("adapter.weights-unreadable", f"{ADAPTER_SAFETENSORS}: {adapter.tensors_error}",
                   path=ADAPTER_SAFETENSORS)
    elif adapter.tensors is None:
        out.refuse("adapter.weights-missing",
                   f"the adapter holds neither {ADAPTER_SAFETENSORS} nor {ADAPTER_PICKLE} at its root")
    elif config is not None:
        _check_tensors(config, adapter.tensors, base_tensors, modules, out)
    return out.result(config.peft_type if config else None)


@dataclass(frozen=True)
class _Config:
    peft_type: str
    targets: tuple[str, ...] | str | None
    rank: int | None
    fan_in_fan_out: bool
    modules_to_save: tuple[str, ...] = ()


def _check_config(adapter: AdapterInput, base_names: Collection[str], out: _Collector) -> _Config | None:
    """The config's fields the tensors are checked with; None when the tensors cannot be (refused already)."""
    if adapter.config_error is not None:
        code, message = adapter.config_error
        out.refuse(code, message, path=ADAPTER_CONFIG)
        return None
    doc = adapter.config
    if not isinstance(doc, dict):
        out.refuse("adapter.config-invalid", f"{ADAPTER_CONFIG} is not a JSON object", path=ADAPTER_CONFIG)
        return None
    peft_type = doc.get("peft_type")
    if not isinstance(peft_type, str) or peft_type not in LORA_FAMILY:
        # Another type's fields mean other things: nothing more of it is judged.
        out.refuse("adapter.peft-type", f"peft_type {_show(peft_type)} is not one of the LoRA family "
                                        f"({', '.join(LORA_FAMILY)})", peft_type=_show(peft_type),
                   accepted=list(LORA_FAMILY))
        return None
    usable = True
    raw_targets = doc.get("target_modules")
    found_targets: tuple[str, ...] | str | None = None
    if isinstance(raw_targets, str) and raw_targets:
        found_targets = raw_targets
        out.tell("adapter.target-modules-pattern", "target_modules is a regular expression: it is not evaluated; "
                 "each tensor's module is checked against the base instead", pattern=raw_targets[:200])
    elif (isinstance(raw_targets, list) and raw_targets
          and all(isinstance(t, str) and t and len(t) <= 256 for t in raw_targets)):
        found_targets = tuple(dict.fromkeys(raw_targets))
    else:
        out.refuse("adapter.config-invalid", "target_modules is neither a non-empty list of module names nor a "
                   "pattern", path=ADAPTER_CONFIG, field="target_modules")
        usable = False
    rank = doc.get("r")
    if peft_type == "ADALORA" or doc.get("rank_pattern"):
        # AdaLoRA prunes ranks per module, and a rank pattern sets them per module: the A/B pairs must
        # agree with each other, not with one configured rank.
        rank = None
    elif not _positive_int(rank):
        out.refuse("adapter.config-invalid", f"r {_show(rank)} is not a positive integer", path=ADAPTER_CONFIG,
                   field="r")
        usable = False
    fan = doc.get("fan_in_fan_out", False)
    if not isinstance(fan, bool):
        out.refuse("adapter.config-invalid", "fan_in_fan_out is not a boolean", path=ADAPTER_CONFIG,
                   field="fan_in_fan_out")
        usable = False
    saved = doc.get("modules_to_save") or []
    if not isinstance(saved, list) or not all(isinstance(m, str) and m and len(m) <= 256 for m in saved):
        out.refuse("adapter.config-invalid", "modules_to_save is not a list of module names", path=ADAPTER_CONFIG,
                   field="modules_to_save")
        usable, saved = False, []
    named = doc.get("base_model_name_or_path")
    if isinstance(named, str) and named and named not in base_names:
        out.tell("adapter.base-name-differs",
                 f"base_model_name_or_path names {named[:200]!r}, not the bound base: the binding to the base's "
                 "weights digest decides, the name is informational", named=named[:200])
    if not usable:
        return None
    return _Config(peft_type, found_targets, rank, fan, tuple(saved))  # type: ignore[arg-type]


def _check_tensors(config: _Config, tensors: Mapping[str, TensorSpec], base_tensors: Mapping[str, TensorSpec],
                   modules: Mapping[str, Mapping[str, TensorSpec]], out: _Collector) -> None:
    kinds = _KINDS[config.peft_type]
    grouped: dict[str, dict[str, tuple[str, TensorSpec]]] = {}
    adapter_dtypes: set[str] = set()
    for name in sorted(tensors):
        spec = tensors[name]
        if spec.dtype not in FLOATING:
            out.refuse("adapter.dtype", f"tensor {name} is {spec.dtype}, not a floating-point dtype "
                       f"({', '.join(sorted(FLOATING))})", tensor=name, dtype=spec.dtype)
        adapter_dtypes.add(spec.dtype)
        if not name.startswith(PEFT_PREFIX):
            out.refuse("adapter.tensor-name", f"tensor {name} does not start with {PEFT_PREFIX!r}: not a saved "
                       "PEFT adapter's", tensor=name)
            continue
        rest = name[len(PEFT_PREFIX):]
        kind = next(((suffix, factor) for suffix, factor in kinds if rest.endswith("." + suffix)), None)
        if kind is None:
            _check_copy(config, name, rest, spec, base_tensors, out)
            continue
        module = rest[:-len(kind[0]) - 1]
        grouped.setdefault(module, {})[kind[1]] = (name, spec)
    if not grouped:
        out.refuse("adapter.no-tensors", f"the adapter holds no {config.peft_type} tensor")
    for module, factors in grouped.items():
        _check_module(config, module, factors, modules, out)
    base_dtypes = {s.dtype for s in base_tensors.values() if s.dtype in FLOATING}
    if adapter_dtypes & FLOATING and base_dtypes and not adapter_dtypes <= base_dtypes:
        out.tell("adapter.dtype-differs", f"the adapter's tensors are {', '.join(sorted(adapter_dtypes))}, the "
                 f"base's {', '.join(sorted(base_dtypes))}: PEFT casts them when it loads",
                 adapter=sorted(adapter_dtypes), base=sorted(base_dtypes))


def _check_copy(config: _Config, name: str, rest: str, spec: TensorSpec, base_tensors: Mapping[str, TensorSpec],
                out: _Collector) -> None:
    """A tensor that is no LoRA factor: a whole copy of a base tensor, of a module ``modules_to_save`` names or of
    a targeted module's own layer (PEFT saves a targeted embedding's), which must have the base tensor's shape."""
    layer = rest.find(_BASE_LAYER + ".")
    original = rest if layer < 0 else rest[:layer] + rest[layer + len(_BASE_LAYER):]
    module = original.rpartition(".")[0]
    base = base_tensors.get(original)
    if base is None:
        out.refuse("adapter.tensor-name", f"tensor {name} is neither a LoRA factor nor a copy of a base tensor",
                   tensor=name)
        return
    named = (targets(module, config.modules_to_save) if layer < 0
             else not isinstance(config.targets, tuple) or targets(module, config.targets))
    if not named:
        out.refuse("adapter.module-not-targeted", f"tensor {name} replaces the base's {original}, which neither "
                   "modules_to_save nor target_modules names", tensor=name, module=module)
    if base.shape != spec.shape:
        out.refuse("adapter.shape", f"tensor {name} is {_dims(spec.shape)}, the base's {original} is "
                   f"{_dims(base.shape)}", tensor=name, shape=list(spec.shape), expected=list(base.shape))


def _check_module(config: _Config, module: str, factors: Mapping[str, tuple[str, TensorSpec]],
                  modules: Mapping[str, Mapping[str, TensorSpec]], out: _Collector) -> None:
    first = next(iter(factors.values()))[0]
    params = modules.get(module)
    if params is None:
        out.refuse("adapter.module-missing", f"tensor {first} adapts {module}, which is no module of the base",
                   tensor=first, module=module)
        return
    if isinstance(config.targets, tuple) and not targets(module, config.targets):
        out.refuse("adapter.module-not-targeted", f"tensor {first} adapts {module}, which target_modules does not "
                   "name (PEFT would not load it)", tensor=first, module=module)
    weight = params.get("weight")
    if weight is None or len(weight.shape) != 2 or weight.dtype not in FLOATING:
        what = ("has no weight" if weight is None else f"has a {_dims(weight.shape)} {weight.dtype} weight")
        out.refuse("adapter.base-module-unsupported", f"the base's {module} {what}: only a floating-point 2-D "
                   "(Linear or Embedding) weight can be checked against", module=module)
        return
    embedding = "emb_A" in factors or "emb_B" in factors
    if embedding:
        # An Embedding's weight is (num_embeddings, embedding_dim); PEFT's A is (r, num), B is (dim, r).
        rows, cols = weight.shape[1], weight.shape[0]
    else:
        # A Linear's weight is (out, in); a Conv1D (fan_in_fan_out) stores (in, out).
        rows, cols = (weight.shape[1], weight.shape[0]) if config.fan_in_fan_out else weight.shape
    expect = _expected_shapes(config, factors, rows, cols)
    for factor, (name, spec) in sorted(factors.items()):
        want = expect.get(factor)
        if isinstance(want, str):
            out.refuse("adapter.shape", f"tensor {name}: {want}", tensor=name, module=module, shape=list(spec.shape))
        elif want is not None and tuple(spec.shape) != want:
            out.refuse("adapter.shape", f"tensor {name} is {_dims(spec.shape)}; the base's {module} "
                       f"({_dims(weight.shape)}) needs {_dims(want)}", tensor=name, module=module,
                       shape=list(spec.shape), expected=list(want))
    for needed in _required(config.peft_type, factors, embedding):
        out.refuse("adapter.tensor-missing", f"{module} has no {needed} tensor beside {first}", module=module,
                   missing=needed)


def _required(peft_type: str, factors: Mapping[str, Any], embedding: bool) -> list[str]:
    """The factors a module's tensors lack (one half of a pair)."""
    if peft_type in ("LORA", "ADALORA"):
        pair = ("emb_A", "emb_B") if embedding else ("A", "B")
        return [f for f in pair if f not in factors]
    if peft_type == "LOHA":
        return [f for f in ("w1_a", "w1_b", "w2_a", "w2_b") if f not in factors]
    missing = []
    for w in ("w1", "w2"):
        if w not in factors and not (f"{w}_a" in factors and f"{w}_b" in factors):
            missing.append(f"{w} (or {w}_a and {w}_b)")
    return missing


def _expected_shapes(config: _Config, factors: Mapping[str, tuple[str, TensorSpec]], out_dim: int,
                     in_dim: int) -> dict[str, tuple[int, ...] | str]:
    """The shape each factor must have for a base weight of ``out_dim x in_dim`` (a string: why none fits)."""
    shapes = {f: tuple(spec.shape) for f, (_, spec) in factors.items()}
    if config.peft_type in ("LORA", "ADALORA"):
        a, b = ("emb_A", "emb_B") if "emb_A" in factors or "emb_B" in factors else ("A", "B")
        rank = config.rank or _rank(shapes.get(a), 0) or _rank(shapes.get(b), 1)
        if rank is None:
            return {}
        return {a: (rank, in_dim), b: (out_dim, rank), "E": (rank, 1), "bias": (out_dim,), "magnitude": (out_dim,)}
    if config.peft_type == "LOHA":
        expected: dict[str, tuple[int, ...] | str] = {}
        for pair in ("w1", "w2"):
            rank = config.rank or _rank(shapes.get(f"{pair}_a"), 1) or _rank(shapes.get(f"{pair}_b"), 0)
            if rank is not None:
                expected[f"{pair}_a"], expected[f"{pair}_b"] = (out_dim, rank), (rank, in_dim)
        return expected
    return _lokr_shapes(shapes, out_dim, in_dim)


def _lokr_shapes(shapes: Mapping[str, tuple[int, ...]], out_dim: int, in_dim: int) -> dict[str, tuple[int, ...] | str]:
    """LoKr: ``w1`` (a x c) and ``w2`` (b x d), each whole or as a low-rank pair, with ``a*b = out`` and
    ``c*d = in`` (the Kronecker product is the base weight's shape)."""
    factor_dims: dict[str, tuple[int, int]] = {}
    problems: dict[str, tuple[int, ...] | str] = {}
    for w in ("w1", "w2"):
        whole, low_a, low_b = shapes.get(w), shapes.get(f"{w}_a"), shapes.get(f"{w}_b")
        if whole is not None and len(whole) == 2:
            factor_dims[w] = (whole[0], whole[1])
        elif low_a is not None and low_b is not None and len(low_a) == 2 and len(low_b) == 2:
            if low_a[1] != low_b[0]:
                problems[f"{w}_b"] = f"its rank {low_b[0]} differs from {w}_a's {low_a[1]}"
            factor_dims[w] = (low_a[0], low_b[1])
        elif whole is not None or low_a is not None or low_b is not None:
            for name in (w, f"{w}_a", f"{w}_b"):
                if shapes.get(name) is not None:
                    problems[name] = "a Kronecker factor is 2-D"
    if "w1" in factor_dims and "w2" in factor_dims and not problems:
        (a, c), (b, d) = factor_dims["w1"], factor_dims["w2"]
        if a * b != out_dim or c * d != in_dim:
            culprit = "w2" if "w2" in shapes else "w2_b"
            problems[culprit] = (f"the Kronecker product of w1 ({a} x {c}) and w2 ({b} x {d}) is {a * b} x {c * d}, "
                                 f"the base weight {out_dim} x {in_dim}")
    return problems


def _rank(shape: tuple[int, ...] | None, axis: int) -> int | None:
    return shape[axis] if shape is not None and len(shape) == 2 else None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31


def _dims(shape: tuple[int, ...]) -> str:
    return " x ".join(map(str, shape)) or "a scalar"


def _show(value: Any) -> str:
    return repr(value)[:80]
