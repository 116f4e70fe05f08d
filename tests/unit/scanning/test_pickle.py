"""The pickle interpreter and allow-list, on samples reproducing published bypasses."""

from __future__ import annotations

import io
import os
import pickle

import pytest

from registry.scanning import Severity, Verdict, scan_stream
from registry.scanning.pickle_scan import classify_global, probe_pickle, scan_pickle_bytes, scan_pickle_file
from tests.support import scan_samples as S

PICKLE_FAMILY = [
    "reduce_os_getcwd",
    "dotted_global_posixpath_os_system",
    "dotted_global_allowed_module",
    "builtins_getattr_walk",
    "pip_main",
    "pkgutil_resolve_name",
    "cprofile_run",
    "uuid_get_command_stdout",
    "multiprocessing_spawnv_passfds",
    "submodule_of_denied_package",
    "subprocess_popen",
    "stack_global_via_memo",
    "stack_global_via_memoize",
    "nested_pickle_loads",
    "popped_call",
    "popped_call_unknown_global",
    "float_opcode_before_payload",
    "unknown_opcode_after_payload",
    "broken_stream_after_payload",
    "ext_opcode_copyreg",
    "inst_opcode_protocol0",
    "obj_opcode_protocol1",
    "newobj_ex",
    "build_on_global_monkeypatch",
    "unknown_class_pickle",
    "protocol0_payload_named_txt",
    "pickle_renamed_bin",
]


def _verdict(findings: list) -> Verdict:
    return Verdict.worst([f.severity.verdict() for f in findings])


@pytest.mark.parametrize("sample", PICKLE_FAMILY)
def test_bypass_sample_is_flagged(sample: str) -> None:
    name, data, want = S.MALICIOUS[sample]()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert scan.format == "pickle"
    assert scan.verdict.value == want, scan.as_dict()
    # Every non-info finding says where it is.
    assert all("offset" in f.location for f in scan.findings if f.severity is not Severity.INFO)


@pytest.mark.parametrize("protocol", range(6))
def test_plain_data_is_safe_in_every_protocol(protocol: int) -> None:
    _, data = S.ORDINARY[f"plain_pickle_protocol{protocol}"]()
    assert scan_pickle_bytes(data) == []


def test_reduce_payload_is_found_in_every_protocol() -> None:
    for protocol in range(6):
        findings = scan_pickle_bytes(S.reduce_pickle(protocol))
        assert _verdict(findings) is Verdict.UNSAFE, protocol
        assert any("getcwd" in f.location for f in findings)


@pytest.mark.parametrize(
    ("module", "name", "severity"),
    [
        ("torch._utils", "_rebuild_tensor_v2", None),
        ("collections", "OrderedDict", None),
        ("__builtin__", "set", None),  # Python 2 name, mapped as the unpickler maps it
        ("__builtin__", "eval", Severity.UNSAFE),
        ("posixpath", "os.system", Severity.UNSAFE),
        ("collections", "OrderedDict.fromkeys", Severity.UNSAFE),
        ("torch", "load", Severity.UNSAFE),
        ("torch.serialization", "load", Severity.UNSAFE),
        ("numpy.testing._private.utils", "runstring", Severity.UNSAFE),
        ("os.path", "join", Severity.UNSAFE),
        ("nt", "system", Severity.UNSAFE),
        ("operator", "attrgetter", Severity.UNSAFE),
        ("functools", "partial", Severity.UNSAFE),
        ("torch._utils", "__builtins__", Severity.UNSAFE),
        ("torch", "_utils._rebuild_tensor_v2", Severity.UNSAFE),  # not the exact pair
        ("collections ", "OrderedDict", Severity.UNSAFE),  # not an identifier
        ("sklearn.tree", "DecisionTreeClassifier", Severity.SUSPICIOUS),
        ("torchx", "FloatStorage", Severity.SUSPICIOUS),  # no prefix matching
    ],
)
def test_classify_global(module: str, name: str, severity: Severity | None) -> None:
    assert classify_global(module, name).severity is severity


def test_stack_global_resolved_through_memo_names_the_global() -> None:
    findings = scan_pickle_bytes(S.stack_global_via_memo())
    assert any(f.rule_id == "pickle.global.dangerous" and "os.getcwd" in f.location and "STACK_GLOBAL" in f.location
               for f in findings)


