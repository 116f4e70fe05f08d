"""The weights-sanity runner on the tiny Llama transformers writes, and on variants with one flaw planted.

Each variant starts from a clean model that passes, plants one flaw, and checks that exactly the
metrics of that flaw (and ``sanity.failed_checks``) change.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from registry.evals.runners import RunContext, RunnerError, check_metrics, sanity
from registry.facts import read_model_facts
from tests.support.tiny_llm import write_tiny_llm

WEIGHTS = "model.safetensors"
ONE_FAILED = {"sanity.failed_checks": 1}


def _facts(model: Path) -> dict:
    files = {p.relative_to(model).as_posix(): p.stat().st_size for p in model.rglob("*") if p.is_file()}

    def read_range(path: str, start: int, end: int) -> bytes:
        with (model / path).open("rb") as f:
            f.seek(start)
            return f.read(end - start)

    return read_model_facts(files, read_range)


def _run(model: Path, facts: dict | None | str = "read"):
    ctx = RunContext(model_dir=model, settings={}, evalsets=(), work_dir=model.parent,
                     facts=_facts(model) if facts == "read" else facts, trust_remote_code=False,
                     deadline=time.monotonic() + 120)
    result = sanity.run(ctx)
    assert check_metrics(result.metrics) == result.metrics
    return result


def _changed(base: dict, metrics: dict) -> dict:
    return {k: metrics[k] for k in metrics if metrics[k] != base.get(k)}


def _flips(clean, metrics: dict) -> dict:
    """The metrics that differ from the clean model's."""
    return _changed(clean[1].metrics, metrics)


def _failed(result) -> set[str]:
    return {c["id"] for c in result.cases if c["passed"] is False}


def _detail(result, case_id: str) -> str:
    (case,) = [c for c in result.cases if c["id"] == case_id]
    assert case["passed"] is False
    return case["detail"]


