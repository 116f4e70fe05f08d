"""Sample builders for the scanning tests and the scan benchmark.

Each malicious sample reproduces one published scanner-bypass family (see docs/scanning.md) and is
named after the trick. Payloads are harmless stand-ins (``os.getcwd`` and friends) and are only
ever *built* here, never loaded: the tests read bytes, they do not unpickle them.

``MALICIOUS`` maps a sample name to ``(file name, bytes, least verdict expected)``; ``ORDINARY``
maps a sample name to ``(file name, bytes)`` of files that must scan safe.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import io
import lzma
import os
import pickle
import pickletools
import random
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable

SAFE, SUSPICIOUS, UNSAFE = "safe", "suspicious", "unsafe"


# --- opcode assembly ------------------------------------------------------------------------------


def g0(module: str, name: str) -> bytes:
    """``GLOBAL`` opcode (protocol 0 text form)."""
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def ustr(s: str) -> bytes:
    """``SHORT_BINUNICODE`` opcode."""
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


class _Reduce:
    """An object whose pickle calls ``func(*args)`` at load time (used only to build bytes)."""

    def __init__(self, func: Callable[..., object], *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


def reduce_pickle(protocol: int = 4) -> bytes:
    """The classic: a ``__reduce__`` payload calling ``os.getcwd`` (stand-in for ``os.system``)."""
    return pickle.dumps(_Reduce(os.getcwd), protocol=protocol)


# --- pickle tricks --------------------------------------------------------------------------------


def dotted_global_posixpath_os_system() -> bytes:
    # module "posixpath", name "os.getcwd": resolves posixpath.os.getcwd through attribute walk.
    return b"\x80\x04" + g0("posixpath", "os.getcwd") + b")R."


def dotted_global_allowed_module() -> bytes:
    # An allowed-looking module with a dotted name walking to os: collections.os doesn't exist,
    # but torch._utils imports many things; the pair is not allow-listed whatever it resolves to.
    return b"\x80\x04" + g0("torch._utils", "_rebuild_tensor_v2.__globals__") + b"."


def builtins_getattr_walk() -> bytes:
    # getattr(__import__("os"), "getcwd")()
    return (
        b"\x80\x02" + g0("builtins", "getattr") + b"(" + g0("builtins", "__import__") + ustr("os") + b"\x85R"
        + ustr("getcwd") + b"tR)R."
    )


def pip_main() -> bytes:
    return b"\x80\x02" + g0("pip", "main") + b"]" + ustr("--version") + b"a\x85R."


def pkgutil_resolve_name() -> bytes:
    return b"\x80\x02" + g0("pkgutil", "resolve_name") + ustr("os:getcwd") + b"\x85R)R."


def cprofile_run() -> bytes:
    return b"\x80\x02" + g0("cProfile", "run") + ustr("None") + b"\x85R."


def uuid_get_command_stdout() -> bytes:
    return b"\x80\x02" + g0("uuid", "_get_command_stdout") + ustr("true") + b"\x85R."


def multiprocessing_spawnv_passfds() -> bytes:
    return b"\x80\x02" + g0("multiprocessing.util", "spawnv_passfds") + ustr("/bin/true") + b"]" + b")\x87R."


def submodule_of_denied_package() -> bytes:
    return b"\x80\x02" + g0("os.path", "join") + ustr("a") + ustr("b") + b"\x86R."


def subprocess_popen() -> bytes:
    return b"\x80\x02" + g0("subprocess", "Popen") + b"]" + ustr("true") + b"a\x85R."


def stack_global_via_memo() -> bytes:
    # The module and name strings are memoized first, then fetched with BINGET for STACK_GLOBAL.
    return (
        b"\x80\x04" + ustr("os") + b"q\x00" + b"0" + ustr("getcwd") + b"q\x01" + b"0"
        + b"h\x00h\x01\x93)R."
    )


def stack_global_via_memoize() -> bytes:
    # Same with MEMOIZE and LONG_BINGET, the strings first stored in a list.
    return (
        b"\x80\x04]\x94" + ustr("os") + b"\x94" + ustr("getcwd") + b"\x94" + b"\x86a0"
        + b"j\x01\x00\x00\x00j\x02\x00\x00\x00\x93)R."
    )


def nested_pickle_loads() -> bytes:
    inner = reduce_pickle(2)
    return b"\x80\x02" + g0("pickle", "loads") + b"C" + bytes([len(inner)]) + inner + b"\x85R."


def popped_call() -> bytes:
    # The call's result is thrown away (POP): only its side effect mattered.
    return b"\x80\x02" + g0("os", "getcwd") + b")R0N."


def popped_call_unknown_global() -> bytes:
    return b"\x80\x02" + g0("mylib.hooks", "on_load") + b")R0N."


def float_opcode_before_payload() -> bytes:
    # FLOAT (protocol 0) first: an analyzer that gives up on it never sees the payload.
    return b"F1.5\n0" + g0("os", "getcwd") + b")R."


def unknown_opcode_after_payload() -> bytes:
    return b"\x80\x02" + g0("os", "getcwd") + b")R\xff."


def broken_stream_after_payload() -> bytes:
    # The payload runs, then the stream ends without STOP: the loader raises too late.
    return b"\x80\x02" + g0("os", "getcwd") + b")R" + b"X\xff\x00\x00\x00trunc"


def ext_opcode_copyreg() -> bytes:
    return b"\x80\x02\x82\x01)R."


def inst_opcode_protocol0() -> bytes:
    return b"(" + b"i" + b"os\ngetcwd\n" + b"."


def obj_opcode_protocol1() -> bytes:
    return b"(" + g0("os", "getcwd") + b"o."


def newobj_ex() -> bytes:
    return b"\x80\x04" + ustr("os") + ustr("getcwd") + b"\x93)}\x92."


def build_on_global_monkeypatch() -> bytes:
    # BUILD with a slot-state dict on a class sets attributes on the class itself.
    return b"\x80\x02" + g0("collections", "OrderedDict") + b"N}" + ustr("__eq__") + g0("os", "getcwd") + b"s\x86b."


def protocol0_payload_text() -> bytes:
    return b"cos\ngetcwd\n(tR."


def unknown_class_pickle() -> bytes:
    return b"\x80\x02" + g0("mylib.models", "Classifier") + b")R}b."


# --- PyTorch ---------------------------------------------------------------------------------------


def torch_state_dict(mb: float = 0.0) -> dict[str, object]:
    import torch

    n = max(4, int(mb * (1 << 20) / 4))
    return collections.OrderedDict(
        weight=torch.randn(n),
        bias=torch.nn.Parameter(torch.zeros(3)),
        half=torch.ones(2, 2, dtype=torch.float16),
        bf16=torch.ones(4, dtype=torch.bfloat16),
        int8=torch.arange(5, dtype=torch.int8),
        nested={"layer": {"scale": torch.tensor(2.0, dtype=torch.float64), "steps": torch.tensor([1, 2])},
                "names": ["a", "b"]},
    )


def torch_zip(obj: object | None = None) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(torch_state_dict() if obj is None else obj, buf)
    return buf.getvalue()


def torch_module_state_dict() -> bytes:
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Conv1d(3, 2, 1))
    return torch_zip(m.state_dict())


def torch_legacy() -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(torch_state_dict(), buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def _pickle_spans(data: bytes, count: int) -> list[tuple[int, int]]:
    f = io.BytesIO(data)
    spans = []
    for _ in range(count):
        start = f.tell()
        for op, _, _ in pickletools.genops(f):
            if op.name == "STOP":
                break
        spans.append((start, f.tell()))
    return spans


def legacy_torch_payload_in_later_pickle() -> bytes:
    """Legacy torch file whose third pickle (system info) is replaced by a payload."""
    data = torch_legacy()
    spans = _pickle_spans(data, 5)
    s, e = spans[2]
    return data[:s] + reduce_pickle(2) + data[e:]


def rezip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return buf.getvalue()


def _zip_headers(data: bytes, name: str) -> tuple[int, int]:
    """Offsets of the local header and the central directory record of member ``name``."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    raw = name.encode()
    central = next(i for i in range(len(data))
                   if data.startswith(b"PK\x01\x02", i) and data[i + 46 : i + 46 + len(raw)] == raw)
    return info.header_offset, central