def test_stack_global_with_computed_operands_is_unsafe() -> None:
    # The module name comes out of a call: the scanner cannot know it, so it fails closed.
    data = b"\x80\x04" + S.g0("mylib", "name") + b")R" + S.ustr("x") + b"\x93)R."
    findings = scan_pickle_bytes(data)
    assert any(f.rule_id == "pickle.global.unresolved" and f.severity is Severity.UNSAFE for f in findings)


def test_nested_pickle_finding_is_located_inside_the_outer_call() -> None:
    findings = scan_pickle_bytes(S.nested_pickle_loads())
    inner = [f for f in findings if "nested pickle" in f.location and "getcwd" in f.location]
    assert inner and inner[0].severity is Severity.UNSAFE


def test_pickle_bytes_handed_to_an_unknown_callable_are_scanned() -> None:
    inner = S.reduce_pickle(2)
    data = b"\x80\x02" + S.g0("mylib", "decode") + b"C" + bytes([len(inner)]) + inner + b"\x85R."
    findings = scan_pickle_bytes(data)
    assert _verdict(findings) is Verdict.UNSAFE
    assert any("nested pickle" in f.location and "getcwd" in f.location for f in findings)


def test_popped_allowed_call_is_info_only() -> None:
    data = b"\x80\x02" + S.g0("collections", "OrderedDict") + b")R0N."
    findings = scan_pickle_bytes(data)
    assert [f.rule_id for f in findings] == ["pickle.call.result-discarded"]
    assert findings[0].severity is Severity.INFO


def test_second_pickle_in_a_row_is_scanned() -> None:
    data = pickle.dumps({"a": 1}, protocol=2) + S.reduce_pickle(2)
    result = scan_pickle_file(io.BytesIO(data), len(data))
    assert result.streams == 2
    assert _verdict(result.findings) is Verdict.UNSAFE
    assert any(f.location.startswith("pickle #1 ") for f in result.findings)


def test_trailing_garbage_after_plain_pickle_is_suspicious_and_after_work_unsafe() -> None:
    plain = pickle.dumps([1, 2], protocol=2) + b"\x00\x01garbage"
    assert [f.rule_id for f in scan_pickle_bytes(plain)] == ["pickle.stream.trailing-data"]
    assert _verdict(scan_pickle_bytes(plain)) is Verdict.SUSPICIOUS
    worked = pickle.dumps(S._Reduce(len, "ab"), protocol=2) + b"\x00\x01garbage"
    assert _verdict(scan_pickle_bytes(worked)) is Verdict.UNSAFE


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x02]q\x00(K\x01K\x02e",  # no STOP
        b"\x80\x02\xff.",  # unknown opcode
        b"\x80\x02h\x05.",  # memo key never stored
        b"\x80\x02a.",  # stack underflow
        b"\x80\x09N.",  # protocol 9
    ],
)
def test_malformed_streams_fail_closed(data: bytes) -> None:
    assert _verdict(scan_pickle_bytes(data)) is Verdict.UNSAFE


def test_probe_recognizes_protocol0_payload_but_not_text() -> None:
    assert probe_pickle(S.protocol0_payload_text())
    assert probe_pickle(S.float_opcode_before_payload())
    assert not probe_pickle(b"cat\ndog\nbird\n")
    assert not probe_pickle(b"# README\nsome text (with parens)\n")
    assert not probe_pickle(b'{"a": 1}')
    assert not probe_pickle(b"")


def test_random_binaries_are_not_taken_for_pickles() -> None:
    import random

    rng = random.Random(1234)
    for _ in range(300):
        head = rng.randbytes(256)
        scan = scan_stream("blob", io.BytesIO(head), len(head))
        assert scan.verdict is Verdict.SAFE, (head[:16], scan.as_dict())


def test_torch_files_are_safe_and_payloads_in_them_are_found() -> None:
    for key in ("torch_state_dict_zip", "torch_module_state_dict", "torch_legacy"):
        name, data = S.ORDINARY[key]()
        scan = scan_stream(name, io.BytesIO(data), len(data))
        assert scan.verdict is Verdict.SAFE, scan.as_dict()
    name, data, _ = S.MALICIOUS["legacy_torch_payload_in_later_pickle"]()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert scan.format == "pytorch-legacy" and scan.verdict is Verdict.UNSAFE
    assert any(f.location.startswith("pickle #2 ") for f in scan.findings)
    name, data, _ = S.MALICIOUS["torch_zip_payload_in_data_pkl"]()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert scan.format == "pytorch-zip" and scan.verdict is Verdict.UNSAFE
    assert any(f.location.startswith("archive/data.pkl: ") for f in scan.findings)


