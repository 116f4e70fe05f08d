"""Red team of the pickle family: bypasses and false positives found, each pinned by a sample.

Samples are built by :mod:`tests.support.scan_samples` and only ever scanned, never loaded.
"""

from __future__ import annotations

import io
import time

import pytest

from registry.scanning import ScanLimits, Severity, Verdict, scan_stream
from registry.scanning.pickle_scan import SCANNED_LOADERS, classify_global, probe_pickle, scan_pickle_bytes
from tests.support import scan_samples as S


def _scan(name: str, data: bytes, **kw):  # type: ignore[no-untyped-def]
    return scan_stream(name, io.BytesIO(data), len(data), **kw)


def _rules(scan) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.rule_id for f in scan.findings}


@pytest.mark.parametrize("sample", sorted(S.REDTEAM))
def test_redteam_sample_is_flagged(sample: str) -> None:
    name, data, least = S.REDTEAM[sample]()
    scan = _scan(name, data)
    assert scan.verdict.rank >= Verdict(least).rank, scan.as_dict()
    assert all(f.location for f in scan.findings if f.severity is not Severity.INFO)


@pytest.mark.parametrize("sample", sorted(S.REDTEAM_ORDINARY))
def test_ordinary_file_is_safe(sample: str) -> None:
    name, data = S.REDTEAM_ORDINARY[sample]()
    scan = _scan(name, data)
    assert scan.verdict is Verdict.SAFE, scan.as_dict()


def test_stop_with_leftovers_is_a_stop_and_the_next_pickle_is_scanned() -> None:
    scan = _scan("m.pkl", S.stop_with_leftovers_then_payload())
    calls = [f for f in scan.findings if f.rule_id == "pickle.call.not-allowed"]
    assert calls and all("pickle #1" in f.location and "getcwd" in f.location for f in calls)
    assert "pickle.stream.unbalanced" in _rules(scan)
    assert "pickle.parse.error" not in _rules(scan)


def test_leftover_call_below_stop_is_a_side_effect_call() -> None:
    scan = _scan("m.pkl", S.stop_with_leftover_side_effect_call())
    assert {"pickle.stream.unbalanced", "pickle.call.result-discarded"} <= _rules(scan)


def test_import_only_global_makes_a_stream_a_pickle() -> None:
    assert probe_pickle(S.import_side_effect_then_garbage())
    assert probe_pickle(S.import_side_effect_protocol0_text())
    # Text that merely starts with "c" names no dangerous module: still text.
    assert not probe_pickle(b"cat\ndog\nbird\n")
    assert not probe_pickle(b"collections\nof\nwords\n")


def test_allowed_function_calling_its_argument_is_judged_as_that_call() -> None:
    scan = _scan("m.pkl", S.rebuild_from_type_v2_calls_global())
    assert any(f.rule_id == "pickle.call.not-allowed" and "getcwd" in f.location for f in scan.findings)
    for data in (S.rebuild_from_type_v2_computed_callable(), S.reconstructor_computed_base()):
        assert "pickle.call.computed-callable" in _rules(_scan("m.pkl", data))


@pytest.mark.parametrize(
    "sample", ["codecs_encode_payload_to_unknown_loader", "bytes_of_int_list_payload_to_unknown_loader"]
)
def test_payload_built_by_allowed_conversion_is_scanned(sample: str) -> None:
    name, data, _ = S.REDTEAM[sample]()
    scan = _scan(name, data)
    nested = [f for f in scan.findings if "nested" in f.location and f.severity is Severity.UNSAFE]
    assert any("getcwd" in f.location for f in nested), scan.as_dict()


def test_torch_load_from_bytes_scans_the_nested_torch_file() -> None:
    scan = _scan("m.pkl", S.torch_load_from_bytes_nested_zip())
    assert any(
        "data.pkl" in f.location and "getcwd" in f.location and f.severity is Severity.UNSAFE for f in scan.findings
    ), scan.as_dict()