def set_zip_flag(data: bytes, name: str, bit: int) -> bytes:
    """Set a general purpose flag bit on one member, in both its headers."""
    local, central = _zip_headers(data, name)
    body = bytearray(data)
    body[local + 6 : local + 8] = (int.from_bytes(body[local + 6 : local + 8], "little") | bit).to_bytes(2, "little")
    flags = int.from_bytes(body[central + 8 : central + 10], "little") | bit
    body[central + 8 : central + 10] = flags.to_bytes(2, "little")
    return bytes(body)


def set_zip_crc(data: bytes, name: str, crc: int) -> bytes:
    """Record another CRC-32 for one member, in both its headers."""
    local, central = _zip_headers(data, name)
    body = bytearray(data)
    body[local + 14 : local + 18] = crc.to_bytes(4, "little")
    body[central + 16 : central + 20] = crc.to_bytes(4, "little")
    return bytes(body)


def npy_object_pickle(pickled: bytes, shape: tuple[int, ...] = (1,)) -> bytes:
    """An ``.npy`` of object dtype whose data is the given pickle (what np.save writes, by hand)."""
    header = f"{{'descr': '|O', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + pickled


def torch_zip_members() -> dict[str, bytes]:
    """The members of an ordinary ``torch.save`` zip, by name."""
    z = zipfile.ZipFile(io.BytesIO(torch_zip()))
    return {n: z.read(n) for n in z.namelist()}


def torch_zip_with_member(suffix: str, body: bytes) -> bytes:
    """An ordinary torch zip whose member ending in ``suffix`` is replaced by ``body``."""
    members = torch_zip_members()
    members[next(n for n in members if n.endswith(suffix))] = body
    return rezip(members)


def torch_zip_payload_in_data_pkl() -> bytes:
    return torch_zip_with_member("data.pkl", reduce_pickle(2))


# --- containers ------------------------------------------------------------------------------------


def gzip_pickle_joblib() -> bytes:
    return gzip.compress(reduce_pickle(), mtime=0)


def bz2_pickle() -> bytes:
    return bz2.compress(reduce_pickle())


def tar_bytes(members: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:  # type: ignore[call-overload]
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            info.mtime = 0
            t.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def tar_with_pickle_pt() -> bytes:
    return tar_bytes({"model.pkl": reduce_pickle(), "README.md": b"# model\n"})


def sevenz_signature_pt() -> bytes:
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(120)


def zip_in_zip() -> bytes:
    inner = rezip({"weights.pkl": reduce_pickle()}, zipfile.ZIP_DEFLATED)
    return rezip({"inner.zip": inner, "README.md": b"hello\n"})


def _benign_zip() -> tuple[bytes, list[zipfile.ZipInfo]]:
    data = rezip({"a.pkl": pickle.dumps({"x": 1}), "b.txt": b"hello world\n"})
    return data, zipfile.ZipFile(io.BytesIO(data)).infolist()


def zip_bad_crc() -> bytes:
    data, infos = _benign_zip()
    i = infos[0]
    body = bytearray(data)
    start = i.header_offset + 30 + len(i.filename.encode())
    body[start + 3] ^= 0xFF
    return bytes(body)


def zip_local_central_name_mismatch() -> bytes:
    data, infos = _benign_zip()
    body = bytearray(data)
    off = infos[0].header_offset + 30
    body[off : off + 5] = b"c.pkl"
    return bytes(body)


def zip_encryption_flag() -> bytes:
    data, infos = _benign_zip()
    body = bytearray(data)
    body[infos[1].header_offset + 6] |= 0x01
    central = [i for i in range(len(data)) if data.startswith(b"PK\x01\x02", i)]
    body[central[1] + 8] |= 0x01
    return bytes(body)


def zip_overlapping_entries() -> bytes:
    # Two central directory entries share one local header (same name, same data).
    data = rezip({"a.pkl": pickle.dumps({"x": 1})})
    cd = data.index(b"PK\x01\x02")
    eocd = data.index(b"PK\x05\x06")
    entry = data[cd:eocd]
    dup = entry
    body = data[:cd] + entry + dup
    n = 2
    eocd_rec = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(entry) * 2, cd, 0)
    return body + eocd_rec


def zip_prefix_polyglot() -> bytes:
    # A pickle payload with a zip appended: zipfile opens it, and the bytes before are a pickle.
    data = rezip({"a.txt": b"hi\n"})
    payload = reduce_pickle(2)
    body = bytearray(payload + data)
    z = zipfile.ZipFile(io.BytesIO(bytes(body)))
    z.close()
    return bytes(body)


