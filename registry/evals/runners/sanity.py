"""The ``weights-sanity`` runner: every safetensors tensor of a version read once, in bounded chunks.

Headers are parsed by the scanners' hardened parser (``registry.scanning.safetensors.read_header``);
tensor data is read through short-lived numpy memory maps of at most ``CHUNK_BYTES`` each, so a
100 GB model is checked with a few tens of MB of memory. Nothing but numpy is imported: no torch, no
pickle. The checks, each one case (``category`` ``"sanity"``) and counted in the metrics:

=====================  ===========================================================================
``headers``            every file's header parses (an unknown dtype fails here)
``index``              ``model.safetensors.index.json`` maps tensors to shards that exist and hold them
``nan``, ``inf``       no NaN or Inf values in float tensors (F16 and BF16 by bit tests, F8 variants
                       by their encodings; F4 and F6 have no NaN or Inf encoding at all)
``zero_tensors``       no tensor of two or more dimensions whose values are all zero; all-zero
                       vectors (biases, norm offsets) are reported (``sanity.zero_vectors``), not failed
``duplicates``         no two tensors with the same bytes (sha256), except embeddings and lm_head
                       when ``config.json`` declares ``tie_word_embeddings``
``shapes``             embeddings, lm_head, attention and MLP projections agree with ``config.json``
                       (an unreadable ``config.json`` fails here)
``layers``             the layer indices present are exactly ``0 .. num_hidden_layers - 1``
``parameter_count``    the elements counted equal the recorded facts' ``weights.parameters``
=====================  ===========================================================================

Only what ``config.json`` states is checked; what it does not say is skipped, and said so in the
case's detail. ``sanity.failed_checks`` counts the checks that failed: a policy gates on it with max 0.

Example:
    >>> bf16 = np.array([0x7FC0, 0xFF80, 0x3F80, 0x8000], dtype="<u2")  # NaN, -Inf, 1.0, -0.0
    >>> _nan_inf(bf16, "BF16"), _any_nonzero(bf16[3:], "BF16")
    ((1, 1), False)
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from registry.evals.runners import MAX_CASE_DETAIL, RunContext, RunnerError, RunnerResult
from registry.scanning._formatio import DuplicateKeyError, strict_json_loads
from registry.scanning.model import Severity
from registry.scanning.safetensors import DTYPE_BITS, read_header

CHUNK_BYTES = 8 << 20
"""Tensor bytes mapped and tested at a time: memory stays a small multiple of this."""
MAX_JSON_BYTES = 64 << 20
"""config.json and the shard index are read whole only up to this size."""
MAX_NAMES_IN_DETAIL = 5
MAX_TENSOR_CASES = 50
"""Per check, at most this many failing tensors get a case of their own (the metric counts them all)."""
INDEX = "model.safetensors.index.json"
CONFIG = "config.json"

CHECKS = ("headers", "index", "nan", "inf", "zero_tensors", "duplicates", "shapes", "layers",
          "parameter_count")

# Plain numpy dtypes (little-endian, as safetensors stores them); the others are tested bitwise.
_NUMPY = {"F32": "<f4", "F64": "<f8", "C64": "<c8", "BOOL": "u1", "U8": "u1", "I8": "i1", "I16": "<i2",
          "U16": "<u2", "I32": "<i4", "U32": "<u4", "I64": "<i8", "U64": "<u8"}
# (exponent mask, mantissa mask): all exponent bits set is Inf (mantissa 0) or NaN (IEEE-like layouts).
_IEEE_BITS = {"F16": ("<u2", 0x7C00, 0x03FF), "BF16": ("<u2", 0x7F80, 0x007F),
              "F8_E5M2": ("u1", 0x7C, 0x03)}
# Formats with one NaN encoding (or none) and no Inf: value & mask == nan (OCP FP8, FNUZ, E8M0).
_SINGLE_NAN = {"F8_E4M3": (0x7F, 0x7F), "F8_E4M3FNUZ": (0xFF, 0x80), "F8_E5M2FNUZ": (0xFF, 0x80),
               "F8_E8M0": (0xFF, 0xFF)}
# Masks whose bits must all be clear for a value to be zero (sign ignored where -0 exists).
_ZERO_MASK = {"F16": 0x7FFF, "BF16": 0x7FFF, "F8_E5M2": 0x7F, "F8_E4M3": 0x7F, "F8_E4M3FNUZ": 0xFF,
              "F8_E5M2FNUZ": 0xFF}
_NO_NAN_ENCODING = frozenset({"F4", "F6_E2M3", "F6_E3M2"})
"""OCP MX FP4 and FP6 encode no NaN and no Inf: nothing to count."""

_EMBED = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|tok_embeddings|embed_in)\.weight$")
_HEAD = re.compile(r"(^|\.)(lm_head|embed_out)\.weight$|^output\.weight$")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")
_ATTN = re.compile(r"\.(?:self_attn|attention|attn)\.(q_proj|k_proj|v_proj|o_proj)\.weight$")
_MLP = re.compile(r"\.(?:mlp|feed_forward)\.(gate_proj|up_proj|down_proj)\.weight$")


@dataclass(slots=True)
class Tensor:
    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    """Absolute offset of the first data byte in the file."""
    nbytes: int
    nan: int = 0
    inf: int = 0
    all_zero: bool = False
    constant: bool = False
    digest: str = ""

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(slots=True)
class Report:
    """The checks' outcomes as they are found: failures and notes per check, then cases and metrics."""

    metrics: dict[str, float] = field(default_factory=dict)
    cases: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    weight_map: dict[str, str] | None = None
    unknown_dtypes: int = 0
    zero_vectors: list[str] = field(default_factory=list)

    def fail(self, check: str, subject: str, what: str) -> None:
        """A failure of ``check`` about ``subject`` (a tensor, file or layer): a case ``check:subject``."""
        found = self.failures.setdefault(check, [])
        if len(found) < MAX_TENSOR_CASES:
            self.cases.append(_case(f"{check}:{subject}"[:200], False, what))
        found.append(what)

    def note(self, check: str, text: str) -> None:
        self.notes[check] = text

    def skip(self, check: str, why: str) -> None:
        """The check could not be made (``config.json`` or the facts do not say): its case passes nothing."""
        self.notes[check] = why
        self.skipped.add(check)

    def summarize(self) -> None:
        failed = 0
        for check in CHECKS:
            found = self.failures.get(check, [])
            if found:
                failed += 1
                shown = ", ".join(found[:MAX_NAMES_IN_DETAIL])
                hidden = len(found) - MAX_NAMES_IN_DETAIL
                more = f" and {hidden} more" if hidden > 0 else ""
                self.cases.append(_case(check, False, f"{len(found)} found: {shown}{more}"))
            else:
                passed = None if check in self.skipped else True
                self.cases.append(_case(check, passed, self.notes.get(check, "ok")))
        self.metrics["sanity.failed_checks"] = failed