@pytest.mark.parametrize(("sample", "rule"), [
    ("next_buffer_out_of_band", "pickle.buffer.out-of-band"),
    ("frame_runs_past_stop", "pickle.frame.mismatch"),
    ("tar_payload_after_bad_header", "tar.trailing-data"),
    ("tar_payload_after_end_marker", "tar.trailing-data"),
    ("bz2_trailing_payload", "container.trailing-data"),
    ("xz_trailing_payload", "container.trailing-data"),
    ("zip_local_zip64_extra_lies", "zip.local.mismatch"),
    ("tar_header_pickle_polyglot", "polyglot.pickle"),
])
def test_rule_names_the_trick(sample: str, rule: str) -> None:
    name, data, _ = S.REDTEAM[sample]()
    assert rule in _rules(_scan(name, data))


@pytest.mark.parametrize("build", [S.mark_stack_bomb, S.list_nesting_bomb])
def test_stack_bombs_fail_closed_and_bounded(build) -> None:  # type: ignore[no-untyped-def]
    data = build()
    start = time.monotonic()
    findings = scan_pickle_bytes(data)
    assert time.monotonic() - start < 20
    assert any(f.rule_id == "pickle.parse.error" and "stack deeper" in f.message for f in findings)


@pytest.mark.parametrize("build", [S.giant_binunicode8_length, S.giant_long4_length])
def test_giant_declared_lengths_fail_closed_without_allocating(build) -> None:  # type: ignore[no-untyped-def]
    findings = scan_pickle_bytes(build())
    assert any(f.severity is Severity.UNSAFE and f.rule_id.startswith("pickle.") for f in findings)


def test_gzip_stream_bomb_stops_at_the_ratio() -> None:
    data = S.gzip_stream_bomb(4)
    scan = _scan("m.gz", data, limits=ScanLimits(ratio_min_bytes=1 << 20, max_ratio=50))
    assert "container.compression-ratio" in _rules(scan)
    assert scan.verdict.rank >= Verdict.SUSPICIOUS.rank


@pytest.mark.parametrize(("module", "name"), S.PUBLISHED_GADGETS)
def test_published_gadget_is_unsafe(module: str, name: str) -> None:
    if (module, name) not in SCANNED_LOADERS:
        # A scanned loader is allowed only on bytes it is given in the pickle (round 3): a string
        # argument, as here, is still unsafe through the call.
        assert classify_global(module, name).severity is Severity.UNSAFE
    scan = _scan("m.pkl", S.denied_gadget(module, name))
    assert scan.verdict is Verdict.UNSAFE


def test_python2_names_are_mapped_only_below_protocol_3() -> None:
    assert classify_global("__builtin__", "xrange").severity is None
    assert classify_global("__builtin__", "xrange", fix_imports=False).severity is not None
    assert _scan("m.pkl", S.py2_name_under_protocol4()).verdict is not Verdict.SAFE


@pytest.mark.parametrize(("module", "name"), [
    ("datetime", "datetime"), ("decimal", "Decimal"), ("collections", "defaultdict"), ("torch", "float8_e4m3fnuz"),
    ("torch._utils", "_rebuild_sparse_tensor"), ("torch.serialization", "_get_layout"),
])
def test_value_constructors_are_allowed_exactly(module: str, name: str) -> None:
    assert classify_global(module, name).severity is None
    # Exact pairs only: the rest of the module stays off the list.
    assert classify_global(module, name + "_x").severity is not None


def test_torch_memory_formats_are_ordinary_but_other_dotted_names_from_torch_utils_are_not():
    import io
    import pickle

    import torch

    from registry.scanning import scan_stream

    for fmt in (torch.channels_last, torch.contiguous_format, torch.channels_last_3d, torch.preserve_format):
        # torch.save (protocol 2) cannot pickle memory formats; protocol 4 writes them as dotted names.
        plain = pickle.dumps({"memory_format": fmt}, protocol=4)
        assert scan_stream("cfg.pkl", io.BytesIO(plain), len(plain)).verdict.value == "safe"
    # The same shape with another attribute walk is still a dotted global.
    module, name = b"torch._utils", b"torch.os.system"
    walk = b"\x80\x04\x8c" + bytes([len(module)]) + module + b"\x8c" + bytes([len(name)]) + name + b"\x93."
    assert scan_stream("x.pkl", io.BytesIO(walk), len(walk)).verdict.value == "unsafe"