def zip_bomb(megabytes: int = 16) -> bytes:
    return rezip({"weights.bin": bytes(megabytes << 20)}, zipfile.ZIP_DEFLATED)


# --- numpy ---------------------------------------------------------------------------------------


def numpy_object_array_payload() -> bytes:
    import numpy as np

    arr = np.empty(2, dtype=object)
    arr[0] = _Reduce(os.getcwd)
    arr[1] = 1
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def numpy_object_array_plain() -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.array(["a", 1, None], dtype=object), allow_pickle=True)
    return buf.getvalue()


def npy(arr: object) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def npz(compressed: bool) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.arange(5, dtype=np.int64),
              "mask": np.ones(3, bool)}
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


# --- the catalogue -----------------------------------------------------------------------------------

MALICIOUS: dict[str, Callable[[], tuple[str, bytes, str]]] = {
    "reduce_os_getcwd": lambda: ("model.pkl", reduce_pickle(), UNSAFE),
    "dotted_global_posixpath_os_system": lambda: ("model.pkl", dotted_global_posixpath_os_system(), UNSAFE),
    "dotted_global_allowed_module": lambda: ("model.pkl", dotted_global_allowed_module(), UNSAFE),
    "builtins_getattr_walk": lambda: ("model.pkl", builtins_getattr_walk(), UNSAFE),
    "pip_main": lambda: ("model.pkl", pip_main(), UNSAFE),
    "pkgutil_resolve_name": lambda: ("model.pkl", pkgutil_resolve_name(), UNSAFE),
    "cprofile_run": lambda: ("model.pkl", cprofile_run(), UNSAFE),
    "uuid_get_command_stdout": lambda: ("model.pkl", uuid_get_command_stdout(), UNSAFE),
    "multiprocessing_spawnv_passfds": lambda: ("model.pkl", multiprocessing_spawnv_passfds(), UNSAFE),
    "submodule_of_denied_package": lambda: ("model.pkl", submodule_of_denied_package(), UNSAFE),
    "subprocess_popen": lambda: ("model.pkl", subprocess_popen(), UNSAFE),
    "stack_global_via_memo": lambda: ("model.pkl", stack_global_via_memo(), UNSAFE),
    "stack_global_via_memoize": lambda: ("model.pkl", stack_global_via_memoize(), UNSAFE),
    "nested_pickle_loads": lambda: ("model.pkl", nested_pickle_loads(), UNSAFE),
    "popped_call": lambda: ("model.pkl", popped_call(), UNSAFE),
    "popped_call_unknown_global": lambda: ("model.pkl", popped_call_unknown_global(), SUSPICIOUS),
    "float_opcode_before_payload": lambda: ("model.pkl", float_opcode_before_payload(), UNSAFE),
    "unknown_opcode_after_payload": lambda: ("model.pkl", unknown_opcode_after_payload(), UNSAFE),
    "broken_stream_after_payload": lambda: ("model.pkl", broken_stream_after_payload(), UNSAFE),
    "ext_opcode_copyreg": lambda: ("model.pkl", ext_opcode_copyreg(), UNSAFE),
    "inst_opcode_protocol0": lambda: ("model.pkl", inst_opcode_protocol0(), UNSAFE),
    "obj_opcode_protocol1": lambda: ("model.pkl", obj_opcode_protocol1(), UNSAFE),
    "newobj_ex": lambda: ("model.pkl", newobj_ex(), UNSAFE),
    "build_on_global_monkeypatch": lambda: ("model.pkl", build_on_global_monkeypatch(), UNSAFE),
    "protocol0_payload_named_txt": lambda: ("notes.txt", protocol0_payload_text(), UNSAFE),
    "unknown_class_pickle": lambda: ("model.pkl", unknown_class_pickle(), SUSPICIOUS),
    "legacy_torch_payload_in_later_pickle": lambda: ("model.pt", legacy_torch_payload_in_later_pickle(), UNSAFE),
    "torch_zip_payload_in_data_pkl": lambda: ("model.pt", torch_zip_payload_in_data_pkl(), UNSAFE),
    "pickle_renamed_bin": lambda: ("pytorch_model.bin", reduce_pickle(), UNSAFE),
    "gzip_pickle_joblib": lambda: ("model.joblib", gzip_pickle_joblib(), UNSAFE),
    "bz2_pickle": lambda: ("model.pkl.bz2", bz2_pickle(), UNSAFE),
    "tar_with_pickle_pt": lambda: ("model.pt", tar_with_pickle_pt(), UNSAFE),
    "sevenz_signature_pt": lambda: ("model.pt", sevenz_signature_pt(), SUSPICIOUS),
    "zip_in_zip": lambda: ("bundle.zip", zip_in_zip(), UNSAFE),
    "zip_bad_crc": lambda: ("bundle.zip", zip_bad_crc(), UNSAFE),
    "zip_local_central_name_mismatch": lambda: ("bundle.zip", zip_local_central_name_mismatch(), UNSAFE),
    # The flag hides nothing: the member is read as stored and is harmless; the flag is unusual.
    "zip_encryption_flag": lambda: ("bundle.zip", zip_encryption_flag(), SUSPICIOUS),
    "zip_overlapping_entries": lambda: ("bundle.zip", zip_overlapping_entries(), UNSAFE),
    "zip_prefix_polyglot": lambda: ("model.bin", zip_prefix_polyglot(), UNSAFE),
    "numpy_object_array_payload": lambda: ("arr.npy", numpy_object_array_payload(), UNSAFE),
}