def _case(case_id: str, passed: bool | None, detail: str) -> dict[str, Any]:
    return {"evalset": "", "id": case_id, "category": "sanity", "language": "", "length": "",
            "passed": passed, "detail": detail[:MAX_CASE_DETAIL]}


def run(ctx: RunContext) -> RunnerResult:
    """Check the safetensors weights under ``ctx.model_dir``.

    Raises:
        RunnerError: no safetensors weights, or the deadline passed.
    """
    root = ctx.model_dir
    report = Report()
    config = _load_config(root, report)
    files = _weight_files(root, report)
    tensors = _read_headers(root, files, report)
    _check_index(tensors, report)
    started = time.monotonic()
    total = sum(t.nbytes for t in tensors)
    print(f"weights-sanity: {len(tensors)} tensors in {len(files)} files, {total} bytes", flush=True)
    for t in tensors:
        if time.monotonic() > ctx.deadline:
            raise RunnerError("weights-sanity ran past its deadline")
        _scan_tensor(root / t.file, t)
    print(f"weights-sanity: data read in {time.monotonic() - started:.1f}s", flush=True)

    _check_values(tensors, report)
    _check_duplicates(tensors, config, report)
    _check_shapes(tensors, config, report)
    _check_layers(tensors, config, report)
    _check_parameters(tensors, ctx.facts, report)
    report.summarize()
    m = report.metrics
    m["sanity.files"] = len(files)
    m["sanity.tensors"] = len(tensors)
    m["sanity.parameters"] = sum(t.elements for t in tensors)
    m["sanity.tensor_bytes"] = total
    m["sanity.unknown_dtypes"] = report.unknown_dtypes
    m["sanity.zero_vectors"] = len(report.zero_vectors)
    for check, metric in (("headers", "sanity.unreadable_files"), ("index", "sanity.index_mismatches"),
                          ("nan", "sanity.nan_tensors"), ("inf", "sanity.inf_tensors"),
                          ("zero_tensors", "sanity.zero_tensors"), ("duplicates", "sanity.duplicate_tensors"),
                          ("shapes", "sanity.shape_mismatches"), ("layers", "sanity.layer_mismatches")):
        m[metric] = len(report.failures.get(check, []))
    m["sanity.parameter_count_mismatch"] = 1 if report.failures.get("parameter_count") else 0
    m["sanity.nan_values"] = sum(t.nan for t in tensors)
    m["sanity.inf_values"] = sum(t.inf for t in tensors)
    for line in (c for c in report.cases if c["passed"] is False):
        print(f"weights-sanity: FAILED {line['id']}: {line['detail']}", file=sys.stderr)
    return RunnerResult(metrics=m, cases=report.cases)


