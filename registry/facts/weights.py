"""Weight facts from safetensors and GGUF headers: formats, dtypes, tensor elements and bytes.

A version may hold several *weight sets*: the shards of ``model.safetensors.index.json`` (else every
``*.safetensors`` file together), and each GGUF file or split GGUF (``-00001-of-00003.gguf``) on its own
(a GGUF repository usually ships one file per quantization). Parameters and bytes are read from
headers only; the data sections are never read.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from registry.domain.files import WEIGHT_FORMATS
from registry.facts._cells import (
    BudgetExhaustedError,
    RangeFile,
    ReadBudget,
    ReadRange,
    describe,
    known,
    load_json,
    unknown,
)
from registry.scanning import gguf, safetensors
from registry.scanning.model import Severity

MAX_SAFETENSORS_HEADER = 32 << 20
"""Facts read safetensors headers up to this size (the largest models' shards hold a few MB)."""
MAX_GGUF_HEADER = 64 << 20
"""Facts read a GGUF file's metadata and tensor infos within its first bytes up to this size."""

INDEX = "model.safetensors.index.json"
_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")

# llama_ftype of llama.cpp (general.file_type), as gguf-py's LlamaFileType names them.
GGUF_FILE_TYPES: dict[int, str] = {
    0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0",
    9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
    14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K",
    19: "MOSTLY_IQ2_XXS", 20: "MOSTLY_IQ2_XS", 21: "MOSTLY_Q2_K_S", 22: "MOSTLY_IQ3_XS", 23: "MOSTLY_IQ3_XXS",
    24: "MOSTLY_IQ1_S", 25: "MOSTLY_IQ4_NL", 26: "MOSTLY_IQ3_S", 27: "MOSTLY_IQ3_M", 28: "MOSTLY_IQ2_S",
    29: "MOSTLY_IQ2_M", 30: "MOSTLY_IQ4_XS", 31: "MOSTLY_IQ1_M", 32: "MOSTLY_BF16", 36: "MOSTLY_TQ1_0",
    37: "MOSTLY_TQ2_0", 38: "MOSTLY_MXFP4_MOE", 39: "MOSTLY_NVFP4", 40: "MOSTLY_Q1_0",
}

_GGUF_SCALARS = frozenset({"tokenizer.ggml.model", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                           "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id"})


def _gguf_wanted(key: str) -> bool:
    # The vocabulary, scores and merges are walked over, never kept.
    return key in _GGUF_SCALARS or not key.startswith("tokenizer.ggml.")


def weight_sets(files: Mapping[str, int], read_range: ReadRange,
                budget: ReadBudget) -> tuple[list[dict], list[dict]]:
    """Read every weight set's headers.

    Returns:
        The sets (``format``, ``files``, and either ``tensors``, ``tensor_elements``, ``bytes``,
        ``dtypes`` (elements per dtype) or ``unknown``), and the kept metadata of each readable GGUF set's
        first file with its path (``{"path": ..., "metadata": ..., "array_lengths": ...}``), in path order.
    """
    sets: list[dict] = []
    st = sorted(p for p in files if p.endswith(".safetensors"))
    if INDEX in files:
        sets.append(_safetensors_index_set(files, read_range, budget))
    elif st:
        sets.append(_read_set("safetensors", st, files, read_range, budget))
    gguf_metas: list[dict] = []
    for group in _gguf_groups(sorted(p for p in files if p.endswith(".gguf"))):
        result = _read_set("gguf", group, files, read_range, budget)
        meta = result.pop("_metadata", None)
        if meta is not None:
            gguf_metas.append(meta)
        sets.append(result)
    for s in sets:
        s.pop("_metadata", None)
    return sets, gguf_metas


def formats(files: Mapping[str, int]) -> list[str]:
    return sorted({WEIGHT_FORMATS[s] for p in files for s in WEIGHT_FORMATS if p.lower().endswith(s)})


def _gguf_groups(paths: list[str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for p in paths:
        m = _SPLIT_GGUF.match(p)
        groups.setdefault(f"{m['stem']}-of-{m['count']}" if m else p, []).append(p)
    return list(groups.values())


def _safetensors_index_set(files: Mapping[str, int], read_range: ReadRange, budget: ReadBudget) -> dict:
    index, error = load_json(read_range, INDEX, files[INDEX], budget)
    base = {"format": "safetensors", "index": INDEX}
    if error is not None:
        return {**base, "files": [], "unknown": error}
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        return {**base, "files": [], "unknown": f"{INDEX} has no weight_map of tensor -> shard file names"}
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if s not in files]
    if missing:
        return {**base, "files": [],
                "unknown": f"{INDEX} names {len(missing)} shard(s) the version does not hold: "
                           f"{[m[:200] for m in missing[:5]]}"}
    result = _read_set("safetensors", shards, files, read_range, budget)
    if "unknown" not in result:
        declared = {t for t in weight_map}
        found = result.pop("_names")
        if declared != found:
            result = {**result, "unknown": f"{INDEX} maps {len(declared)} tensors, the shards hold {len(found)}"}
    return {**base, **result}


def _read_set(fmt: str, paths: list[str], files: Mapping[str, int], read_range: ReadRange,
              budget: ReadBudget) -> dict:
    out: dict[str, Any] = {"format": fmt, "files": paths}
    tensors = elements = nbytes = 0
    dtypes: dict[str, int] = {}
    names: set[str] = set()
    file_types: set[str] = set()
    for path in paths:
        size = files[path]
        try:
            if fmt == "safetensors":
                header, findings = safetensors.read_header(
                    RangeFile(read_range, path, size, budget, 8 + MAX_SAFETENSORS_HEADER), size,
                    max_header_size=MAX_SAFETENSORS_HEADER)
                infos = [(t.name, t.dtype, t.elements, t.nbytes) for t in header.tensors] if header else None
            else:
                handle = RangeFile(read_range, path, size, budget, MAX_GGUF_HEADER)
                gh, findings = gguf.read_header(handle, size, keep=_gguf_wanted)
                if gh is None and handle.clamped:
                    return {**out, "unknown": f"{path}: the GGUF header runs past the first {MAX_GGUF_HEADER} bytes"}
                infos = [(t.name, t.ggml_type, t.elements, t.nbytes) for t in gh.tensors] if gh else None
                if gh is not None:
                    ft = gh.metadata.get("general.file_type")
                    file_types.add(
                        "absent" if "general.file_type" not in gh.metadata
                        else GGUF_FILE_TYPES[ft] if isinstance(ft, int) and ft in GGUF_FILE_TYPES
                        else "unknown (an array)" if "general.file_type" in gh.array_lengths
                        else f"unknown ({describe(ft)})")
                    if "_metadata" not in out:
                        out["_metadata"] = {"path": path, "metadata": gh.metadata, "array_lengths": gh.array_lengths}
        except BudgetExhaustedError as exc:
            return {**out, "unknown": f"{path}: {exc}"}
        if infos is None:
            flaw = next((f for f in findings if f.severity is Severity.UNSAFE), None)
            why = f"{flaw.rule_id}: {flaw.message}" if flaw else "unreadable header"
            return {**out, "unknown": f"{path}: {why}"[:300]}
        for name, dtype, count, size_bytes in infos:
            tensors += 1
            elements += count
            nbytes += size_bytes
            dtypes[dtype] = dtypes.get(dtype, 0) + count
            names.add(name)
    out.update(tensors=tensors, tensor_elements=elements, bytes=nbytes, dtypes=dict(sorted(dtypes.items())))
    if fmt == "gguf":
        out["file_type"] = file_types.pop() if len(file_types) == 1 else sorted(file_types)
    else:
        out["_names"] = names
    return out


def summarize(sets: list[dict], packed: str | None) -> dict[str, dict]:
    """The version-level cells ``parameters``, ``tensor_bytes`` and ``dtypes`` from its weight sets.

    Args:
        sets: From :func:`weight_sets`.
        packed: Why safetensors tensor elements are not parameters (a packing quantization), or None.
    """
    for s in sets:
        s.pop("_names", None)
    if not sets:
        none = unknown("no safetensors or GGUF weights: parameters are read from their headers only")
        return {"parameters": none, "tensor_bytes": none, "dtypes": none}
    bad = next((s for s in sets if "unknown" in s), None)
    if bad is not None:
        why = unknown(f"{bad['format']} weights: {bad['unknown']}")
        return {"parameters": why, "tensor_bytes": why, "dtypes": why}
    source = f"{' + '.join(sorted({s['format'] for s in sets}))} headers ({sum(len(s['files']) for s in sets)} files)"
    if packed is not None and any(s["format"] == "safetensors" for s in sets):
        params = unknown(packed)
    else:
        counts = {s["tensor_elements"] for s in sets}
        params = (known(counts.pop(), source) if len(counts) == 1
                  else unknown(f"{len(sets)} weight sets hold different element counts: see weights.sets"))
    if len(sets) == 1:
        return {"parameters": params, "tensor_bytes": known(sets[0]["bytes"], source),
                "dtypes": known(sets[0]["dtypes"], source)}
    several = unknown(f"{len(sets)} weight sets (e.g. one GGUF file per quantization): see weights.sets")
    return {"parameters": params, "tensor_bytes": several, "dtypes": several}