ORDINARY: dict[str, Callable[[], tuple[str, bytes]]] = {
    "torch_state_dict_zip": lambda: ("pytorch_model.bin", torch_zip()),
    "torch_module_state_dict": lambda: ("model.pt", torch_module_state_dict()),
    "torch_legacy": lambda: ("legacy.bin", torch_legacy()),
    "npy_float32": lambda: ("a.npy", npy(__import__("numpy").arange(10, dtype="float32"))),
    "npy_structured": lambda: (
        "s.npy",
        npy(__import__("numpy").zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,)), ("c", "U5")])),
    ),
    "npz": lambda: ("arrays.npz", npz(False)),
    "npz_compressed": lambda: ("arrays.npz", npz(True)),
    # An object array's pickle is judged by the allow-list like any pickle: plain data is safe.
    "numpy_object_array_plain": lambda: ("arr.npy", numpy_object_array_plain()),
    **{
        f"plain_pickle_protocol{p}": (
            lambda p=p: (
                f"data{p}.pkl",
                pickle.dumps(
                    {"a": [1, 2.5, "s", b"by", None, True, (1, 2), {3}, frozenset([4]), 1j, 10**30, bytearray(b"z")],
                     "o": collections.OrderedDict(x=1.0)},
                    protocol=p,
                ),
            )
        )
        for p in range(6)
    },
    "tar_gz_of_files": lambda: ("files.tar.gz",
                                gzip.compress(tar_bytes({"a/config.txt": b"x=1\n", "a/b.dat": bytes(range(256))}),
                                              mtime=0)),
    "ordinary_zip": lambda: ("files.zip",
                             rezip({"docs/": b"", "docs/a.txt": b"hello\n" * 100, "b.dat": bytes(range(256))},
                                   zipfile.ZIP_DEFLATED)),
    "text_file": lambda: ("README.md", b"# A model\n\nclassifies cats\nand dogs.\n"),
    "text_starting_with_c": lambda: ("notes.txt", b"cat\ndog\nbird\n"),
    "json_config": lambda: ("generation_config.json", b'{"temperature": 0.7, "top_p": 0.9}'),
    "random_binary_tokenizer_model": lambda: ("tokenizer.model",
                                              b"\x0a\x0b\x0a\x05<unk>" + random.Random(7).randbytes(8192)),
}


# --- red team: pickle semantics the scanner must follow (see tests/unit/scanning/test_redteam_pickle.py)


def bu8(data: bytes) -> bytes:
    """``SHORT_BINBYTES`` / ``BINBYTES`` opcode for ``data``."""
    if len(data) < 256:
        return b"C" + bytes([len(data)]) + data
    return b"B" + struct.pack("<I", len(data)) + data


def import_side_effect_then_garbage() -> bytes:
    # Resolving a global imports its module (antigravity opens a browser); the stream may break
    # on the very next byte, the import already ran. Sniffers that wait for a call miss it.
    return b"\x80\x02" + g0("antigravity", "x") + b"\xff" * 64


def import_side_effect_protocol0_text() -> bytes:
    return g0("antigravity", "x") + b"see the README for details\n"


def stop_with_leftovers_then_payload() -> bytes:
    # CPython's unpickler returns the top of the stack at STOP and ignores what lies below it
    # (here an open MARK): a scanner that calls this a broken stream stops before the next pickle.
    return b"(K\x01K\x02." + reduce_pickle(2)


def stop_with_leftover_side_effect_call() -> bytes:
    return b"\x80\x02" + g0("mylib.hooks", "on_load") + b")R" + b"K\x01."


def rebuild_from_type_v2_calls_global() -> bytes:
    # torch._tensor._rebuild_from_type_v2(func, new_type, args, state) calls func(*args).
    return (
        b"\x80\x02" + g0("torch._tensor", "_rebuild_from_type_v2")
        + b"(" + g0("os", "getcwd") + g0("torch", "Tensor") + b")}tR."
    )


def rebuild_from_type_v2_computed_callable() -> bytes:
    # The called argument is a persistent object, not a global: nothing the scan can judge.
    return (
        b"\x80\x02" + g0("torch._tensor", "_rebuild_from_type_v2")
        + b"(" + ustr("x") + b"Q" + g0("torch", "Tensor") + b")}tR."
    )


def reconstructor_computed_base() -> bytes:
    # copyreg._reconstructor(cls, base, state) calls base.__new__ and base.__init__.
    obj = g0("builtins", "object") + b")R"
    return b"\x80\x02" + g0("copyreg", "_reconstructor") + b"(" + g0("torch", "Tensor") + obj + b"NtR."


def codecs_encode_payload_to_unknown_loader() -> bytes:
    # The nested pickle is built by an allowed conversion (str -> latin-1 bytes), then handed
    # to an unknown function: only evaluating the conversion shows it is a payload.
    inner = reduce_pickle(2).decode("latin-1")
    return (
        b"\x80\x02" + g0("mylib.io", "restore") + g0("_codecs", "encode")
        + b"X" + struct.pack("<I", len(inner.encode())) + inner.encode() + ustr("latin1") + b"\x86R\x85R."
    )


def bytes_of_int_list_payload_to_unknown_loader() -> bytes:
    inner = reduce_pickle(2)
    ints = b"".join(b"K" + bytes([c]) for c in inner)
    return b"\x80\x02" + g0("mylib.io", "restore") + g0("builtins", "bytes") + b"](" + ints + b"e\x85R\x85R."


def torch_load_from_bytes_nested_zip() -> bytes:
    # torch.storage._load_from_bytes(b) is torch.load(io.BytesIO(b)): a whole torch file inside.
    inner = torch_zip_payload_in_data_pkl()
    return b"\x80\x02" + g0("torch.storage", "_load_from_bytes") + bu8(inner) + b"\x85R."


def next_buffer_out_of_band() -> bytes:
    return b"\x80\x05\x97\x98."


def frame_runs_past_stop() -> bytes:
    body = b"K\x01."
    return b"\x80\x04\x95" + struct.pack("<Q", len(body) + 4096) + body


def mark_stack_bomb(n: int = 200_000) -> bytes:
    return b"\x80\x02" + b"(" * n + b"."


def list_nesting_bomb(n: int = 200_000) -> bytes:
    return b"\x80\x02" + b"]" * n + b"."


def giant_binunicode8_length() -> bytes:
    return b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc"


def giant_long4_length() -> bytes:
    return b"\x80\x02\x8b" + struct.pack("<i", 0x7FFFFFF0) + b"\x01\x02"


def payload_pickle_after_benign_pickle() -> bytes:
    return pickle.dumps({"w": [1.0]}, protocol=4) + reduce_pickle(4)


def py2_name_under_protocol4() -> bytes:
    # __builtin__.xrange is mapped to builtins.range only while the protocol is below 3.
    return b"\x80\x04" + g0("__builtin__", "xrange") + b"K\x03\x85R."


def denied_gadget(module: str, name: str) -> bytes:
    """A call of ``module.name`` with one string argument (published exec/eval gadgets)."""
    return b"\x80\x02" + g0(module, name) + ustr("1") + b"\x85R."