def _expected_parameters(model: Path) -> int:
    """The tiny Llama's parameters as transformers counts them on the model it loads."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(model, local_files_only=True, use_safetensors=True,
                                                  dtype=torch.float32)
    return sum(p.numel() for p in loaded.parameters())


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    model = write_tiny_llm(tmp_path_factory.mktemp("clean") / "model")
    return model, _run(model)


@pytest.fixture
def model(tmp_path, clean):
    return Path(shutil.copytree(clean[0], tmp_path / "model"))


def _edit(model: Path, **arrays_by_name):
    tensors = load_file(model / WEIGHTS)
    for name, edit in arrays_by_name.items():
        tensors[name.replace("__", ".")] = edit(tensors[name.replace("__", ".")].copy())
    save_file(tensors, model / WEIGHTS, metadata={"format": "pt"})


def test_the_tiny_llama_passes_with_its_parameter_count(clean):
    model, result = clean
    m = result.metrics
    assert m["sanity.parameters"] == _expected_parameters(model) == 39072
    assert m["sanity.tensors"] == 21 and m["sanity.files"] == 1
    assert m["sanity.tensor_bytes"] == 4 * 39072
    assert m["sanity.failed_checks"] == 0
    for key in ("nan_values", "inf_values", "nan_tensors", "inf_tensors", "zero_tensors", "duplicate_tensors",
                "shape_mismatches", "layer_mismatches", "parameter_count_mismatch", "index_mismatches",
                "unreadable_files", "unknown_dtypes", "tied_tensors"):
        assert m[f"sanity.{key}"] == 0, key
    cases = {c["id"]: c for c in result.cases}
    assert set(cases) == set(sanity.CHECKS)
    assert all(c["passed"] is True and c["category"] == "sanity" for c in cases.values()), cases
    # The layer norms are all ones (the same bytes), yet a constant tensor is no duplicate.
    assert "16 tensors agree" in cases["shapes"]["detail"]
    assert cases["parameter_count"]["detail"] == "39072 elements, as the facts record"


def test_nan_planted(model, clean):
    def plant(a):
        a[3, 5] = np.nan
        a[0, 0] = -np.nan
        return a

    _edit(model, model__layers__0__self_attn__q_proj__weight=plant)
    result = _run(model)
    assert _flips(clean, result.metrics) == {
        "sanity.nan_values": 2, "sanity.nan_tensors": 1, **ONE_FAILED}
    assert _failed(result) == {"nan", "nan:model.layers.0.self_attn.q_proj.weight"}
    assert _detail(result, "nan:model.layers.0.self_attn.q_proj.weight") == \
        "model.layers.0.self_attn.q_proj.weight (F32): 2 NaN"


def test_inf_planted(model, clean):
    def plant(a):
        a[1, 1], a[2, 2], a[3, 3] = np.inf, -np.inf, np.finfo(np.float32).max
        return a

    _edit(model, model__layers__1__self_attn__v_proj__weight=plant)
    assert _flips(clean, _run(model).metrics) == {
        "sanity.inf_values": 2, "sanity.inf_tensors": 1, **ONE_FAILED}


def test_zeroed_tensor(model, clean):
    _edit(model, model__layers__1__mlp__up_proj__weight=lambda a: np.zeros_like(a))
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.zero_tensors": 1, **ONE_FAILED}
    assert _detail(result, "zero_tensors:model.layers.1.mlp.up_proj.weight") == \
        "model.layers.1.mlp.up_proj.weight (F32 [64, 32])"


def test_an_all_zero_vector_is_reported_not_failed(model, clean):
    """A zero-initialised bias or norm offset is no broken weight: the version must stay approvable."""
    _edit(model, model__norm__weight=lambda a: np.zeros_like(a))
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.zero_vectors": 1}
    assert result.metrics["sanity.failed_checks"] == 0 and _failed(result) == set()
    (case,) = [c for c in result.cases if c["id"] == "zero_tensors"]
    assert case["passed"] is True
    assert case["detail"] == "1 all-zero vectors (biases, norm offsets), not failed: model.norm.weight"


def test_negative_zeros_are_zeros_and_one_tiny_value_is_not(model, clean):
    def tiny(a):
        a[:] = 0.0
        a[7, 3] = 1e-45  # a denormal: not zero
        return a

    _edit(model, model__layers__0__mlp__gate_proj__weight=lambda a: np.full_like(a, -0.0),
          model__layers__0__mlp__up_proj__weight=tiny)
    assert _flips(clean, _run(model).metrics) == {"sanity.zero_tensors": 1, **ONE_FAILED}


def test_duplicated_tensor(model, clean):
    tensors = load_file(model / WEIGHTS)
    q_proj = tensors["model.layers.0.self_attn.q_proj.weight"]
    _edit(model, model__layers__1__self_attn__o_proj__weight=lambda a: q_proj)
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.duplicate_tensors": 1, **ONE_FAILED}
    assert _detail(result, "duplicates:model.layers.1.self_attn.o_proj.weight") == \
        "model.layers.1.self_attn.o_proj.weight holds the same bytes as " \
        "model.layers.0.self_attn.q_proj.weight"


@pytest.mark.parametrize("tied", [True, False])
def test_lm_head_equal_to_embeddings_is_allowed_only_when_config_ties_them(model, clean, tied):
    tensors = load_file(model / WEIGHTS)
    _edit(model, lm_head__weight=lambda a: tensors["model.embed_tokens.weight"])
    config = json.loads((model / "config.json").read_text())
    config["tie_word_embeddings"] = tied
    (model / "config.json").write_text(json.dumps(config))
    expected = ({"sanity.tied_tensors": 1} if tied
                else {"sanity.duplicate_tensors": 1, **ONE_FAILED})
    assert _flips(clean, _run(model).metrics) == expected


def _edit_config(model: Path, **changes) -> None:
    config = json.loads((model / "config.json").read_text())
    config.update(changes)
    (model / "config.json").write_text(json.dumps(config))


def test_config_hidden_size_edited(model, clean):
    _edit_config(model, hidden_size=48)
    result = _run(model)
    # embeddings and lm_head, and per layer q, k, v, o, gate, up and down: every projection reads hidden_size.
    assert _flips(clean, result.metrics) == {"sanity.shape_mismatches": 16, **ONE_FAILED}
    assert _detail(result, "shapes:model.layers.0.self_attn.k_proj.weight") == \
        "model.layers.0.self_attn.k_proj.weight is [16, 32], config.json implies [16, 48]"


def test_config_kv_heads_edited(model, clean):
    _edit_config(model, num_key_value_heads=4)
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.shape_mismatches": 4, **ONE_FAILED}


def test_config_layer_count_edited(model, clean):
    _edit_config(model, num_hidden_layers=3)
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.layer_mismatches": 1, **ONE_FAILED}
    assert _detail(result, "layers:layer 2") == "layer 2 of num_hidden_layers 3 has no tensor"


def test_without_config_shapes_and_layers_are_skipped_not_passed(model, clean):
    (model / "config.json").unlink()
    result = _run(model)
    assert _flips(clean, result.metrics) == {}
    cases = {c["id"]: c for c in result.cases}
    assert cases["shapes"]["passed"] is None and cases["layers"]["passed"] is None


def test_facts_with_a_wrong_parameter_count(model, clean):
    facts = _facts(model)
    facts["weights"]["parameters"]["value"] += 1
    result = _run(model, facts)
    assert _flips(clean, result.metrics) == {
        "sanity.parameter_count_mismatch": 1, **ONE_FAILED}
    assert _detail(result, "parameter_count:parameters") == \
        "the tensors hold 39072 elements, the facts record 39073"


def test_without_facts_the_parameter_count_is_skipped(model, clean):
    result = _run(model, None)
    assert _flips(clean, result.metrics) == {}
    assert next(c for c in result.cases if c["id"] == "parameter_count")["passed"] is None


# --- other dtypes, written byte by byte -------------------------------------------------------------

def _write_raw(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
    header, offset, data = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(data))


def _bf16(a: np.ndarray) -> np.ndarray:
    return (a.astype("<f4").view("<u4") >> 16).astype("<u2")


def _e4m3(a: np.ndarray) -> np.ndarray:
    """float32 -> OCP FP8 E4M3 bytes, mantissa truncated, values under its smallest normal flushed to 0."""
    m, e = np.frexp(np.abs(a))  # |a| = m * 2**e, m in [0.5, 1)
    exponent = e.astype(np.int32) + 6  # bias 7: |a| = 1.f * 2**(E - 7) with 1.f = 2m
    mantissa = np.floor((2 * m - 1) * 8).astype(np.int32)
    raw = (np.clip(exponent, 0, 15) << 3) | mantissa
    raw[exponent < 1] = 0
    raw[(raw & 0x7F) == 0x7F] = 0x7E  # 448, the largest finite value: 0x7f is NaN
    return (raw | (np.signbit(a).astype(np.int32) << 7)).astype("u1")


# dtype, encode float32 -> raw array, NaN bit patterns, Inf bit patterns
ENCODINGS = {
    "BF16": (_bf16, [0x7FC0, 0xFF81], [0xFF80]),
    "F16": (lambda a: a.astype("<f2").view("<u2"), [0x7E00, 0xFC01], [0x7C00]),
    "F8_E5M2": (lambda a: (a.astype("<f2").view("<u2") >> 8).astype("u1"), [0x7F, 0xFD], [0xFC]),
    "F8_E4M3": (_e4m3, [0x7F, 0xFF], []),
}


@pytest.mark.parametrize("dtype", sorted(ENCODINGS))
def test_half_and_eighth_precision_nan_and_inf_by_their_bits(model, dtype):
    encode, nans, infs = ENCODINGS[dtype]
    arrays = {name: encode(a) for name, a in load_file(model / WEIGHTS).items()}

    def write():
        _write_raw(model / WEIGHTS, {n: (dtype, a.shape, a.tobytes()) for n, a in arrays.items()})

    write()
    base = _run(model)
    assert base.metrics["sanity.failed_checks"] == 0, _failed(base)
    assert base.metrics["sanity.parameters"] == 39072
    q = arrays["model.layers.0.self_attn.q_proj.weight"]
    q.reshape(-1)[[5, 700]] = nans
    k = arrays["model.layers.1.self_attn.k_proj.weight"]
    k.reshape(-1)[3:3 + len(infs)] = infs
    write()
    result = _run(model)
    expected = {"sanity.nan_values": 2, "sanity.nan_tensors": 1, **ONE_FAILED}
    if infs:
        expected.update({"sanity.inf_values": 1, "sanity.inf_tensors": 1, "sanity.failed_checks": 2})
    assert _changed(base.metrics, result.metrics) == expected


def test_chunks_cover_every_byte_once(model, clean, monkeypatch):
    # Windows of 100 bytes: 25 floats each, so a 320x32 embedding is read in 410 windows.
    monkeypatch.setattr(sanity, "CHUNK_BYTES", 100)
    def plant(a):
        a.reshape(-1)[[0, 24, 25, 5000, a.size - 1]] = np.nan
        return a

    _edit(model, model__embed_tokens__weight=plant)
    result = _run(model)
    assert _flips(clean, result.metrics) == {
        "sanity.nan_values": 5, "sanity.nan_tensors": 1, **ONE_FAILED}
    # The digest of a tensor read in 410 windows is the sha256 of all its bytes.
    raw = (model / WEIGHTS).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    begin, end = json.loads(raw[8:8 + n])["model.embed_tokens.weight"]["data_offsets"]
    t = sanity.Tensor(WEIGHTS, "model.embed_tokens.weight", "F32", (320, 32), 8 + n + begin, end - begin)
    sanity._scan_tensor(model / WEIGHTS, t)
    assert t.nan == 5 and not t.constant and not t.all_zero
    embeddings = load_file(model / WEIGHTS)["model.embed_tokens.weight"]
    assert t.digest == hashlib.sha256(embeddings.tobytes()).hexdigest()


# --- shards and headers -----------------------------------------------------------------------------

def _shard(model: Path) -> dict:
    tensors = load_file(model / WEIGHTS)
    (model / WEIGHTS).unlink()
    names = sorted(tensors)
    parts = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
    weight_map = {}
    for shard, part in parts.items():
        save_file({n: tensors[n] for n in part}, model / shard, metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    index = {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())}, "weight_map": weight_map}
    (model / sanity.INDEX).write_text(json.dumps(index))
    return index


def test_sharded_model_passes(model, clean):
    _shard(model)
    result = _run(model)
    assert _flips(clean, result.metrics) == {"sanity.files": 2}


def test_index_naming_a_missing_shard(model, clean):
    index = _shard(model)
    index["weight_map"]["model.extra.weight"] = "model-00003-of-00003.safetensors"
    (model / sanity.INDEX).write_text(json.dumps(index))
    result = _run(model)
    assert _flips(clean, result.metrics) == {
        "sanity.files": 2, "sanity.index_mismatches": 1, **ONE_FAILED}
    assert _detail(result, "index:model-00003-of-00003.safetensors") == \
        "shard 'model-00003-of-00003.safetensors' named in model.safetensors.index.json does not exist"
    # The facts record no parameter count for an index naming a missing shard: nothing to compare.
    assert next(c for c in result.cases if c["id"] == "parameter_count")["passed"] is None


def test_index_mapping_a_tensor_to_the_wrong_shard(model, clean):
    index = _shard(model)
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    (model / sanity.INDEX).write_text(json.dumps(index))
    result = _run(model, None)
    # Named in the wrong shard, and found in a shard that the index does not map it to.
    assert _flips(clean, result.metrics) == {
        "sanity.files": 2, "sanity.index_mismatches": 2, **ONE_FAILED}


def test_a_file_with_an_unknown_dtype(model, clean):
    _write_raw(model / "extra.safetensors", {"x": ("F7", (2,), b"\0\0")})
    result = _run(model)
    assert _flips(clean, result.metrics) == {
        "sanity.files": 2, "sanity.unreadable_files": 1, "sanity.unknown_dtypes": 1, **ONE_FAILED}
    assert "safetensors.tensor.dtype-unknown" in _detail(result, "headers:extra.safetensors")


def test_no_safetensors_at_all(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(RunnerError, match="no safetensors weights"):
        _run(tmp_path / "model", None)


def test_past_the_deadline(model):
    ctx = RunContext(model_dir=model, settings={}, evalsets=(), work_dir=model.parent, facts=None,
                     trust_remote_code=False, deadline=time.monotonic() - 1)
    with pytest.raises(RunnerError, match="deadline"):
        sanity.run(ctx)


def test_parameter_count_is_the_sum_of_elements(clean):
    tensors = load_file(clean[0] / WEIGHTS)
    assert clean[1].metrics["sanity.parameters"] == sum(math.prod(a.shape) for a in tensors.values())