# --- files and headers ------------------------------------------------------------------------------

def _load_json(path: Path) -> Any:
    """Parse a small JSON file strictly, or raise ``ValueError`` saying why not."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{path.name} is {size} bytes, over the {MAX_JSON_BYTES} read")
    try:
        return strict_json_loads(path.read_bytes().decode("utf-8"))
    except DuplicateKeyError as e:
        raise ValueError(f"{path.name} repeats key {e.key!r}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path.name} is not JSON: {e}"[:300]) from None


def _load_config(root: Path, report: Report) -> dict[str, Any] | None:
    """``config.json`` (its ``text_config`` for a multimodal model that nests the decoder), or None."""
    path = root / CONFIG
    if not path.is_file():
        report.skip("shapes", "no config.json: shapes not checked")
        report.skip("layers", "no config.json: layers not checked")
        return None
    try:
        config = _load_json(path)
    except ValueError as e:
        report.fail("shapes", CONFIG, str(e))
        report.skip("layers", "config.json is unreadable: layers not checked")
        return None
    if not isinstance(config, dict):
        report.fail("shapes", CONFIG, "config.json is not a JSON object")
        report.skip("layers", "config.json is unreadable: layers not checked")
        return None
    text = config.get("text_config")
    if "hidden_size" not in config and isinstance(text, dict):
        return {**text, "quantization_config": config.get("quantization_config"),
                "tie_word_embeddings": text.get("tie_word_embeddings", config.get("tie_word_embeddings"))}
    return config


def _weight_files(root: Path, report: Report) -> list[str]:
    """The weight set, chosen as the facts readers choose it: the index's shards, else every safetensors file.

    Raises:
        RunnerError: there are no safetensors weights.
    """
    present = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.safetensors") if p.is_file())
    index = root / INDEX
    if not index.is_file():
        if not present:
            raise RunnerError("no safetensors weights")
        report.note("index", f"no {INDEX}: all {len(present)} safetensors files are one weight set")
        return present
    try:
        doc = _load_json(index)
    except ValueError as e:
        report.fail("index", INDEX, str(e))
        doc = None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        if doc is not None:
            report.fail("index", INDEX, f"{INDEX} has no weight_map of tensor -> shard file name")
        if not present:
            raise RunnerError("no safetensors weights")
        return present
    shards = sorted(set(weight_map.values()))
    held = set(present)
    for shard in shards:
        if shard not in held:
            report.fail("index", shard, f"shard {shard[:200]!r} named in {INDEX} does not exist")
    files = [s for s in shards if s in held]
    if not files:
        raise RunnerError(f"no safetensors weights: none of the shards {INDEX} names exists")
    outside = [p for p in present if p not in set(files)]
    if outside:
        report.note("index", f"{len(outside)} safetensors files outside the index not checked: {outside[:3]}")
    report.weight_map = weight_map
    return files


def _read_headers(root: Path, files: list[str], report: Report) -> list[Tensor]:
    tensors: list[Tensor] = []
    for name in files:
        path = root / name
        size = path.stat().st_size
        with path.open("rb") as f:
            header, findings = read_header(f, size)
            if header is None:
                flaw = next((x for x in findings if x.severity is Severity.UNSAFE), None)
                why = f"{flaw.rule_id}: {flaw.message}" if flaw else "unreadable"
                report.fail("headers", name, f"{name}: {why}")
                unknown = sum(1 for x in findings if x.rule_id == "safetensors.tensor.dtype-unknown")
                report.unknown_dtypes += unknown
                continue
            # read_header validated the whole header (types, offsets, coverage); only offsets are read here.
            f.seek(8)
            entries = strict_json_loads(f.read(header.header_size).decode("utf-8").rstrip())
        data_start = 8 + header.header_size
        for info in header.tensors:
            begin = entries[info.name]["data_offsets"][0]
            tensors.append(Tensor(name, info.name, info.dtype, info.shape, data_start + begin, info.nbytes))
    return tensors


def _check_index(tensors: list[Tensor], report: Report) -> None:
    weight_map = report.weight_map
    if weight_map is None:
        return
    where = {(t.file, t.name) for t in tensors}
    files_read = {t.file for t in tensors}
    for name, shard in weight_map.items():
        if shard in files_read and (shard, name) not in where:
            report.fail("index", name, f"tensor {name[:200]!r} mapped to {shard[:200]!r} is not in it")
    for t in tensors:
        if weight_map.get(t.name) != t.file:
            report.fail("index", t.name,
                        f"tensor {t.name[:200]!r} in {t.file[:200]!r} is not mapped there by {INDEX}")


# --- tensor data ------------------------------------------------------------------------------------

def _chunks(path: Path, t: Tensor) -> Iterator[np.ndarray]:
    """The tensor's bytes as uint8 arrays of at most ``CHUNK_BYTES``, each a memory map of its own."""
    width = max(1, DTYPE_BITS[t.dtype] // 8)
    step = max(width, CHUNK_BYTES - CHUNK_BYTES % width)
    for offset in range(0, t.nbytes, step):
        n = min(step, t.nbytes - offset)
        # The caller drops its last reference before the next window: that unmaps it, so resident
        # memory stays about one chunk however large the file.
        yield np.memmap(path, dtype=np.uint8, mode="r", offset=t.start + offset, shape=(n,))


def _scan_tensor(path: Path, t: Tensor) -> None:
    """Hash the tensor's bytes and count NaN, Inf, zero and distinct values, chunk by chunk."""
    digest = hashlib.sha256()
    nonzero = False
    constant = True
    first: Any = None
    for raw in _chunks(path, t):
        digest.update(memoryview(raw))
        values = _as_values(raw, t.dtype)
        nan, inf = _nan_inf(values, t.dtype)
        t.nan += nan
        t.inf += inf
        if not nonzero:
            nonzero = _any_nonzero(values, t.dtype)
        if constant:
            if first is None and values.size:
                first = values[0].copy()
            constant = bool(np.all(values == first))
        del values
    t.digest = digest.hexdigest()
    t.all_zero = t.nbytes > 0 and not nonzero and t.dtype != "F8_E8M0"
    t.constant = t.nbytes > 0 and constant


def _as_values(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in _NUMPY:
        return raw.view(_NUMPY[dtype])
    if dtype in _IEEE_BITS:
        return raw.view(_IEEE_BITS[dtype][0])
    return raw  # one-byte F8 encodings, and sub-byte F4/F6 packed in bytes


def _nan_inf(values: np.ndarray, dtype: str) -> tuple[int, int]:
    if dtype in ("F32", "F64", "C64"):
        return int(np.count_nonzero(np.isnan(values))), int(np.count_nonzero(np.isinf(values)))
    if dtype in _IEEE_BITS:
        _, exponent, mantissa = _IEEE_BITS[dtype]
        special = (values & exponent) == exponent
        nan = int(np.count_nonzero(special & ((values & mantissa) != 0)))
        return nan, int(np.count_nonzero(special)) - nan
    if dtype in _SINGLE_NAN:
        mask, nan = _SINGLE_NAN[dtype]
        return int(np.count_nonzero((values & mask) == nan)), 0
    return 0, 0  # integers, BOOL, and F4/F6 (no NaN or Inf encoding)


def _any_nonzero(values: np.ndarray, dtype: str) -> bool:
    if dtype in _ZERO_MASK:
        return bool(np.any(values & _ZERO_MASK[dtype]))
    return bool(np.any(values != 0))


# --- checks -----------------------------------------------------------------------------------------

def _check_values(tensors: list[Tensor], report: Report) -> None:
    for t in tensors:
        if t.nan:
            report.fail("nan", t.name, f"{t.name} ({t.dtype}): {t.nan} NaN")
        if t.inf:
            report.fail("inf", t.name, f"{t.name} ({t.dtype}): {t.inf} Inf")
        if t.all_zero and len(t.shape) <= 1:
            # Biases and norm offsets are often initialised to zero and stay so: reported, not failed.
            report.zero_vectors.append(t.name)
        elif t.all_zero:
            report.fail("zero_tensors", t.name, f"{t.name} ({t.dtype} {list(t.shape)})")
    if report.zero_vectors and not report.failures.get("zero_tensors"):
        shown = ", ".join(report.zero_vectors[:MAX_NAMES_IN_DETAIL])
        more = len(report.zero_vectors) - MAX_NAMES_IN_DETAIL
        report.note("zero_tensors", f"{len(report.zero_vectors)} all-zero vectors (biases, norm offsets), "
                                    f"not failed: {shown}{f' and {more} more' if more > 0 else ''}")
    odd = sorted({t.dtype for t in tensors} & _NO_NAN_ENCODING)
    if odd:
        report.note("nan", f"{', '.join(odd)} encode no NaN or Inf: nothing to count there")


def _tied(config: dict[str, Any] | None) -> bool:
    return isinstance(config, dict) and config.get("tie_word_embeddings") is True


def _check_duplicates(tensors: list[Tensor], config: dict[str, Any] | None, report: Report) -> None:
    """Tensors holding the same bytes under two names (constant tensors, such as norms at 1.0, aside)."""
    groups: dict[tuple[str, str], list[Tensor]] = {}
    for t in tensors:
        if t.nbytes and not t.constant:
            groups.setdefault((t.dtype, t.digest), []).append(t)
    tied = 0
    for group in groups.values():
        if len(group) < 2:
            continue
        names = sorted(t.name for t in group)
        if len(group) == 2 and _tied(config) and any(_EMBED.search(n) for n in names) \
                and any(_HEAD.search(n) for n in names):
            tied += 1
            continue
        for name in names[1:]:
            report.fail("duplicates", name, f"{name} holds the same bytes as {names[0]}")
    report.metrics["sanity.tied_tensors"] = tied
    if tied:
        report.note("duplicates", "embeddings and lm_head hold the same bytes: config.json ties them")


def _int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Expected 2-D shapes by name pattern kind, from what ``config`` states."""
    vocab, hidden = _int(config, "vocab_size"), _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads") or heads
    head_dim = _int(config, "head_dim")
    if head_dim is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads
    inter = _int(config, "intermediate_size")
    out: dict[str, tuple[int, int]] = {}
    if vocab and hidden:
        out["embed"] = out["head"] = (vocab, hidden)
    # Multi-head latent attention (DeepSeek) sizes its projections otherwise: not checked.
    mla = any(k in config for k in ("kv_lora_rank", "qk_nope_head_dim"))
    if hidden and heads and head_dim and not mla:
        out["q_proj"] = (heads * head_dim, hidden)
        out["k_proj"] = out["v_proj"] = (kv_heads * head_dim, hidden)
        out["o_proj"] = (hidden, heads * head_dim)
    if hidden and inter:
        out["gate_proj"] = out["up_proj"] = (inter, hidden)
        out["down_proj"] = (hidden, inter)
    return out


def _check_shapes(tensors: list[Tensor], config: dict[str, Any] | None, report: Report) -> None:
    if config is None:
        return
    if config.get("quantization_config"):
        report.skip("shapes", "quantized weights (config.json quantization_config): shapes not checked")
        return
    expected = _expected_shapes(config)
    if not expected:
        report.skip("shapes", "config.json states no vocab_size, hidden_size or head counts: not checked")
        return
    checked = 0
    for t in tensors:
        kind = ("embed" if _EMBED.search(t.name) else "head" if _HEAD.search(t.name) else None)
        if kind is None:
            m = _ATTN.search(t.name) or _MLP.search(t.name)
            kind = m.group(1) if m else None
        if kind not in expected:
            continue
        checked += 1
        if t.shape != expected[kind]:
            report.fail("shapes", t.name,
                        f"{t.name} is {list(t.shape)}, config.json implies {list(expected[kind])}")
    if not report.failures.get("shapes"):
        report.note("shapes", f"{checked} tensors agree with config.json ({', '.join(sorted(expected))})")


def _check_layers(tensors: list[Tensor], config: dict[str, Any] | None, report: Report) -> None:
    if config is None:
        return
    layers = _int(config, "num_hidden_layers")
    present = {int(m.group(1)) for t in tensors if (m := _LAYER.search(t.name))}
    if layers is None or not present:
        report.skip("layers", "config.json states no num_hidden_layers, or no tensor is in a numbered layer")
        return
    # Multi-token prediction layers (DeepSeek V3) follow the decoder's layers.
    extra = _int(config, "num_nextn_predict_layers") or 0
    missing = sorted(set(range(layers)) - present)
    unexpected = sorted(i for i in present - set(range(layers + extra)))
    for i in missing[:MAX_TENSOR_CASES]:
        report.fail("layers", f"layer {i}", f"layer {i} of num_hidden_layers {layers} has no tensor")
    for i in unexpected[:MAX_TENSOR_CASES]:
        report.fail("layers", f"layer {i}", f"layer {i} is beyond num_hidden_layers {layers}")
    if not missing and not unexpected:
        report.note("layers", f"layers 0..{layers - 1} present, as config.json states")


def _check_parameters(tensors: list[Tensor], facts: dict[str, Any] | None, report: Report) -> None:
    cell = ((facts or {}).get("weights") or {}).get("parameters") if isinstance(facts, dict) else None
    value = cell.get("value") if isinstance(cell, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        why = cell.get("unknown") if isinstance(cell, dict) else None
        report.skip("parameter_count", f"no recorded parameter count to compare: {why or 'no facts'}"[:300])
        return
    counted = sum(t.elements for t in tensors)
    if counted != value:
        report.fail("parameter_count", "parameters",
                    f"the tensors hold {counted} elements, the facts record {value}")
    else:
        report.note("parameter_count", f"{counted} elements, as the facts record")