# Published gadgets whose module is not on the allow-list: each runs code or touches the system.
PUBLISHED_GADGETS = [
    ("numpy.f2py.crackfortran", "myeval"),
    ("numpy.testing._private.utils", "runstring"),
    ("torch.jit.unsupported_tensor_ops", "execWrapper"),
    ("torch.utils.collect_env", "run"),
    ("torch._inductor.codecache", "compile_file"),
    ("torch.fx.experimental.symbolic_shapes", "ShapeEnv"),
    ("torch.storage", "_load_from_bytes"),
    ("torch.utils.data.datapipes.utils.decoder", "basichandlers"),
    ("torch.testing._internal.common_utils", "shell"),
    ("torch.cuda._utils", "_get_hip_runtime_library"),
    ("pandas", "read_pickle"),
    ("idlelib.pyshell", "ModifiedInterpreter"),
    ("lib2to3.pgen2.grammar", "Grammar"),
    ("_osx_support", "_read_output"),
    ("_aix_support", "_read_cmd_output"),
    ("_pyrepl.pager", "pipe_pager"),
    ("pathlib", "Path"),
    ("antigravity", "webbrowser"),
    ("ensurepip", "_run_pip"),
    ("shutil", "rmtree"),
    ("tempfile", "mkdtemp"),
    ("operator", "attrgetter"),
    ("functools", "partial"),
    ("importlib", "import_module"),
    ("__builtin__", "eval"),
]


# --- red team: containers


def tar_payload_after_bad_header() -> bytes:
    # Python's tarfile stops at the first bad header after the first member; GNU tar skips it
    # and extracts what follows.
    good = tar_bytes({"README.md": b"# model\n"})
    first = good[: 512 + 512]
    return first + b"\x07" * 512 + tar_bytes({"model.pkl": reduce_pickle()})


def tar_payload_after_end_marker() -> bytes:
    return tar_bytes({"README.md": b"# model\n"}) + tar_bytes({"model.pkl": reduce_pickle()})


def gzip_second_member_payload() -> bytes:
    return gzip.compress(pickle.dumps({"w": 1}), mtime=0) + gzip.compress(reduce_pickle(), mtime=0)


def bz2_trailing_payload() -> bytes:
    # BZ2File (and LZMAFile) drop whatever follows the last valid stream without a word.
    return bz2.compress(pickle.dumps({"w": 1})) + reduce_pickle()


def xz_trailing_payload() -> bytes:
    import lzma

    return lzma.compress(pickle.dumps({"w": 1})) + reduce_pickle()


def gzip_stream_bomb(megabytes: int = 4) -> bytes:
    return gzip.compress(bytes(megabytes << 20), mtime=0)


def zip_local_zip64_extra_lies() -> bytes:
    # Local header sizes deferred to a zip64 extra that disagrees with the central directory:
    # a streaming reader reads a different extent than zipfile does.
    body = b"hello world\n"
    data = rezip({"a.txt": body, "b.txt": b"x"})
    info = zipfile.ZipFile(io.BytesIO(data)).infolist()[0]
    off = info.header_offset
    nlen = len(info.filename.encode())
    extra = struct.pack("<HHQQ", 1, 16, len(body) + 100, len(body) + 100)
    lh = bytearray(data[off : off + 30])
    struct.pack_into("<II", lh, 18, 0xFFFFFFFF, 0xFFFFFFFF)
    struct.pack_into("<H", lh, 28, len(extra))
    new_local = bytes(lh) + data[off + 30 : off + 30 + nlen] + extra
    shift = len(extra)
    rest = data[off + 30 + nlen :]
    out = bytearray(data[:off] + new_local + rest)
    # Fix the offsets that follow the grown local header.
    cd = out.index(b"PK\x01\x02")
    p = cd
    while out[p : p + 4] == b"PK\x01\x02":
        (hoff,) = struct.unpack_from("<I", out, p + 42)
        if hoff > off:
            struct.pack_into("<I", out, p + 42, hoff + shift)
        nl, el, cl = struct.unpack_from("<HHH", out, p + 28)
        p += 46 + nl + el + cl
    eocd = out.rindex(b"PK\x05\x06")
    (cd_off,) = struct.unpack_from("<I", out, eocd + 16)
    struct.pack_into("<I", out, eocd + 16, cd_off + shift)
    return bytes(out)


def npz_member_pickle_named_npy() -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, w=np.arange(3))
    z = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    members = {n: z.read(n) for n in z.namelist()}
    members["extra.npy"] = reduce_pickle()
    return rezip(members)


