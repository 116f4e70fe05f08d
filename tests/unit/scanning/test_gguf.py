"""GGUF: a bounded parse of everything before the tensor data, and the chat template's Jinja."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from registry.scanning import gguf
from tests.support.format_samples import (
    MALICIOUS_CHAT_TEMPLATES,
    ORDINARY_CHAT_TEMPLATES,
    gguf_kv_string,
    gguf_kv_u32,
    gguf_ordinary,
    gguf_raw,
    gguf_string,
    gguf_tensor_info,
    mutations,
    rules,
    scan_bytes,
    verdict,
)


def _scan(data: bytes) -> list:
    return scan_bytes(gguf.scan, data, "model.gguf")


@pytest.mark.parametrize("name", sorted(ORDINARY_CHAT_TEMPLATES))
def test_ordinary_gguf_with_realistic_chat_template_is_safe(tmp_path, name):
    path = gguf_ordinary(tmp_path / "m.gguf", chat_template=ORDINARY_CHAT_TEMPLATES[name])
    assert _scan(path.read_bytes()) == []


def test_ordinary_gguf_is_readable_by_the_reference_reader(tmp_path):
    from gguf import GGUFReader

    path = gguf_ordinary(tmp_path / "m.gguf", chat_template=None)
    assert _scan(path.read_bytes()) == []
    assert len(GGUFReader(str(path)).tensors) == 3


def test_big_endian_gguf_is_parsed(tmp_path):
    from gguf import GGUFEndian, GGUFWriter

    path = tmp_path / "be.gguf"
    writer = GGUFWriter(str(path), "llama", endianess=GGUFEndian.BIG)
    writer.add_chat_template(ORDINARY_CHAT_TEMPLATES["gemma"])
    writer.add_tensor("w", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert _scan(path.read_bytes()) == []
    bad = tmp_path / "be_bad.gguf"
    writer = GGUFWriter(str(bad), "llama", endianess=GGUFEndian.BIG)
    writer.add_chat_template(MALICIOUS_CHAT_TEMPLATES["gguf_chat_template_cycler_globals_ssti"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert "gguf.chat-template.gadget" in rules(_scan(bad.read_bytes()))


@pytest.mark.parametrize("name", sorted(MALICIOUS_CHAT_TEMPLATES))
def test_chat_template_ssti_gadgets_are_unsafe(tmp_path, name):
    path = gguf_ordinary(tmp_path / "m.gguf", chat_template=MALICIOUS_CHAT_TEMPLATES[name])
    findings = _scan(path.read_bytes())
    assert "gguf.chat-template.gadget" in rules(findings), findings
    assert verdict(findings) == "unsafe"
    assert any("tokenizer.chat_template" in f.location for f in findings)


def test_gguf_chat_template_cycler_globals_ssti_in_named_variant(tmp_path):
    # Servers pick ``tokenizer.chat_template.<name>`` for tool use: it is rendered too.
    path = gguf_ordinary(
        tmp_path / "m.gguf",
        extra={"tokenizer.chat_template.tool_use": MALICIOUS_CHAT_TEMPLATES["gguf_chat_template_cycler_globals_ssti"]},
    )
    findings = _scan(path.read_bytes())
    assert {f.location.split("@")[0] for f in findings if f.rule_id == "gguf.chat-template.gadget"} == {
        "metadata['tokenizer.chat_template.tool_use']"
    }


def test_chat_template_that_is_not_utf8_is_unsafe():
    data = gguf_raw([gguf_kv_string("tokenizer.chat_template", b"{{ messages }}\xff")], [])
    assert "gguf.chat-template.encoding" in rules(_scan(data))


def _u64_array(key: str, count: int) -> bytes:
    return gguf_string(key) + struct.pack("<IIQ", 9, 10, count)


def _nested_arrays(key: str, depth: int) -> bytes:
    value = struct.pack("<IQ", 4, 0)  # innermost: empty uint32 array
    for _ in range(depth):
        value = struct.pack("<IQ", 9, 1) + value
    return gguf_string(key) + struct.pack("<I", 9) + value


F32, Q4_0 = 0, 2


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"GGML" + bytes(20), "gguf.header.magic"),
        (b"GGUF" + struct.pack("<IQQ", 4, 0, 0), "gguf.header.version"),
        (gguf_raw([], [], n_kv=1 << 40), "gguf.header.count-overflow"),
        (gguf_raw([], [], n_tensors=1 << 60), "gguf.header.count-overflow"),
        (gguf_raw([gguf_kv_string("a", "b")], [], n_kv=1000), "gguf.header.count-overflow"),
        (gguf_raw([gguf_kv_string("a", "b")], [], n_kv=3), "gguf.truncated"),
        (gguf_raw([gguf_string("k") + struct.pack("<IQ", 8, 1 << 62)], []), "gguf.metadata.string-overflow"),
        (gguf_raw([struct.pack("<Q", 1 << 62)], [], data=bytes(64)), "gguf.metadata.key-invalid"),
        (gguf_raw([gguf_string(b"\xff\xfe") + struct.pack("<II", 4, 1)], []), "gguf.metadata.key-invalid"),
        (gguf_raw([_u64_array("tokenizer.ggml.scores", 1 << 61)], []), "gguf.metadata.count-overflow"),
        (gguf_raw([_nested_arrays("deep", 20)], []), "gguf.metadata.array-too-deep"),
        (gguf_raw([gguf_string("k") + struct.pack("<II", 13, 0)], []), "gguf.metadata.type-unknown"),
        (gguf_raw([gguf_kv_u32("a", 1), gguf_kv_u32("a", 2)], []), "gguf.metadata.duplicate-key"),
        (gguf_raw([gguf_kv_u32("general.alignment", 0)], []), "gguf.alignment.invalid"),
        (gguf_raw([gguf_kv_u32("general.alignment", 48)], []), "gguf.alignment.invalid"),
        (gguf_raw([gguf_kv_string("general.alignment", "32")], []), "gguf.alignment.invalid"),
        (gguf_raw([], [gguf_tensor_info("t", [1] * 5, F32, 0)], data=bytes(32)), "gguf.tensor.dims-invalid"),
        (gguf_raw([], [gguf_tensor_info("t", [4], 4, 0)], data=bytes(32)), "gguf.tensor.type-unknown"),
        (gguf_raw([], [gguf_tensor_info("t", [4], F32, 8)], data=bytes(64)), "gguf.tensor.misaligned"),
        (gguf_raw([], [gguf_tensor_info("t", [64], F32, 0)], data=bytes(32)), "gguf.tensor.out-of-bounds"),
        (gguf_raw([], [gguf_tensor_info("t", [33], Q4_0, 0)], data=bytes(64)), "gguf.tensor.size-invalid"),
        (gguf_raw([], [gguf_tensor_info("t", [1 << 62, 1 << 62], F32, 0)], data=bytes(32)), "gguf.tensor.size-invalid"),
        (
            gguf_raw([], [gguf_tensor_info("t", [8], F32, 0), gguf_tensor_info("t", [8], F32, 32)], data=bytes(64)),
            "gguf.tensor.duplicate-name",
        ),
        (
            gguf_raw([], [gguf_tensor_info("a", [16], F32, 0), gguf_tensor_info("b", [8], F32, 32)], data=bytes(64)),
            "gguf.tensor.overlap",
        ),
    ],
)
def test_malformed_gguf_is_unsafe(data, rule):
    findings = _scan(data)
    assert rule in rules(findings), findings
    assert verdict(findings) == "unsafe"


def test_gap_between_tensors_is_suspicious():
    data = gguf_raw([], [gguf_tensor_info("a", [8], F32, 0), gguf_tensor_info("b", [8], F32, 96)], data=bytes(128))
    findings = _scan(data)
    assert rules(findings) == {"gguf.tensor.gap"}
    assert verdict(findings) == "suspicious"


def test_gguf_appended_payload_after_last_tensor(tmp_path):
    path = gguf_ordinary(tmp_path / "m.gguf")
    findings = _scan(path.read_bytes() + b"\x80\x04" + bytes(200))
    assert rules(findings) == {"gguf.data.trailing-bytes"}


def test_custom_alignment_is_honoured():
    data = gguf_raw(
        [gguf_kv_u32("general.alignment", 64)],
        [gguf_tensor_info("a", [8], F32, 0), gguf_tensor_info("b", [8], F32, 64)],
        alignment=64,
        data=bytes(96),
    )
    assert _scan(data) == []


def test_vocab_only_gguf_without_tensors_is_safe(tmp_path):
    from gguf import GGUFWriter

    path = tmp_path / "vocab.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_token_list(["a", "b", "c"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert _scan(path.read_bytes()) == []


def test_fuzzed_gguf_never_raises_and_cut_metadata_is_never_safe(tmp_path):
    data = gguf_ordinary(tmp_path / "m.gguf", chat_template=ORDINARY_CHAT_TEMPLATES["chatml_qwen"]).read_bytes()
    from gguf import GGUFReader

    reader = GGUFReader(str(tmp_path / "m.gguf"))
    # GGUFReader's data_offset is absolute; bytes after the last tensor are only padding.
    end_of_data = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    for label, mutated in mutations(data, seed=2, count=400):
        findings = _scan(mutated)
        if label.startswith("truncate") and len(mutated) < end_of_data:
            assert verdict(findings) == "unsafe", label
