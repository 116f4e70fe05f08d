"""ONNX: external data must stay inside the model directory; custom operator domains are noted."""

from __future__ import annotations

import pytest

from registry.scanning import onnx
from registry.scanning.model import ScanContext
from tests.support.format_samples import CountingReader, mutations, onnx_model, rules, scan_bytes, verdict


def _scan(data: bytes, path: str = "model.onnx", siblings: frozenset[str] = frozenset()) -> list:
    return scan_bytes(onnx.scan, data, path, siblings=siblings)


def test_ordinary_model_with_subgraphs_is_safe():
    assert _scan(onnx_model()) == []


def test_local_function_in_its_own_domain_is_not_a_custom_op():
    assert _scan(onnx_model(local_function_domain="pkg.onnxscript.torch_lib")) == []


def test_sample_is_a_valid_onnx_model():
    import onnx as onnx_lib

    onnx_lib.checker.check_model(onnx_lib.load_model_from_string(onnx_model()))


@pytest.mark.parametrize("where", ["initializer", "subgraph", "sparse", "attribute", "function"])
def test_onnx_external_data_path_traversal(where):
    findings = _scan(onnx_model(external="../../../../etc/passwd", where=where))
    assert "onnx.external-data.escape" in rules(findings)
    assert verdict(findings) == "unsafe"


def test_escape_location_names_the_subgraph_tensor():
    findings = _scan(onnx_model(external="../secrets.bin", where="subgraph"))
    (escape,) = [f for f in findings if f.rule_id == "onnx.external-data.escape"]
    assert escape.location == "graph.node[3](If).attribute[0].graph.initializer[0]['B']"


@pytest.mark.parametrize(
    "location",
    [
        "/etc/shadow",
        "..\\..\\windows\\system32\\config\\sam",
        "C:/Windows/win.ini",
        "weights/../../outside.bin",
        "./../outside.bin",
        "weights\x00.bin",
        "",
    ],
)
def test_onnx_external_data_unclean_locations(location):
    assert "onnx.external-data.escape" in rules(_scan(onnx_model(external=location)))


def test_dot_slash_location_stays_inside_and_is_safe():
    # onnx and onnxruntime resolve ``./w.bin`` next to the model: no escape.
    assert _scan(onnx_model(external="./w.bin"), siblings=frozenset({"model.onnx", "w.bin"})) == []


def test_clean_external_data_present_among_siblings_is_safe():
    siblings = frozenset({"onnx/model.onnx", "onnx/weights/w.bin"})
    assert _scan(onnx_model(external="weights/w.bin"), path="onnx/model.onnx", siblings=siblings) == []


def test_external_data_missing_from_the_version_is_suspicious():
    siblings = frozenset({"model.onnx", "other.bin"})
    findings = _scan(onnx_model(external="w.bin"), siblings=siblings)
    assert rules(findings) == {"onnx.external-data.missing"}
    assert verdict(findings) == "suspicious"


def test_external_data_without_known_siblings_is_not_judged_missing():
    assert _scan(onnx_model(external="w.bin")) == []


def _with_external_entries(entries: list[tuple[str, str]], *, external_flag: bool = True) -> bytes:
    import onnx as onnx_lib
    from onnx import TensorProto

    model = onnx_lib.load_model_from_string(onnx_model())
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    if external_flag:
        tensor.data_location = TensorProto.EXTERNAL
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("entries", "rule"),
    [
        ([("offset", "0")], "onnx.external-data.malformed"),
        ([("location", "w.bin"), ("location", "../x")], "onnx.external-data.malformed"),
        ([("location", "w.bin"), ("offset", "-8")], "onnx.external-data.malformed"),
        ([("location", "w.bin"), ("length", "0x10")], "onnx.external-data.malformed"),
    ],
)
def test_malformed_external_data_entries_are_unsafe(entries, rule):
    findings = _scan(_with_external_entries(entries))
    assert rule in rules(findings)
    assert verdict(findings) == "unsafe"


def test_unknown_external_data_key_is_suspicious():
    findings = _scan(_with_external_entries([("location", "w.bin"), ("basepath", "/tmp")]))
    assert rules(findings) == {"onnx.external-data.unknown-key"}


def test_external_entries_without_external_flag_are_still_checked():
    findings = _scan(_with_external_entries([("location", "/etc/passwd")], external_flag=False))
    assert {"onnx.external-data.escape", "onnx.external-data.inconsistent"} <= rules(findings)


def test_custom_operator_domain_is_suspicious():
    findings = _scan(onnx_model(custom_domain="ai.onnx.contrib"))
    assert rules(findings) == set()  # the ai.onnx.* family is ONNX's own
    findings = _scan(onnx_model(custom_domain="com.evil.ops"))
    assert rules(findings) == {"onnx.custom-op-domain"}
    assert verdict(findings) == "suspicious"
    assert "Evil" in findings[0].location


def test_large_embedded_weights_are_skipped_not_read():
    import numpy as np
    import onnx as onnx_lib
    from onnx import numpy_helper

    model = onnx_lib.load_model_from_string(onnx_model())
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(4 << 20, dtype=np.float32), "big"))
    data = model.SerializeToString()
    reader = CountingReader(data)
    assert onnx.scan(reader, len(data), ScanContext("model.onnx")) == []
    assert reader.bytes_read < len(data) // 20


@pytest.mark.parametrize(
    ("data", "rule", "expected"),
    [
        (b"", "onnx.model.invalid", "error"),
        (b"\x08\x07", "onnx.model.invalid", "error"),
        (b"\x08\x07\x3a\xff\xff\xff\xff\x0f", "onnx.protobuf.malformed", "unsafe"),
        (b"\x08\x07\x0b\x00", "onnx.protobuf.malformed", "unsafe"),
        (b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "onnx.protobuf.malformed", "unsafe"),
        (b"\x00\x01", "onnx.protobuf.malformed", "unsafe"),
        (b"PK\x03\x04 not onnx at all", "onnx.protobuf.malformed", "unsafe"),
    ],
)
def test_unparseable_onnx(data, rule, expected):
    findings = _scan(data)
    assert rule in rules(findings)
    assert verdict(findings) == expected


def test_fuzzed_model_never_raises_and_truncation_is_never_safe():
    data = onnx_model(external="w.bin", local_function_domain="local.fn")
    for label, mutated in mutations(data, seed=3, count=400):
        findings = _scan(mutated)
        if label.startswith("truncate"):
            assert verdict(findings) != "safe", label
    for cut in range(len(data)):
        assert verdict(_scan(data[:cut])) != "safe", cut