def npy_v3_object_payload() -> bytes:
    header = repr({"descr": "|O", "fortran_order": False, "shape": (1,)}).encode()
    header += b" " * (-(12 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x03\x00" + struct.pack("<I", len(header)) + header + reduce_pickle(3)


def npy_structured_object_field_payload() -> bytes:
    header = repr({"descr": [("a", "<f4"), ("b", "|O")], "fortran_order": False, "shape": (1,)}).encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + reduce_pickle(3)


def torch_zip_payload_in_byteorder_member() -> bytes:
    return torch_zip_with_member("/byteorder", reduce_pickle(0))


def torch_zip_second_pkl_member() -> bytes:
    members = torch_zip_members()
    prefix = next(n for n in members if n.endswith("data.pkl")).rsplit("/", 1)[0]
    members[f"{prefix}/constants.pkl"] = reduce_pickle(2)
    return rezip(members)


REDTEAM: dict[str, Callable[[], tuple[str, bytes, str]]] = {
    "import_side_effect_then_garbage": lambda: ("model.bin", import_side_effect_then_garbage(), UNSAFE),
    "import_side_effect_protocol0_text": lambda: ("notes.txt", import_side_effect_protocol0_text(), UNSAFE),
    "stop_with_leftovers_then_payload": lambda: ("model.pkl", stop_with_leftovers_then_payload(), UNSAFE),
    "stop_with_leftover_side_effect_call": lambda: ("model.pkl", stop_with_leftover_side_effect_call(), SUSPICIOUS),
    "rebuild_from_type_v2_calls_global": lambda: ("model.pkl", rebuild_from_type_v2_calls_global(), UNSAFE),
    "rebuild_from_type_v2_computed_callable": lambda: ("model.pkl", rebuild_from_type_v2_computed_callable(), UNSAFE),
    "reconstructor_computed_base": lambda: ("model.pkl", reconstructor_computed_base(), UNSAFE),
    "codecs_encode_payload_to_unknown_loader": lambda: ("model.pkl", codecs_encode_payload_to_unknown_loader(), UNSAFE),
    "bytes_of_int_list_payload_to_unknown_loader": lambda: ("model.pkl", bytes_of_int_list_payload_to_unknown_loader(),
                                                            UNSAFE),
    "torch_load_from_bytes_nested_zip": lambda: ("model.pkl", torch_load_from_bytes_nested_zip(), UNSAFE),
    "next_buffer_out_of_band": lambda: ("model.pkl", next_buffer_out_of_band(), SUSPICIOUS),
    "frame_runs_past_stop": lambda: ("model.pkl", frame_runs_past_stop() + b"\x00" * 4096, SUSPICIOUS),
    "mark_stack_bomb": lambda: ("model.pkl", mark_stack_bomb(), UNSAFE),
    "list_nesting_bomb": lambda: ("model.pkl", list_nesting_bomb(), UNSAFE),
    "payload_pickle_after_benign_pickle": lambda: ("model.pkl", payload_pickle_after_benign_pickle(), UNSAFE),
    "py2_name_under_protocol4": lambda: ("model.pkl", py2_name_under_protocol4(), UNSAFE),
    "tar_payload_after_bad_header": lambda: ("model.tar", tar_payload_after_bad_header(), UNSAFE),
    "tar_payload_after_end_marker": lambda: ("model.tar", tar_payload_after_end_marker(), UNSAFE),
    "gzip_second_member_payload": lambda: ("model.joblib", gzip_second_member_payload(), UNSAFE),
    "bz2_trailing_payload": lambda: ("model.pkl.bz2", bz2_trailing_payload(), SUSPICIOUS),
    "xz_trailing_payload": lambda: ("model.pkl.xz", xz_trailing_payload(), SUSPICIOUS),
    "zip_local_zip64_extra_lies": lambda: ("bundle.zip", zip_local_zip64_extra_lies(), UNSAFE),
    "npz_member_pickle_named_npy": lambda: ("arrays.npz", npz_member_pickle_named_npy(), UNSAFE),
    "npy_v3_object_payload": lambda: ("arr.npy", npy_v3_object_payload(), UNSAFE),
    "npy_structured_object_field_payload": lambda: ("arr.npy", npy_structured_object_field_payload(), UNSAFE),
    "torch_zip_payload_in_byteorder_member": lambda: ("model.pt", torch_zip_payload_in_byteorder_member(), UNSAFE),
    "torch_zip_second_pkl_member": lambda: ("model.pt", torch_zip_second_pkl_member(), UNSAFE),
}
"""Bypasses found red-teaming the pickle family: ``(file name, bytes, least verdict expected)``."""

REDTEAM_ORDINARY: dict[str, Callable[[], tuple[str, bytes]]] = {}
"""Ordinary files the red team found flagged (false positives), filled in below."""


def _varied_torch_objects() -> dict[str, object]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.ModuleDict(
        {
            "lin": torch.nn.Linear(4, 3),
            "conv": torch.nn.Conv2d(3, 2, 3),
            "lstm": torch.nn.LSTM(4, 5, 2),
            "emb": torch.nn.Embedding(10, 4),
            "bn": torch.nn.BatchNorm2d(3),
        }
    )
    adam = torch.optim.Adam(model["lin"].parameters())
    model["lin"](torch.ones(1, 4)).sum().backward()
    adam.step()
    base = torch.arange(20, dtype=torch.float32)
    dtypes = [
        torch.int64, torch.bool, torch.uint8, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
        torch.float8_e4m3fnuz, torch.complex64, torch.complex32, torch.uint16, torch.int16,
    ]
    return {
        "module_state_dict": model.state_dict(),
        "adam_state_dict": adam.state_dict(),
        "sgd_state_dict": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9).state_dict(),
        "dtypes": {str(d): torch.zeros(3, dtype=d) for d in dtypes},
        "shared_storage_views": {"base": base, "slice": base[2:10], "view": base.view(4, 5), "t": base.view(4, 5).t()},
        "parameter": torch.nn.Parameter(torch.ones(3)),
        "size_device_dtype": {"size": torch.Size([2, 3]), "device": torch.device("cpu"), "dtype": torch.float16},
        "sparse_coo": torch.eye(3).to_sparse(),
        "meta_tensor": torch.empty(3, device="meta"),
        "nested_containers": {"a": [1, (2, 3), {"b": torch.ones(2)}], "t": (torch.zeros(1),), "s": "x"},
    }


def torch_ordinary(kind: str, how: str) -> bytes:
    import torch

    obj = _varied_torch_objects()[kind]
    kwargs: dict[str, object] = {"legacy": {"_use_new_zipfile_serialization": False}, "p2": {"pickle_protocol": 2},
                                 "p4": {"pickle_protocol": 4}}[how]
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


def numpy_pickles() -> bytes:
    import numpy as np

    arrays = {dt: np.zeros(2, dtype=dt)
              for dt in ["i1", "u2", "i8", "f2", "f8", "c16", "?", "M8[s]", "m8[ms]", "S3", "U2"]}
    arrays["structured"] = np.zeros(2, dtype=[("a", "<i4"), ("b", [("c", "f8", (2,))])])
    arrays["scalar"] = np.float32(1.5)  # type: ignore[assignment]
    return pickle.dumps(arrays, protocol=4)


def stdlib_values_pickle(protocol: int) -> bytes:
    import datetime
    import decimal
    import fractions

    return pickle.dumps(
        {
            "when": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
            "day": datetime.date(2024, 1, 1),
            "time": datetime.time(1, 2),
            "delta": datetime.timedelta(days=3),
            "tz": datetime.timezone(datetime.timedelta(hours=2), "X"),
            "price": decimal.Decimal("1.50"),
            "ratio": fractions.Fraction(1, 3),
            "counts": collections.Counter("abca"),
            "queue": collections.deque([1, 2]),
            "groups": collections.defaultdict(list, a=[1]),
            "set": {1, 2}, "frozen": frozenset({"a"}), "bytes": b"\x00\xff", "ba": bytearray(b"x"), "c": 1 + 2j,
        },
        protocol=protocol,
    )


REDTEAM_ORDINARY.update(
    {
        **{
            f"torch_{kind}_{how}": (lambda kind=kind, how=how: (f"{kind}.pt", torch_ordinary(kind, how)))
            for kind in (
                "module_state_dict", "adam_state_dict", "sgd_state_dict", "dtypes", "shared_storage_views",
                "parameter", "size_device_dtype", "sparse_coo", "meta_tensor", "nested_containers",
            )
            for how in ("legacy", "p2", "p4")
        },
        "numpy_arrays_pickled": lambda: ("arrays.pkl", numpy_pickles()),
        **{f"stdlib_values_protocol{p}": (lambda p=p: (f"values{p}.pkl", stdlib_values_pickle(p))) for p in range(6)},
        "gzip_two_members_benign": lambda: (
            "data.pkl.gz", gzip.compress(pickle.dumps([1]), mtime=0) + gzip.compress(pickle.dumps([2]), mtime=0)
        ),
        "gzip_zero_padded": lambda: ("data.pkl.gz", gzip.compress(pickle.dumps([1]), mtime=0) + bytes(512)),
        "bz2_two_streams_benign": lambda: ("data.bz2", bz2.compress(b"hello\n") + bz2.compress(b"world\n")),
        "tar_padded_record": lambda: ("files.tar", tar_bytes({"a.txt": b"x" * 3000, "b/c.txt": b"y"})),
        "npz_savez_compressed_many": lambda: ("a.npz", npz(True)),
    }
)


def tar_header_pickle_polyglot() -> bytes:
    # The first member's name field is a protocol 0 pickle: tar readers see a tar, pickle.load
    # runs the name. A scanner that trusts the first magic it finds sees only the tar.
    return tar_bytes({"cposix\ngetcwd\n(tR.": b"# model\n"})


REDTEAM["tar_header_pickle_polyglot"] = lambda: ("model.pt", tar_header_pickle_polyglot(), UNSAFE)


# --- red team, round 3: what the sniffer decides from a fixed prefix (test_redteam_round3.py)

_GETCWD_CALL = g0("os", "getcwd") + b"(tR."


def long_first_string_pushes_payload_past_sniff_prefix() -> bytes:
    # Protocol 0: one UNICODE opcode whose line is longer than the 64 KiB the sniffer sees, then
    # POP and the payload. The prefix ends inside the string: it proves nothing either way.
    return b"V" + b"a" * 70_000 + b"\n0" + _GETCWD_CALL


def noop_padding_pushes_payload_past_sniff_prefix() -> bytes:
    # NONE, POP repeated past the prefix: text to a sniffer, a long no-op to pickle.load.
    return b"N0" * 40_000 + _GETCWD_CALL


def protocol2_long_binunicode_before_payload() -> bytes:
    # A PROTO-led stream whose first data opcode is a 100 kB BINUNICODE: one opcode in the prefix.
    return b"\x80\x02X" + struct.pack("<I", 100_000) + b"a" * 100_000 + b"0" + _GETCWD_CALL


def import_only_two_opcode_pickle() -> bytes:
    # GLOBAL then STOP: two opcodes, no call, yet pickle.load imports the module (its code runs).
    return g0("antigravity", "x") + b"."


def second_pickle_after_long_string() -> bytes:
    # Legacy torch.load reads the magic number pickle, then unpickles the next one (the protocol
    # version): here a pickle whose payload sits past the 64 KiB the probe of the next pickle reads.
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    return magic + long_first_string_pushes_payload_past_sniff_prefix()


REDTEAM.update(
    {
        "long_first_string_pushes_payload_past_sniff_prefix": lambda: (
            "weights.bin", long_first_string_pushes_payload_past_sniff_prefix(), UNSAFE),
        "noop_padding_pushes_payload_past_sniff_prefix": lambda: (
            "notes.txt", noop_padding_pushes_payload_past_sniff_prefix(), UNSAFE),
        "protocol2_long_binunicode_before_payload": lambda: (
            "model.bin", protocol2_long_binunicode_before_payload(), UNSAFE),
        "import_only_two_opcode_pickle": lambda: ("model.pkl", import_only_two_opcode_pickle(), UNSAFE),
        "second_pickle_after_long_string": lambda: ("model.pkl", second_pickle_after_long_string(), UNSAFE),
    }
)

REDTEAM_ORDINARY.update(
    {
        # Text whose first line is longer than the sniff prefix (a one-line minified file).
        "text_with_long_first_line": lambda: ("notes.txt", b"Version " + b"x" * 70_000 + b"\nmore\n"),
        # Text whose first two lines read as PERSID then a BINSTRING longer than the file.
        "text_persid_then_huge_binstring": lambda: ("README.md", b"Project\nThe quick brown fox\n" * 3000),
        "text_of_none_pop_pairs": lambda: ("notes.txt", b"N0" * 40_000),
    }
)


# --- joblib: arrays written raw inside the pickle stream (round 3) --------------------------------


def joblib_array_pickle(
    data: bytes, *, dtype: str = "u1", shape: tuple[int, ...] | None = None,
    padding: bytes | None = b"\x03\xff\xff\xff",
    after: bytes = b"",
) -> bytes:
    """A ``joblib.dump({'w': array})`` stream, laid out as joblib writes it (protocol 4, no frames).

    joblib pickles a ``NumpyArrayWrapper`` (shape, dtype, alignment), and its unpickler then reads
    the array's raw bytes from the stream right after that object's BUILD: a padding length byte
    and padding (when ``numpy_array_alignment_bytes`` is set), then the data. ``after`` goes
    between the array and the final SETITEM, where joblib.load goes on interpreting opcodes.
    """
    shape = (len(data),) if shape is None else shape
    state = (
        b"(" + ustr("subclass") + g0("numpy", "ndarray")
        + ustr("shape") + b"(" + b"".join(b"J" + struct.pack("<i", d) for d in shape) + b"t"
        + ustr("order") + ustr("C")
        + ustr("dtype") + g0("numpy", "dtype") + ustr(dtype) + b"\x89\x88\x87R"
        + b"(K\x03" + ustr("|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff"
        + (b"K\x3f" if dtype.startswith("O") else b"K\x00") + b"tb"
        + ustr("allow_mmap") + b"\x88"
        + (ustr("numpy_array_alignment_bytes") + b"K\x10" if padding is not None else b"")
        + b"u"
    )
    wrapper = g0("joblib.numpy_pickle", "NumpyArrayWrapper") + b")\x81}" + state + b"b"
    return b"\x80\x04}" + ustr("w") + wrapper + (padding or b"") + data + after + b"s."


def joblib_padding_byte_starts_plain_pickle_payload() -> bytes:
    # joblib reads the padding length byte ("c" = 99) and skips 99 bytes; pickle.load of the same
    # file reads "c" as GLOBAL: os.getcwd is called by plain pickle, never seen by joblib.
    payload = g0("os", "getcwd") + b"(tR."
    return joblib_array_pickle(bytes(8), padding=payload + b"\xff" * (99 - len(payload) + 1))


def joblib_payload_after_array_bytes() -> bytes:
    # The array bytes hide the rest of the stream from a scanner that reads them as opcodes.
    return joblib_array_pickle(bytes(64), after=b"0" + g0("os", "getcwd") + b"(tR0" + b"N")


def joblib_object_array_nested_payload() -> bytes:
    # An object array: joblib.load calls pickle.load on the stream right after the wrapper.
    return joblib_array_pickle(reduce_pickle(2), dtype="O8", shape=(1,), padding=None)


REDTEAM.update(
    {
        "joblib_padding_byte_starts_plain_pickle_payload": lambda: (
            "model.joblib", joblib_padding_byte_starts_plain_pickle_payload(), UNSAFE),
        "joblib_payload_after_array_bytes": lambda: ("model.joblib", joblib_payload_after_array_bytes(), UNSAFE),
        "joblib_object_array_nested_payload": lambda: ("model.joblib", joblib_object_array_nested_payload(), UNSAFE),
        "joblib_zlib_compressed_payload": lambda: ("model.joblib", zlib.compress(reduce_pickle(4), 3), UNSAFE),
        "joblib_lzma_compressed_payload": lambda: (
            "model.joblib", lzma.compress(reduce_pickle(4), format=lzma.FORMAT_ALONE), UNSAFE),
    }
)

REDTEAM_ORDINARY.update(
    {
        "joblib_float_array": lambda: (
            "model.joblib", joblib_array_pickle(struct.pack("<4f", 1, 2, 3, 4), dtype="f4", shape=(2, 2))),
        "joblib_array_without_alignment": lambda: ("model.joblib", joblib_array_pickle(bytes(range(32)), padding=None)),
        "joblib_zlib_compressed_array": lambda: (
            "model.joblib",
            zlib.compress(joblib_array_pickle(struct.pack("<4f", 1, 2, 3, 4), dtype="f4", shape=(4,)), 3)),
        "joblib_lzma_compressed_array": lambda: (
            "model.joblib", lzma.compress(joblib_array_pickle(bytes(16)), format=lzma.FORMAT_ALONE)),
        "text_starting_x_caret": lambda: ("notes.md", b"x^2 + y^2 = r^2\n" * 40),
    }
)


# --- tar headers as Python's tarfile reads them (round 3) ------------------------------------------


def v7_tar(name: bytes, body: bytes, *, checksum: str = "octal") -> bytes:
    """A tar of one member under an old (v7) header, no ``ustar`` magic.

    ``checksum`` is ``octal`` (the usual unsigned sum), ``signed`` (the sum of the header's bytes
    taken as signed chars, which tarfile also accepts; high bytes sit in the link-name field) or
    ``base256`` (the sum written as a base-256 number, which tarfile's ``nti`` also reads).
    torch.load(weights_only=False) opens such a tar with tarfile and unpickles its ``storages``.
    """
    h = bytearray(512)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = b"%011o\x00" % len(body)
    h[136:148] = b"00000000000\x00"
    h[156] = ord("0")
    if checksum == "signed":
        h[157:167] = b"\xff" * 10
    h[148:156] = b" " * 8
    total = sum(struct.unpack("148b8x356b", bytes(h))) + 256 if checksum == "signed" else sum(h)
    h[148:156] = b"\x80" + total.to_bytes(7, "big") if checksum == "base256" else b"%06o\x00 " % total
    return bytes(h) + body + bytes(-len(body) % 512) + bytes(1024)


REDTEAM.update(
    {
        "tar_v7_signed_checksum_storages_payload": lambda: (
            "model.pt", v7_tar(b"storages", reduce_pickle(2), checksum="signed"), UNSAFE),
        "tar_v7_base256_checksum_storages_payload": lambda: (
            "model.pt", v7_tar(b"storages", reduce_pickle(2), checksum="base256"), UNSAFE),
    }
)


def npy_python2_long_shape_object_payload() -> bytes:
    """An object ``.npy`` whose header writes the shape as a Python 2 long (``(1L,)``).

    ``ast.literal_eval`` refuses it; ``np.load`` rewrites such headers and retries, then
    unpickles the data (allow_pickle=True).
    """
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1L,), }"
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + reduce_pickle(2)