def test_numpy_and_torch_values_pickled_directly_are_safe() -> None:
    import numpy as np
    import torch

    for protocol in (2, 4, 5):
        data = pickle.dumps([np.arange(3, dtype=np.float16), np.float32(1.5), np.dtype("int8"), torch.Size([2, 3])],
                            protocol=protocol)
        assert scan_pickle_bytes(data) == [], protocol


def test_getcwd_stand_in_is_what_the_sample_calls() -> None:
    # Guard against a sample silently changing to a harmless global.
    assert b"getcwd" in S.reduce_pickle() and os.getcwd.__name__ == "getcwd"


def test_legacy_torch_storage_section_must_end_at_end_of_file() -> None:
    data = S.torch_legacy() + S.reduce_pickle(2)
    scan = scan_stream("legacy.bin", io.BytesIO(data), len(data))
    assert scan.format == "pytorch-legacy"
    assert [f.rule_id for f in scan.findings] == ["pytorch.legacy.layout"]
    assert scan.verdict is Verdict.SUSPICIOUS


def _call_pickle(module: str, name: str, *args: object, protocol: int = 4) -> bytes:
    """``module.name(*args)`` as a pickle: STACK_GLOBAL, a tuple of the arguments, REDUCE."""
    body = pickle.dumps(args, protocol=protocol)[2:-1]  # the tuple's opcodes, without PROTO and STOP
    if body.startswith(b"\x95"):  # a FRAME opcode and its length
        body = body[9:]
    return b"\x80\x04" + S.ustr(module) + S.ustr(name) + b"\x93" + body + b"R."


@pytest.mark.parametrize(
    ("name", "args"),
    [("len", ([1, 2],)), ("min", ([3, 1],)), ("max", (1, 2)), ("abs", (-1,)), ("range", (3,)), ("slice", (1, 2)),
     ("complex", (1, 2)), ("set", ([1],)), ("frozenset", ([1],)), ("bytearray", (b"x",)), ("dict", ()), ("list", ()),
     ("tuple", ()), ("int", ("7",)), ("float", ("1.5",)), ("str", (1,)), ("bool", (1,)), ("bytes", (b"x",)),
     ("object", ()), ("sum", ([1, 2],)), ("round", (1.5,)), ("sorted", ([2, 1],)), ("zip", ([1], [2]))],
)
def test_pure_builtins_do_not_make_a_pickle_unsafe(name: str, args: tuple) -> None:
    # Issue 7: a builtin that only computes over values the pickle built reaches no code.
    assert scan_pickle_bytes(_call_pickle("builtins", name, *args)) == []
    protocol_2 = _call_pickle("__builtin__", name, *args, protocol=2).replace(b"\x80\x04", b"\x80\x02", 1)
    assert scan_pickle_bytes(protocol_2) == []


@pytest.mark.parametrize(
    "name",
    ["getattr", "eval", "exec", "__import__", "open", "compile", "globals", "vars", "setattr", "delattr", "breakpoint",
     "input", "help", "memoryview", "iter", "map", "filter", "type", "print", "locals", "super", "exit"],
)
def test_builtins_that_reach_code_attributes_files_or_imports_stay_unsafe(name: str) -> None:
    findings = scan_pickle_bytes(_call_pickle("builtins", name, "x"))
    assert any(f.severity is Severity.UNSAFE for f in findings), findings


def test_future_features_are_harmless_imports() -> None:
    import __future__

    for feature in __future__.all_feature_names:
        for protocol in range(6):
            assert scan_pickle_bytes(pickle.dumps(getattr(__future__, feature), protocol=protocol)) == [], feature
    # An attribute walk from __future__ is not a feature flag.
    walk = b"\x80\x04" + S.ustr("__future__") + S.ustr("_ssl.RAND_bytes") + b"\x93."
    assert any(f.severity is Severity.UNSAFE for f in scan_pickle_bytes(walk))