REDTEAM["npy_python2_long_shape_object_payload"] = lambda: ("arr.npy", npy_python2_long_shape_object_payload(), UNSAFE)


def torchscript_archive() -> bytes:
    """``torch.jit.save`` of a scripted module: ``__torch__`` classes in data.pkl, TorchScript in code/."""
    import torch

    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())), buf)
    return buf.getvalue()


def tensor_pickled_with_plain_pickle() -> bytes:
    """``pickle.dumps`` of a tensor: its storage reduces to ``torch.storage._load_from_bytes(<torch zip>)``."""
    import torch

    return pickle.dumps({"t": torch.arange(4.0)}, protocol=4)


def load_from_bytes_via_rebuild_from_type_v2() -> bytes:
    # _rebuild_from_type_v2(func, new_type, args, state) calls func(*args): the loader reached
    # through an allowed function must still have its bytes scanned.
    inner = torch_zip_payload_in_data_pkl()
    return (
        b"\x80\x02" + g0("torch._tensor", "_rebuild_from_type_v2")
        + b"(" + g0("torch.storage", "_load_from_bytes") + g0("torch", "Tensor") + bu8(inner) + b"\x85}tR."
    )


REDTEAM["load_from_bytes_via_rebuild_from_type_v2"] = lambda: ("model.pkl", load_from_bytes_via_rebuild_from_type_v2(),
                                                               UNSAFE)
REDTEAM_ORDINARY["tensor_pickled_with_plain_pickle"] = lambda: ("tensors.pkl", tensor_pickled_with_plain_pickle())


def joblib_zlib_sparse_array(megabytes: int = 80) -> bytes:
    """``joblib.dump({'w': np.zeros(...)}, compress=True)``: a thousandfold ratio, and ordinary."""
    return zlib.compress(joblib_array_pickle(bytes(megabytes << 20), dtype="f8", shape=((megabytes << 20) // 8,)), 1)
