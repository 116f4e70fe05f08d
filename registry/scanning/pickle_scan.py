"""Pickle scanning: a symbolic opcode interpreter and an allow-list.

The interpreter walks every opcode of protocols 0 to 5 (decoded by :mod:`pickletools`) over a
symbolic stack and memo, so it sees what the unpickler would *do* rather than what the bytes
*contain*: ``STACK_GLOBAL`` operands are resolved through ``BINPUT``/``BINGET``, calls are matched
with their callables, nested pickles handed to ``pickle.loads`` are scanned in turn, and a stream
that breaks after doing work is reported (the payload ran before the break).

A global is safe only when its exact ``(module, name)`` pair is on :data:`ALLOWED_GLOBALS`.
Anything else is suspicious; a global in a dangerous package (or any submodule of one), a dunder
or a dotted attribute walk is unsafe.

Example:
    >>> import io, pickle
    >>> findings = scan_pickle_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    >>> [f.rule_id for f in findings]
    []
"""

from __future__ import annotations

import _compat_pickle
import io
import pickletools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from registry.scanning.containers import SliceReader
from registry.scanning.model import Finding, Severity

# --- the allow-list -------------------------------------------------------------------------

_TORCH_STORAGES = (
    "FloatStorage DoubleStorage HalfStorage BFloat16Storage LongStorage IntStorage ShortStorage "
    "CharStorage ByteStorage BoolStorage ComplexFloatStorage ComplexDoubleStorage QInt8Storage "
    "QUInt8Storage QInt32Storage QUInt4x2Storage QUInt2x4Storage UntypedStorage "
    "Float8_e4m3fnStorage Float8_e5m2Storage"
).split()
# Every dtype is a plain enum value: resolving one can run nothing.
_TORCH_DTYPES = (
    "float32 float float64 double float16 half bfloat16 int8 uint8 int16 short int32 int int64 long "
    "bool complex64 cfloat complex128 cdouble complex32 chalf qint8 quint8 qint32 quint4x2 quint2x4 "
    "float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 "
    "uint1 uint2 uint3 uint4 uint5 uint6 uint7 uint16 uint32 uint64 "
    "int1 int2 int3 int4 int5 int6 int7 bits1x8 bits2x4 bits4x2 bits8 bits16"
).split()
_TORCH_QSCHEMES = (
    "per_tensor_affine per_channel_affine per_tensor_symmetric per_channel_symmetric "
    "per_channel_affine_float_qparams"
).split()

_PURE_BUILTINS = (
    "len abs min max sum round divmod all any sorted reversed enumerate zip chr ord hex oct bin hash repr ascii "
    "callable id"
).split()
# Not here, on purpose: getattr setattr delattr hasattr vars dir globals locals eval exec compile
# __import__ open input print breakpoint help exit quit type super property classmethod staticmethod
# iter next map filter memoryview format isinstance issubclass pow: each reaches code, attributes,
# the process, files or imports, calls an argument, or needs none of the above to load data.
_FUTURE_FEATURES = (
    "_Feature nested_scopes generators division absolute_import with_statement print_function unicode_literals "
    "barry_as_FLUFL generator_stop annotations"
).split()

ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        # Plain containers as pickled by protocols 0-3, and bytes as pickled by protocols 0-2.
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("builtins", "bytes"),
        ("builtins", "complex"),
        ("builtins", "slice"),
        ("builtins", "range"),
        ("_codecs", "encode"),
        # Protocol 0/1 instances: the class itself is a separate global, judged on its own.
        ("copyreg", "_reconstructor"),
        ("builtins", "object"),
        # Tensors and parameters as written by torch.save (zip and legacy formats).
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v3"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._utils", "_rebuild_parameter_with_state"),
        ("torch._utils", "_rebuild_qtensor"),
        ("torch._utils", "_rebuild_device_tensor_from_numpy"),
        ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor"),
        ("torch._utils", "_rebuild_meta_tensor_no_storage"),
        ("torch._utils", "_rebuild_sparse_tensor"),
        ("torch._utils", "_rebuild_nested_tensor"),
        # Sparse tensors name their layout by string; this looks it up among torch.layout values only.
        ("torch.serialization", "_get_layout"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch", "Size"),
        ("torch", "device"),
        ("torch", "Tensor"),
        ("torch.nn.parameter", "Parameter"),
        *(("torch", q) for q in _TORCH_QSCHEMES),
        # Memory formats are enum values that torch pickles as a dotted name reached from
        # torch._utils; exactly these pairs, so the dotted-name rule still holds for every other.
        *(("torch._utils", f"torch.{m}") for m in ("contiguous_format", "channels_last", "channels_last_3d",
                                                   "preserve_format")),
        *(("torch", s) for s in _TORCH_STORAGES),
        # Storages of GPU tensors in files written by old torch versions.
        *(("torch.cuda", s) for s in _TORCH_STORAGES if s != "UntypedStorage"),
        ("torch.storage", "UntypedStorage"),
        ("torch.storage", "TypedStorage"),
        *(("torch", d) for d in _TORCH_DTYPES),
        # NumPy arrays, dtypes and scalars (numpy 1.x and 2.x module names).
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        # Value types of the standard library whose constructors take only data (numbers, strings,
        # bytes, other values of the list): they cannot call, import or open anything.
        ("builtins", "list"),
        ("builtins", "dict"),
        ("builtins", "tuple"),
        ("builtins", "int"),
        ("builtins", "float"),
        ("builtins", "str"),
        ("builtins", "bool"),
        # Pure builtins: called from a pickle (positional arguments only, since NEWOBJ refuses a
        # function) they compute over values the pickle built, calling no argument (no key=, no
        # callable-taking iter/map/filter) and reaching no attribute, file or import.
        *(("builtins", f) for f in _PURE_BUILTINS),
        # Feature flags of __future__: inert records (what pickle.dumps(__future__.annotations) writes).
        *(("__future__", f) for f in _FUTURE_FEATURES),
        ("collections", "Counter"),
        ("collections", "deque"),
        ("collections", "defaultdict"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("fractions", "Fraction"),
        # joblib's placeholder for a NumPy array whose raw bytes follow in the stream: built with
        # NEWOBJ and a BUILD of plain attributes. The bytes it announces are skipped as joblib
        # reads them, and also read as opcodes the way pickle.load would (see _joblib_array).
        ("joblib.numpy_pickle", "NumpyArrayWrapper"),
        # TorchScript archives build typed lists and tag types with these; each returns its argument.
        *(("torch.jit._pickle", f) for f in ("build_intlist", "build_tensorlist", "build_doublelist", "build_boollist",
                                             "build_complexlist", "restore_type_tag")),
    }
)
"""Exact ``(module, qualname)`` pairs a pickle may resolve and still be safe."""

SCANNED_LOADERS: frozenset[tuple[str, str]] = frozenset({("torch.storage", "_load_from_bytes")})
"""Allowed only when called on bytes present in the pickle, which are then scanned as a file.

A tensor pickled with plain ``pickle`` (not ``torch.save``) reduces its storage to
``torch.storage._load_from_bytes(<a torch.save archive>)``: the call runs ``torch.load`` on those
bytes and nothing else, so the nested archive decides.
"""

_DANGEROUS_PACKAGES = frozenset(
    """
    os posix nt posixpath ntpath genericpath subprocess _posixsubprocess sys pty tty termios socket
    _socket ssl select selectors socketserver shutil importlib imp zipimport pkgutil runpy site
    pickle _pickle cPickle pickletools copyreg copy_reg dill cloudpickle joblib shelve dbm marshal
    types code codeop inspect ctypes _ctypes cffi webbrowser pip _pip ensurepip venv distutils
    setuptools pkg_resources idlelib lib2to3 doctest trace tracemalloc bdb pdb cProfile profile
    _lsprof timeit uuid multiprocessing _multiprocessing concurrent asyncio threading _thread
    signal io _io _pyio linecache tempfile glob fileinput tarfile zipfile mailcap requests httpx
    urllib urllib3 http httplib aiohttp ftplib smtplib telnetlib poplib imaplib nntplib xmlrpc
    wsgiref operator _operator functools _functools itertools gc weakref _weakref atexit
    builtins __builtin__ logging sqlite3 _sqlite3 platform sysconfig getpass pydoc pydoc_data
    jinja2 yaml ruamel mako numexpr IPython jupyter_client nbformat sympy dask
    test _interpreters _xxsubinterpreters _interpchannels _interpqueues _xxinterpchannels
    fickling picklescan modelscan
    torch.hub torch.jit torch.package torch.serialization torch.utils.cpp_extension torch._dynamo
    torch._inductor torch.fx torch.distributed torch.multiprocessing torch._C torch.ops torch.library
    torch.load torch.compile numpy.load numpy.testing numpy.f2py numpy.distutils numpy.ctypeslib
    numpy.lib.npyio numpy.lib.format numpy.loadtxt numpy.fromfile
    antigravity this idlelib turtledemo turtle tkinter _tkinter __hello__ __phello__ _osx_support
    _aix_support _pyrepl _sitebuiltins zipapp compileall py_compile modulefinder mailbox mmap
    resource fcntl pwd grp pathlib _posixshmem faulthandler builtins
    torch.storage._load_from_bytes torch.utils.collect_env torch.utils.bottleneck torch.utils.data
    torch.utils.tensorboard torch.utils.benchmark torch.testing torch._export torch.export torch.onnx
    torch._functorch torch._higher_order_ops torch._lazy torch._ops torch._classes torch.classes
    torch.cuda torch.backends torch._subclasses torch._prims torch._refs torch._logging
    torch.autograd torch.overrides
    numpy.lib._npyio_impl numpy.lib._format_impl numpy.lib._utils_impl numpy.lib.utils
    numpy.core._internal numpy._core._internal numpy._pytesttester numpy._utils
    pandas.read_pickle pandas.io pandas.compat sklearn.externals tensorflow keras tf_keras jax
    numba Cython
    """.split()
)
"""Packages whose every member (and submodule) is unsafe to resolve from a pickle."""

_LOADERS = frozenset(
    {
        ("pickle", "loads"),
        ("pickle", "load"),
        ("_pickle", "loads"),
        ("_pickle", "load"),
        ("pickle", "_loads"),
        ("dill", "loads"),
        ("cloudpickle", "loads"),
        ("joblib", "load"),
        ("torch", "load"),
        ("torch.serialization", "load"),
        ("numpy", "load"),
        ("marshal", "loads"),
        # torch.storage._load_from_bytes calls torch.load on its argument: a whole nested file.
        ("torch.storage", "_load_from_bytes"),
        ("pandas", "read_pickle"),
        ("dill._dill", "loads"),
        ("cloudpickle.cloudpickle", "loads"),
        ("joblib.numpy_pickle", "load"),
        ("pickle", "_load"),
    }
)
"""Callables whose bytes argument is itself a serialized object to scan."""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@dataclass(frozen=True, slots=True)
class GlobalClass:
    """How a resolved global is judged: ``severity`` is None when allowed."""

    severity: Severity | None
    rule_id: str
    reason: str


def classify_global(module: str, name: str, *, fix_imports: bool = True) -> GlobalClass:
    """Judge one ``(module, name)`` pair resolved by a pickle.

    Names are first mapped the way the unpickler maps Python 2 names (``__builtin__`` to
    ``builtins``), then compared exactly with the allow-list: no prefix matching, so
    ``posixpath`` / ``os.system`` matches nothing allowed.

    Args:
        module: the module part, as written in the pickle.
        name: the qualified name part, as written in the pickle.
        fix_imports: whether the unpickler maps Python 2 names here: it does only while the
            stream's protocol is below 3, so a protocol 4 ``dbm`` is the real ``dbm``.

    Returns:
        The classification, with a stable rule id.
    """
    if not fix_imports:
        pass
    elif (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    if (module, name) in ALLOWED_GLOBALS:
        return GlobalClass(None, "pickle.global.allowed", "allow-listed")
    if (module, name) in SCANNED_LOADERS:
        return GlobalClass(None, "pickle.global.scanned-loader", "loads only the bytes it is given, which are scanned")
    mod_parts = module.split(".")
    name_parts = name.split(".")
    if not all(_IDENT.match(p) for p in mod_parts) or not all(_IDENT.match(p) for p in name_parts):
        return GlobalClass(Severity.UNSAFE, "pickle.global.malformed", "module or name is not an identifier path")
    for i in range(1, len(mod_parts) + 1):
        if ".".join(mod_parts[:i]) in _DANGEROUS_PACKAGES:
            return GlobalClass(Severity.UNSAFE, "pickle.global.dangerous",
                               f"{'.'.join(mod_parts[:i])} is a dangerous package")
    # A qualified name walks attributes from the module (pickle protocol 4 resolves dots in names),
    # so "torch" + "load.__globals__" or "posixpath" + "os.system" reach far beyond what the pair says.
    full = f"{module}.{name}".split(".")
    for i in range(len(mod_parts) + 1, len(full) + 1):
        if ".".join(full[:i]) in _DANGEROUS_PACKAGES:
            return GlobalClass(Severity.UNSAFE, "pickle.global.dangerous",
                               f"{'.'.join(full[:i])} is a dangerous package")
    if any(p.startswith("__") and p.endswith("__") for p in mod_parts + name_parts):
        return GlobalClass(Severity.UNSAFE, "pickle.global.dunder", "dunder attribute")
    if len(name_parts) > 1:
        return GlobalClass(Severity.UNSAFE, "pickle.global.attribute-walk", "dotted name walks attributes")
    return GlobalClass(Severity.SUSPICIOUS, "pickle.global.not-allowed", "not on the allow-list")


# --- symbolic values ------------------------------------------------------------------------


class _Mark:
    __slots__ = ()


_MARK = _Mark()


@dataclass(slots=True, eq=False)
class _Global:
    module: str
    name: str
    cls: GlobalClass

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(slots=True, eq=False)
class _Call:
    func: Any
    args: Any
    offset: int
    opcode: str
    value: Any = None
    """The concrete result when the call only converts data (``_codecs.encode`` of a string)."""
    state: Any = None
    """What a BUILD applied to the result (a ``numpy.dtype``'s layout tuple, a wrapper's attributes)."""


@dataclass(slots=True, eq=False)
class _Opaque:
    what: str


@dataclass(slots=True, eq=False)
class _List:
    items: list[Any] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Dict:
    items: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Set:
    items: list[Any] = field(default_factory=list)


class PickleParseError(Exception):
    """The opcode stream is malformed (raised internally, reported as a finding)."""


NestedScanner = Callable[[str, bytes], list[Finding]]


@dataclass(slots=True)
class PickleStreamResult:
    """The outcome of interpreting one pickle (from its first opcode to ``STOP``).

    Attributes:
        findings: what was found, located.
        end: offset just past ``STOP`` (or where parsing broke), relative to the reader.
        stopped: whether ``STOP`` was reached.
        did_work: whether the stream resolved a global or made a call (so a later break matters).
        value: the concrete top-level value when it is a plain int/str/bytes, else None.
        persistent_ids: persistent ids seen (torch storages), for layout checks.
        opcodes: how many opcodes were read.
    """

    findings: list[Finding]
    end: int
    stopped: bool
    did_work: bool
    value: Any = None
    persistent_ids: list[Any] = field(default_factory=list)
    opcodes: int = 0


class _Interpreter:
    def __init__(self, loc: str, nested: NestedScanner | None, depth: int, probe: bool,
                 torchscript: bool = False) -> None:
        self.loc = loc
        self.torchscript = torchscript
        self.nested = nested
        self.depth = depth
        self.probe = probe
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str]] = set()
        self.did_work = False
        self.persistent_ids: list[Any] = []
        self.idents_ok = True
        self.good_globals = 0
        self.calls = 0
        self.ops_after_global = 0
        self.strong_globals = 0
        self.proto = 0
        self.frame_end: int | None = None
        self.prev_pos = 0
        self.op_end = 0
        self.cut = False
        self.pending_array: tuple[int, int, bool, bool] | None = None
        """A joblib array announced by the last BUILD: (offset, data bytes, padded, object dtype)."""
        self.forks = 0
        self.plain = False
        """Read as plain pickle.load reads (a fork): joblib's array bytes are opcodes here."""

    # -- reporting

    def _where(self, pos: int, opname: str, extra: str = "") -> str:
        where = f"{self.loc}offset {pos} opcode {opname}"
        return f"{where} {extra}".rstrip()

    def _add(self, rule: str, sev: Severity, pos: int, opname: str, msg: str, key: str = "") -> None:
        dedupe = (rule, key or f"{pos}")
        if dedupe in self.seen:
            return
        self.seen.add(dedupe)
        self.findings.append(Finding(rule, sev, self._where(pos, opname, f"global {key}" if key else ""), msg))

    # -- stack helpers

    def _pop(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise PickleParseError("stack underflow")
        return self.stack.pop()

    def _pop_mark(self) -> list[Any]:
        if not self.marks:
            raise PickleParseError("MARK expected")
        at = self.marks.pop()
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def _top(self) -> Any:
        if not self.stack or (self.marks and len(self.stack) <= self.marks[-1]):
            raise PickleParseError("stack underflow")
        return self.stack[-1]

    # -- semantics

    def _global(self, module: Any, name: Any, pos: int, opname: str) -> _Global | _Opaque:
        self.did_work = True
        if not isinstance(module, str) or not isinstance(name, str):
            self._add(
                "pickle.global.unresolved", Severity.UNSAFE, pos, opname,
                "STACK_GLOBAL operands are not strings known at scan time", key="?",
            )
            return _Opaque("unresolved global")
        cls = classify_global(module, name, fix_imports=self.proto < 3)
        if self.torchscript and module.split(".", 1)[0] == "__torch__" and cls.rule_id == "pickle.global.dunder":
            if not any(p.startswith("__") and p.endswith("__") for p in (module.split(".")[1:] + name.split("."))):
                # In a TorchScript archive, torch.jit.load's own unpickler resolves __torch__ names to
                # classes compiled from the archive's code/ (reported as code); Python cannot import them.
                cls = GlobalClass(Severity.SUSPICIOUS, "pickle.global.torchscript-class",
                                  "TorchScript class from the archive's code")
        if cls.rule_id == "pickle.global.malformed":
            self.idents_ok = False
        else:
            self.good_globals += 1
            if cls.rule_id in ("pickle.global.dangerous", "pickle.global.dunder"):
                # Importing the module alone runs its top-level code (antigravity, pkg.__main__).
                self.strong_globals += 1
        g = _Global(module, name, cls)
        if cls.severity is not None:
            self._add(cls.rule_id, cls.severity, pos, opname, f"{g.qualname}: {cls.reason}", key=g.qualname)
        return g

    def _call(self, func: Any, args: Any, pos: int, opname: str) -> _Call:
        self.did_work = True
        self.calls += 1
        value = None
        if isinstance(func, _Global):
            if func.cls.severity is not None:
                self._add(
                    "pickle.call.not-allowed", func.cls.severity, pos, opname,
                    f"calls {func.qualname} at load time", key=func.qualname,
                )
            elif func.cls.rule_id == "pickle.global.scanned-loader":
                self._scanned_load(func, args, pos, opname)
            else:
                self._check_callable_args(func, args, pos, opname)
                value = _concrete_result(func, args)
            self._maybe_nested(func, args, pos, opname)
        else:
            # Calling something that is not a plain global (a call's result, a persistent
            # object, an extension code) means the callable was computed: a gadget chain.
            self._add(
                "pickle.call.dynamic", Severity.UNSAFE, pos, opname,
                f"calls a computed value ({type(func).__name__.strip('_').lower()}), not a resolved global",
            )
            self._maybe_nested(None, args, pos, opname)
        return _Call(func, args, pos, opname, value)

    def _scanned_load(self, func: _Global, args: Any, pos: int, opname: str) -> None:
        """A loader call that is safe exactly when its bytes are here to scan (see SCANNED_LOADERS)."""
        data = args[0] if isinstance(args, tuple) and len(args) == 1 else None
        if isinstance(data, _Call):
            data = data.value
        if not isinstance(data, (bytes, bytearray)):
            self._add(
                "pickle.call.loader-opaque", Severity.UNSAFE, pos, opname,
                f"{func.qualname} loads bytes not present in the pickle", key=func.qualname,
            )
            return
        if self.nested is None or self.probe:
            return
        self.findings.extend(self.nested(self._where(pos, opname, "nested pickle") + ": ", bytes(data)))

    def _check_callable_args(self, func: _Global, args: Any, pos: int, opname: str) -> None:
        """An allowed function that calls one of its arguments is a call of that argument."""
        positions = _CALLABLE_ARGS.get((func.module, func.name))
        if not positions:
            return
        if not isinstance(args, tuple):
            self._add(
                "pickle.call.computed-callable", Severity.UNSAFE, pos, opname,
                f"{func.qualname} calls one of its arguments, which are not a plain tuple",
            )
            return
        for i in positions:
            if i >= len(args) or args[i] is None:
                continue
            arg = args[i]
            if not isinstance(arg, _Global):
                self._add(
                    "pickle.call.computed-callable", Severity.UNSAFE, pos, opname,
                    f"{func.qualname} calls its argument {i}, a computed value rather than a resolved global",
                )
            elif arg.cls.rule_id == "pickle.global.scanned-loader":
                inner_call = _INNER_CALL.get((func.module, func.name))
                if inner_call is not None and inner_call[0] == i and len(args) > inner_call[1]:
                    inner_args = args[inner_call[1]]
                    self._scanned_load(arg, inner_args if isinstance(inner_args, tuple) else None, pos, opname)
                else:
                    self._add(
                        "pickle.call.loader-opaque", Severity.UNSAFE, pos, opname,
                        f"{func.qualname} calls {arg.qualname} with arguments the scan cannot follow", key=arg.qualname,
                    )
            elif arg.cls.severity is not None:
                self._add(
                    "pickle.call.not-allowed", arg.cls.severity, pos, opname,
                    f"{func.qualname} calls {arg.qualname} at load time", key=arg.qualname,
                )
        inner = _INNER_CALL.get((func.module, func.name))
        if inner is not None and len(args) > max(inner) and isinstance(args[inner[0]], _Global):
            self._maybe_nested(args[inner[0]], args[inner[1]], pos, opname)

    def _maybe_nested(self, func: _Global | None, args: Any, pos: int, opname: str) -> None:
        if self.nested is None or self.probe:
            return
        is_loader = func is not None and (func.module, func.name) in _LOADERS
        if func is not None and func.cls.severity is None:
            return
        for arg in _flat(args):
            if isinstance(arg, str):
                arg = arg.encode("latin-1", "replace")
            if not isinstance(arg, (bytes, bytearray)) or len(arg) < 2:
                continue
            if is_loader or _looks_serialized(bytes(arg[:65536])):
                sub = self.nested(self._where(pos, opname, "nested pickle") + ": ", bytes(arg))
                if is_loader and sub == []:
                    continue
                self.findings.extend(sub)

    def run(self, reader: BinaryIO) -> PickleStreamResult:
        pos = 0
        count = 0
        stopped = False
        value: Any = None
        opname = "?"
        try:
            for op, arg, p in pickletools.genops(reader):
                pos = p if p is not None else pos
                opname = op.name
                count += 1
                if self.good_globals:
                    self.ops_after_global += 1
                if self.frame_end is not None and self.prev_pos < self.frame_end < pos:
                    self._straddled(reader, self.frame_end, pos)
                    self._frame_mismatch(pos, opname, "an opcode crosses the end of its frame")
                self.prev_pos = pos
                if opname == "STOP":
                    # The unpickler returns the top of the stack and drops whatever lies below it.
                    top = self._pop()
                    stopped = True
                    if self.stack or self.marks:
                        self._add(
                            "pickle.stream.unbalanced", Severity.SUSPICIOUS, pos, opname,
                            f"STOP leaves {len(self.stack)} values and {len(self.marks)} marks behind: "
                            "no pickler writes this",
                        )
                        self._discard(self.stack, pos, opname)
                    if self.frame_end is not None and self.frame_end > pos + 1:
                        self._frame_mismatch(pos, opname, "the last frame runs past STOP")
                    value = (top if isinstance(top, (int, str, bytes))
                             else (top.items if isinstance(top, _List) else None))
                    if not self.probe and _expanded_size(top) > _MAX_EXPANSION:
                        self._add(
                            "pickle.expansion", Severity.SUSPICIOUS, pos, opname,
                            f"the value shares containers so deeply that walking it visits over {_MAX_EXPANSION} "
                            "items (a billion-laughs structure): harmless to load, explosive to copy, print or save",
                        )
                    break
                self._step(opname, arg, pos)
                if self.pending_array is not None:
                    self._joblib_array(reader, pos, opname)
                self.op_end = reader.tell()
                if len(self.stack) > _MAX_STACK or len(self.marks) > _MAX_STACK:
                    raise PickleParseError(f"stack deeper than {_MAX_STACK}: refused")
        except (ValueError, PickleParseError, UnicodeDecodeError, OverflowError, MemoryError, EOFError) as exc:
            end = reader.tell()
            # The bytes ran out, not the grammar: an opcode (or its argument) goes on past what was read.
            self.cut = isinstance(exc, (ValueError, EOFError)) and "unknown" not in str(exc) and _at_eof(reader)
            if not self.probe:
                sev = Severity.UNSAFE
                truncated = "exhausted" in str(exc) or "expected" in str(exc)
                rule = "pickle.stream.truncated" if truncated else "pickle.parse.error"
                if "unknown" in str(exc).lower() and "opcode" in str(exc).lower():
                    rule = "pickle.opcode.unknown"
                work = " after resolving globals or making calls" if self.did_work else ""
                self.findings.append(
                    Finding(rule, sev, f"{self.loc}offset {end}",
                            f"stream does not parse{work} (last opcode {opname} at {pos}): {exc}")
                )
            return PickleStreamResult(self.findings, end, False, self.did_work, None, self.persistent_ids, count)
        if not stopped:
            if not self.probe:
                self.findings.append(
                    Finding("pickle.stream.no-stop", Severity.UNSAFE, self._where(pos, opname),
                            "stream ends without STOP")
                )
            return PickleStreamResult(self.findings, reader.tell(), False, self.did_work, None, self.persistent_ids,
                                      count)
        return PickleStreamResult(self.findings, reader.tell(), True, self.did_work, value, self.persistent_ids, count)

    def _step(self, opname: str, arg: Any, pos: int) -> None:  # noqa: C901 - one branch per opcode
        st = self.stack
        if opname in _PUSH_ARG:
            st.append(arg)
        elif opname == "BYTEARRAY8":
            st.append(bytearray(arg))
        elif opname == "NONE":
            st.append(None)
        elif opname == "NEWTRUE":
            st.append(True)
        elif opname == "NEWFALSE":
            st.append(False)
        elif opname == "PROTO":
            if not 0 <= arg <= 5:
                raise PickleParseError(f"unsupported protocol {arg}")
            self.proto = arg
        elif opname == "FRAME":
            if self.frame_end is not None and pos < self.frame_end:
                self._frame_mismatch(pos, opname, "a frame starts inside the previous one")
            self.frame_end = pos + 9 + int(arg)
        elif opname == "NEXT_BUFFER":
            self._add(
                "pickle.buffer.out-of-band", Severity.SUSPICIOUS, pos, opname,
                "data supplied out of band by the loader, invisible to a scan of the file",
            )
            st.append(_Opaque("out-of-band buffer"))
        elif opname == "READONLY_BUFFER":
            self._top()
        elif opname == "EMPTY_LIST":
            st.append(_List())
        elif opname == "EMPTY_DICT":
            st.append(_Dict())
        elif opname == "EMPTY_TUPLE":
            st.append(())
        elif opname == "EMPTY_SET":
            st.append(_Set())
        elif opname == "MARK":
            self.marks.append(len(st))
        elif opname == "APPEND":
            v = self._pop()
            self._mutate(self._top(), [v], pos, opname)
        elif opname == "APPENDS":
            items = self._pop_mark()
            self._mutate(self._top(), items, pos, opname)
        elif opname == "LIST":
            st.append(_List(self._pop_mark()))
        elif opname == "TUPLE":
            st.append(tuple(self._pop_mark()))
        elif opname in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(opname[-1])
            items = [self._pop() for _ in range(n)][::-1]
            st.append(tuple(items))
        elif opname == "DICT":
            items = self._pop_mark()
            if len(items) % 2:
                raise PickleParseError("odd number of items for DICT")
            st.append(_Dict(list(zip(items[::2], items[1::2]))))
        elif opname == "SETITEM":
            v = self._pop()
            k = self._pop()
            self._mutate(self._top(), [(k, v)], pos, opname)
        elif opname == "SETITEMS":
            items = self._pop_mark()
            if len(items) % 2:
                raise PickleParseError("odd number of items for SETITEMS")
            self._mutate(self._top(), list(zip(items[::2], items[1::2])), pos, opname)
        elif opname == "ADDITEMS":
            items = self._pop_mark()
            self._mutate(self._top(), items, pos, opname)
        elif opname == "FROZENSET":
            st.append(_Set(self._pop_mark()))
        elif opname == "POP":
            if self.marks and len(st) == self.marks[-1]:
                # The C unpickler treats POP on an empty mark frame as POP_MARK.
                self._discard(self._pop_mark(), pos, opname)
            else:
                self._discard([self._pop()], pos, opname)
        elif opname == "POP_MARK":
            self._discard(self._pop_mark(), pos, opname)
        elif opname == "DUP":
            st.append(self._top())
        elif opname in ("GET", "BINGET", "LONG_BINGET"):
            key = int(arg)
            if key not in self.memo:
                raise PickleParseError(f"memo key {key} missing")
            st.append(self.memo[key])
        elif opname in ("PUT", "BINPUT", "LONG_BINPUT"):
            key = int(arg)
            if key < 0:
                raise PickleParseError("negative memo key")
            self.memo[key] = self._top()
        elif opname == "MEMOIZE":
            self.memo[len(self.memo)] = self._top()
        elif opname == "GLOBAL":
            module, _, name = str(arg).partition(" ")
            st.append(self._global(module, name, pos, opname))
        elif opname == "STACK_GLOBAL":
            name = self._pop()
            module = self._pop()
            st.append(self._global(module, name, pos, opname))
        elif opname in ("EXT1", "EXT2", "EXT4"):
            self.did_work = True
            self._add(
                "pickle.global.extension", Severity.UNSAFE, pos, opname,
                f"extension code {arg} resolves a global through copyreg's registry, invisible to a scan",
                key=f"ext:{arg}",
            )
            st.append(_Opaque(f"extension {arg}"))
        elif opname == "REDUCE":
            args = self._pop()
            func = self._pop()
            st.append(self._call(func, args, pos, opname))
        elif opname == "BUILD":
            state = self._pop()
            obj = self._top()
            self._build(obj, state, pos, opname)
        elif opname == "INST":
            module, _, name = str(arg).partition(" ")
            args = tuple(self._pop_mark())
            g = self._global(module, name, pos, opname)
            st.append(self._call(g, args, pos, opname))
        elif opname == "OBJ":
            items = self._pop_mark()
            if not items:
                raise PickleParseError("OBJ without a class")
            st.append(self._call(items[0], tuple(items[1:]), pos, opname))
        elif opname == "NEWOBJ":
            args = self._pop()
            cls = self._pop()
            st.append(self._call(cls, args, pos, opname))
        elif opname == "NEWOBJ_EX":
            kwargs = self._pop()
            args = self._pop()
            cls = self._pop()
            st.append(self._call(cls, (args, kwargs), pos, opname))
        elif opname in ("PERSID", "BINPERSID"):
            pid = arg if opname == "PERSID" else self._pop()
            self.persistent_ids.append(pid)
            st.append(_Opaque("persistent object"))
        else:
            raise PickleParseError(f"unhandled opcode {opname}")

    def _joblib_array(self, reader: BinaryIO, pos: int, opname: str) -> None:
        """Read past the array bytes a joblib wrapper announced, as ``joblib.load`` does.

        ``pickle.load`` of the same file reads those bytes as opcodes instead, with the stack and
        memo as they are here: a fork of this interpreter does that, and what it finds counts
        (its break does not: a break inside array data is what plain pickle.load of any joblib
        file with an array does, after resolving only allowed globals).
        """
        _, nbytes, padded, has_object = self.pending_array  # type: ignore[misc]
        self.pending_array = None
        start = reader.tell()
        if not self.probe and self.forks < _MAX_FORKS:
            self.forks += 1
            fork = _Interpreter(self.loc, self.nested, self.depth, False, self.torchscript)
            fork.stack, fork.marks, fork.memo = list(self.stack), list(self.marks), dict(self.memo)
            fork.proto, fork.seen, fork.plain = self.proto, set(self.seen), True
            fork.run(reader)
            # An object array's bytes are a whole pickle with a memo of its own. Read by pickle.load
            # they share this memo, so every memo reference of a benign array resolves to this
            # pickle's strings and names a module nobody has (``NumpyArrayWrapper.dtype``): that
            # reading stops at the failed import. What it reaches first that is unsafe still counts.
            self.findings.extend(
                f for f in fork.findings
                if f.rule_id not in _BREAK_RULES and f not in self.findings
                and (not has_object or f.severity is Severity.UNSAFE)
            )
            reader.seek(start)
        elif not self.probe:
            self._add(
                "pickle.joblib.too-many-arrays", Severity.SUSPICIOUS, pos, opname,
                f"more than {_MAX_FORKS} joblib arrays: later ones are not also read as pickle.load reads them",
                key="joblib-forks",
            )
        # The stream goes on with a new frame: the previous one ended before the array bytes.
        self.frame_end = None
        if has_object:
            # joblib hands the stream to pickle.load: a whole pickle sits here, then this one goes on.
            self._add(
                "pickle.joblib.object-array", Severity.INFO, pos, opname,
                "joblib object array: its elements are a nested pickle, run by joblib.load",
            )
            inner = _Interpreter(f"{self.loc}joblib array at {pos}: ", self.nested, self.depth, self.probe,
                                 self.torchscript)
            inner.forks = self.forks
            res = inner.run(reader)
            self.forks = inner.forks
            self.findings.extend(res.findings)
            if not res.stopped:
                raise PickleParseError("the object array's pickle does not end")
            return
        if padded:
            pad = reader.read(1)
            if len(pad) != 1:
                raise PickleParseError("joblib array padding truncated")
            nbytes += pad[0]
        end = reader.tell() + nbytes
        reader.seek(end)
        if reader.tell() != end or not _has_bytes_before(reader, end):
            raise PickleParseError(f"joblib array of {nbytes} bytes runs past the end of the stream")

    def _straddled(self, reader: BinaryIO, frame_end: int, pos: int) -> None:
        """Judge the globals written in the bytes an opcode read past the end of its frame.

        The C and Python unpicklers part ways there: one reads those bytes as the opcode's argument
        (as this interpreter did), the other may read them as opcodes. Whatever global they name
        could run, so each is judged like any other.
        """
        at = reader.tell()
        reader.seek(frame_end)
        data = reader.read(min(pos - frame_end, _STRADDLE_WINDOW))
        reader.seek(at)
        for m in _WRITTEN_GLOBAL.finditer(data):
            module, name = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            cls = classify_global(module.decode("latin-1"), name.decode("latin-1"))
            if cls.severity is Severity.UNSAFE:
                self._add(
                    "pickle.frame.hidden-global", Severity.UNSAFE, frame_end + m.start(), "FRAME",
                    f"{module.decode('latin-1')}.{name.decode('latin-1')} written past a frame's end: "
                    f"{cls.reason}, run by the unpickler that reads it as opcodes",
                    key=f"{module!r}.{name!r}",
                )

    def _frame_mismatch(self, pos: int, opname: str, why: str) -> None:
        # The C unpickler treats frames as read-ahead hints, the Python one enforces them:
        # two loaders would read two different streams.
        self._add("pickle.frame.mismatch", Severity.SUSPICIOUS, pos, opname, why, key="frame")
        self.frame_end = None

    def _mutate(self, target: Any, items: list[Any], pos: int, opname: str) -> None:
        if isinstance(target, _List) or isinstance(target, _Set):
            target.items.extend(items)
        elif isinstance(target, _Dict):
            target.items.extend(items)
        elif isinstance(target, _Global):
            # append/__setitem__/add on a class object is a method call chosen by the pickle.
            self._add(
                "pickle.call.method-on-global", Severity.UNSAFE, pos, opname,
                f"{opname} on {target.qualname} calls its methods", key=target.qualname,
            )
        elif isinstance(target, _Call) and isinstance(target.func, _Global) and target.func.cls.severity is None:
            pass
        elif isinstance(target, _Call) or isinstance(target, _Opaque):
            # The object's append/extend/__setitem__ runs: flagged through its constructor's global.
            self.did_work = True

    def _build(self, obj: Any, state: Any, pos: int, opname: str) -> None:
        if isinstance(obj, _Global):
            # BUILD on a class sets attributes on it through setattr: monkey-patching at load time.
            self.did_work = True
            self._add(
                "pickle.build.on-global", Severity.UNSAFE, pos, opname,
                f"BUILD sets attributes on {obj.qualname} itself", key=obj.qualname,
            )
        elif isinstance(obj, _Call):
            self.did_work = True
            if not isinstance(obj.func, _Global):
                self._add("pickle.build.on-dynamic", Severity.UNSAFE, pos, opname, "BUILD on a computed object")
                return
            obj.state = state
            if (obj.func.module, obj.func.name) == _JOBLIB_WRAPPER and not self.plain:
                self._announce_array(obj, state, pos, opname)

    def _announce_array(self, wrapper: _Call, state: Any, pos: int, opname: str) -> None:
        """joblib's unpickler reads the array right after this BUILD: how many bytes, and how."""
        attrs = {k: v for k, v in state.items if isinstance(k, str)} if isinstance(state, _Dict) else {}
        shape, dtype = attrs.get("shape"), _dtype_layout(attrs.get("dtype"))
        if not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape) or dtype is None:
            raise PickleParseError("joblib array wrapper without a readable shape and dtype")
        count = 1
        for d in shape:
            count *= d
        itemsize, has_object = dtype
        padded = attrs.get("numpy_array_alignment_bytes") is not None
        self.pending_array = (pos, count * itemsize, padded, has_object)

    def _discard(self, items: list[Any], pos: int, opname: str) -> None:
        for item in items:
            if isinstance(item, _Call):
                func = item.func
                allowed = isinstance(func, _Global) and func.cls.severity is None
                name = func.qualname if isinstance(func, _Global) else "a computed callable"
                # A call whose result is thrown away was made for its side effect only.
                self._add(
                    "pickle.call.result-discarded",
                    Severity.INFO if allowed else Severity.SUSPICIOUS,
                    pos, opname,
                    f"result of calling {name} (at offset {item.offset}) is discarded: a side-effect call",
                    key=f"{name}@{item.offset}",
                )


_MAX_EXPANSION = 1 << 24


def _expanded_size(value: Any) -> int:
    """How many items a tree walk of ``value`` visits, counted over the shared-reference graph.

    Each container is counted once (memoized by identity), so the cost is linear in the pickle
    while the result is what a walk of the tree would cost. Cycles count once.
    """
    sizes: dict[int, int] = {}
    todo: list[tuple[Any, bool]] = [(value, False)]
    while todo:
        v, done = todo.pop()
        if not isinstance(v, (tuple, _List, _Set, _Dict)) or (id(v) in sizes and not done):
            continue
        children = v.items if not isinstance(v, tuple) else v
        if isinstance(v, _Dict):
            children = [x for kv in v.items for x in kv]
        if not done:
            sizes[id(v)] = 1  # provisional: a cycle back to v counts once
            todo.append((v, True))
            todo.extend((c, False) for c in children)
        else:
            sizes[id(v)] = min(_MAX_EXPANSION + 1, 1 + sum(sizes.get(id(c), 1) for c in children))
    return sizes.get(id(value), 1)


_STRADDLE_WINDOW = 1 << 20
# A GLOBAL/INST line pair, or two SHORT_BINUNICODE strings (each maybe memoized) then STACK_GLOBAL.
_WRITTEN_GLOBAL = re.compile(
    rb"[ci]([A-Za-z_][\w.]{0,200})\n([A-Za-z_][\w.]{0,200})\n"
    rb"|\x8c[\x01-\xff]([A-Za-z_][\w.]{0,200})[\x94]?(?:q.)?\x8c[\x01-\xff]([A-Za-z_][\w.]{0,200})[\x94]?(?:q.)?\x93",
    re.DOTALL,
)
_JOBLIB_WRAPPER = ("joblib.numpy_pickle", "NumpyArrayWrapper")
_MAX_FORKS = 256
_BREAK_RULES = frozenset(
    {"pickle.parse.error", "pickle.opcode.unknown", "pickle.stream.truncated", "pickle.stream.no-stop",
     "pickle.stream.unbalanced", "pickle.frame.mismatch"}
)
_DTYPE_CODE = re.compile(r"^[?bBhHiIlLqQpPefdgFDGSUVOMmac]\d*$|^[biufcSUVOMm]\d+$")


def _has_bytes_before(reader: BinaryIO, end: int) -> bool:
    """Whether the stream really holds ``end`` bytes (seek past the end succeeds on files)."""
    if end == 0:
        return True
    reader.seek(end - 1)
    ok = len(reader.read(1)) == 1
    reader.seek(end)
    return ok


def _dtype_layout(value: Any, depth: int = 0) -> tuple[int, bool] | None:
    """(item size, holds objects) of a pickled ``numpy.dtype(code, align, copy)`` and its BUILD state."""
    if depth > 8 or not isinstance(value, _Call) or not isinstance(value.func, _Global):
        return None
    if ((value.func.module, value.func.name) != ("numpy", "dtype")
            or not isinstance(value.args, tuple) or not value.args):
        return None
    code = value.args[0]
    if not isinstance(code, str) or not _DTYPE_CODE.match(code):
        return None
    state = value.state
    has_object = code.startswith("O")
    if isinstance(state, tuple) and len(state) >= 6 and isinstance(state[4], _Dict):
        for _, field_spec in state[4].items:
            sub = field_spec[0] if isinstance(field_spec, tuple) and field_spec else None
            layout = _dtype_layout(sub, depth + 1)
            if layout is None:
                return None
            has_object = has_object or layout[1]
    if isinstance(state, tuple) and len(state) >= 6 and isinstance(state[5], int) and state[5] > 0:
        return state[5], has_object
    try:
        import numpy as np  # parses a type code; runs nothing

        return int(np.dtype(code).itemsize), has_object
    except (ImportError, TypeError, ValueError):
        return None


_PUSH_ARG = frozenset(
    "INT BININT BININT1 BININT2 LONG LONG1 LONG4 STRING BINSTRING SHORT_BINSTRING BINBYTES "
    "SHORT_BINBYTES BINBYTES8 UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8 FLOAT BINFLOAT".split()
)


def _flat(value: Any, budget: int = 4096) -> list[Any]:
    """The leaves of an argument, looking through containers and the arguments of inner calls."""
    out: list[Any] = []
    todo = [value]
    seen: set[int] = set()
    while todo and budget > 0:
        budget -= 1
        v = todo.pop()
        if isinstance(v, (tuple, _List, _Set, _Dict, _Call)):
            # Memo references make graphs, not trees.
            if id(v) in seen:
                continue
            seen.add(id(v))
        if isinstance(v, tuple):
            todo.extend(v)
        elif isinstance(v, (_List, _Set)):
            todo.extend(v.items)
        elif isinstance(v, _Dict):
            for k, x in v.items:
                todo.extend((k, x))
        elif isinstance(v, _Call):
            if v.value is not None:
                out.append(v.value)
            todo.append(v.args)
        else:
            out.append(v)
    return out


_MAX_STACK = 100_000
"""Deeper stacks are refused: pickled objects nested that deep do not exist, bombs do."""

# Allowed functions that call some of their arguments: (module, name) -> argument positions.
_CALLABLE_ARGS: dict[tuple[str, str], tuple[int, ...]] = {
    ("torch._tensor", "_rebuild_from_type_v2"): (0, 1),
    ("copyreg", "_reconstructor"): (0, 1),
    ("collections", "defaultdict"): (0,),
}
# ...and which argument is called with which other argument as its arguments.
_INNER_CALL: dict[tuple[str, str], tuple[int, int]] = {
    ("torch._tensor", "_rebuild_from_type_v2"): (0, 2),
}

_LATIN1 = frozenset({"latin1", "latin-1", "latin_1", "iso-8859-1", "iso8859-1", "l1"})


def _concrete_result(func: _Global, args: Any) -> Any:
    """Evaluate the few allowed conversions that build bytes from data, so nested blobs are seen."""
    if not isinstance(args, tuple):
        return None
    key = (func.module, func.name)
    if key == ("_codecs", "encode") and len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], str):
        if args[1].lower() in _LATIN1:
            return args[0].encode("latin-1", "replace")
        return None
    if key in (("builtins", "bytes"), ("builtins", "bytearray")) and len(args) == 1:
        a = args[0]
        if isinstance(a, _Call):
            a = a.value
        if isinstance(a, (bytes, bytearray)):
            return bytes(a)
        if (isinstance(a, _List) and len(a.items) <= 1 << 20
                and all(isinstance(i, int) and 0 <= i < 256 for i in a.items)):
            return bytes(a.items)
    return None


_SERIALIZED_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x93NUMPY",
                     b"7z\xbc\xaf\x27\x1c")


def _looks_serialized(head: bytes) -> bool:
    """Whether bytes handed to an unknown callable are a pickle or an archive worth opening."""
    return head.startswith(_SERIALIZED_MAGIC) or probe_pickle(head)


class _LineCappedReader(io.RawIOBase):
    """Caps ``readline`` so a binary blob without newlines cannot be read whole for one opcode."""

    def __init__(self, inner: BinaryIO, max_line: int = 1 << 20) -> None:
        self._inner = inner
        self._max_line = max_line

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        return self._inner.read(n)

    def readline(self, limit: int = -1) -> bytes:  # type: ignore[override]
        cap = self._max_line if limit is None or limit < 0 else min(limit, self._max_line)
        return self._inner.readline(cap)

    def tell(self) -> int:
        return self._inner.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._inner.seek(pos, whence)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True


def interpret_pickle(
    reader: BinaryIO,
    start: int,
    end: int,
    *,
    loc: str = "",
    nested: NestedScanner | None = None,
    depth: int = 0,
    probe: bool = False,
    torchscript: bool = False,
) -> PickleStreamResult:
    """Interpret one pickle found at ``start`` in ``reader`` (not past ``end``).

    Args:
        reader: a seekable binary stream.
        start: offset of the first opcode.
        end: offset the pickle may not read past.
        loc: location prefix for findings (e.g. ``"archive/data.pkl "``).
        nested: callback scanning a nested serialized blob (``loc, data``), or None.
        depth: nesting depth of this pickle inside other pickles.
        probe: when True, only decide whether it parses (no findings, no nested scans).
        torchscript: the pickle is a record of a TorchScript archive (``__torch__`` classes).

    Returns:
        The outcome; offsets in findings and ``end`` are relative to ``start``.
    """
    if end - start <= _IN_MEMORY_PICKLE:
        # pickletools reads an opcode a byte at a time: from memory that costs nothing, through a
        # window over a (possibly ranged, remote) reader it costs a seek and a read per byte.
        reader.seek(start)
        window = _LineCappedReader(io.BytesIO(reader.read(end - start)))
    else:
        window = _LineCappedReader(SliceReader(reader, start, end - start))
    return _Interpreter(loc, nested, depth, probe, torchscript).run(window)  # type: ignore[arg-type]


_IN_MEMORY_PICKLE = 16 * 1024 * 1024


def probe_pickle(head: bytes, reader: BinaryIO | None = None, size: int | None = None) -> bool:
    """Whether ``head`` (a prefix of a stream) looks like a pickle, judged by interpreting it.

    A prefix counts when it starts with ``PROTO`` and parses for a while, when it reaches ``STOP``
    cleanly, or when it resolves a well-formed global before breaking: a protocol 0 payload is
    text, so printable bytes alone say nothing.

    A prefix that parses up to its very end decides nothing: a long string argument or a long run
    of no-op opcodes pushes the payload past any fixed prefix, and ``pickle.load`` reads on. Given
    the stream, the probe then reads further (up to 16 MiB); a stream still parsing there is a
    pickle unless the opcode cut by the window declares more bytes than the stream holds.

    Args:
        head: the first bytes of the stream (64 KiB is plenty).
        reader: the whole stream, to read past ``head`` when the prefix is inconclusive.
        size: the stream's size (with ``reader``).

    Returns:
        True when the bytes should be scanned as a pickle.
    """
    found = _probe_prefix(head, size)
    if found is not None:
        return found
    if reader is None or size is None or size <= len(head):
        return False
    window = min(size, _IN_MEMORY_PICKLE)
    at = reader.tell()
    reader.seek(0)
    data = reader.read(window)
    reader.seek(at)
    found = _probe_prefix(data, size)
    if found is not None:
        return found
    return size > len(data)


def _probe_prefix(head: bytes, size: int | None = None) -> bool | None:
    """:func:`probe_pickle` on ``head`` alone; None when the bytes ran out while still parsing."""
    if not head or head[0] not in _OPCODE_BYTES:
        return False
    reader = io.BytesIO(head)
    interp = _Interpreter("", None, 0, probe=True)
    result = interp.run(reader)  # type: ignore[arg-type]
    if result.stopped:
        # "N." or "K\x01." would make any binary a pickle: ask for a few opcodes or a PROTO, or a
        # global (importing a module runs its code even when nothing is called).
        return result.opcodes >= 3 or head[0] == 0x80 or bool(interp.idents_ok and interp.good_globals)
    if interp.idents_ok and interp.good_globals and (interp.calls or interp.ops_after_global >= 3):
        # A payload that breaks right after its call still ran: the break does not make it text.
        return True
    if interp.idents_ok and (interp.strong_globals or (interp.good_globals and head[0] == 0x80)):
        # Resolving a global imports its module, which runs the module's code: a stream that gets
        # that far did work even if it breaks on the next byte. Text that merely starts with "c"
        # names no dangerous module, and a PROTO opcode is no accident.
        return True
    if head[0] == 0x80 and len(head) > 1 and head[1] <= 5 and result.opcodes >= 4 and result.end >= len(head) - 16:
        # Parsing ran past the prefix without a structural error: a long pickle.
        return True
    if (interp.cut and interp.idents_ok and _cut_argument_fits(head, interp.op_end, size)
            and _cut_line_plausible(head, interp.op_end)):
        return None
    return False


def _at_eof(reader: BinaryIO) -> bool:
    at = reader.tell()
    more = reader.read(1)
    reader.seek(at)
    return not more


# Opcodes whose argument is a byte count followed by that many bytes: code -> count width.
_COUNTED = {ord("T"): 4, ord("B"): 4, ord("X"): 4, 0x8E: 8, 0x8D: 8, 0x96: 8, ord("U"): 1, ord("C"): 1, 0x8C: 1}


_NUMBER_LINE = frozenset(b"0123456789+-.eEL \r")
_IDENT_LINE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_. ")


def _cut_line_plausible(data: bytes, at: int) -> bool:
    """Whether a line argument cut at the end of ``data`` reads like that opcode's argument.

    Pickles write numbers, quoted reprs, dotted names and text on these lines; a binary blob that
    happens to start with the opcode's byte and has no newline nearby holds NUL or other bytes.
    """
    if at >= len(data):
        return True
    op, line = data[at], data[at + 1 : at + 1 + 4096]
    if op in b"ILFgp":
        return set(line) <= _NUMBER_LINE
    if op in b"ci":
        return set(line) <= _IDENT_LINE | {0x0A}  # module line, newline, name line
    if op == ord("S"):
        return line[:1] in (b"'", b'"') and b"\x00" not in line
    if op in b"VP":
        return b"\x00" not in line
    return True


def _cut_argument_fits(data: bytes, at: int, size: int | None) -> bool:
    """Whether the opcode cut at ``at`` could be completed by a stream of ``size`` bytes."""
    if size is None or at >= len(data):
        return True
    width = _COUNTED.get(data[at])
    if width is None or at + 1 + width > len(data):
        return True
    n = int.from_bytes(data[at + 1 : at + 1 + width], "little", signed=width == 4 and data[at] == ord("T"))
    return 0 <= n <= size - (at + 1 + width)


_OPCODE_BYTES = frozenset(ord(op.code) for op in pickletools.opcodes)


def scan_pickle_bytes(data: bytes, *, loc: str = "", nested: NestedScanner | None = None,
                      depth: int = 0) -> list[Finding]:
    """Scan an in-memory pickle (one stream, then any pickles that follow it).

    Args:
        data: the pickle bytes.
        loc: location prefix for findings.
        nested: callback for nested serialized blobs; defaults to scanning them as pickles.
        depth: nesting depth.

    Returns:
        The findings.
    """
    return scan_pickle_file(io.BytesIO(data), len(data), loc=loc, nested=nested, depth=depth).findings


@dataclass(slots=True)
class PickleFileResult:
    """Outcome of scanning every pickle of a file.

    Attributes:
        format: ``pickle`` or ``pytorch-legacy``.
        findings: the findings.
        streams: how many pickles were interpreted.
    """

    format: str
    findings: list[Finding]
    streams: int


_MAX_PICKLE_DEPTH = 8


def scan_pickle_file(
    reader: BinaryIO,
    size: int,
    *,
    loc: str = "",
    nested: NestedScanner | None = None,
    depth: int = 0,
    start: int = 0,
    torchscript: bool = False,
) -> PickleFileResult:
    """Scan every pickle stored back to back in a stream.

    Legacy PyTorch files (``torch.save(..., _use_new_zipfile_serialization=False)``) hold five
    pickles (magic number, protocol, system info, the object, storage keys) and then raw storage
    bytes, which are not pickles: those are recognized by the magic number. Elsewhere, bytes after
    a pickle's ``STOP`` are scanned as further pickles when they parse as one, and are otherwise
    trailing data (unsafe when the pickle did work: a polyglot hides its second half there).

    Args:
        reader: seekable binary stream.
        size: the stream's size.
        loc: location prefix for findings.
        nested: callback for nested serialized blobs (bytes handed to ``pickle.loads``...).
        depth: nesting depth of pickles in pickles.
        start: offset of the first pickle.
        torchscript: the stream is a record of a TorchScript archive.

    Returns:
        The format decided and every finding.
    """
    if nested is None:
        nested = _default_nested(depth)
    findings: list[Finding] = []
    offset = start
    index = 0
    legacy = False
    any_work = False
    storages: list[Any] = []
    while offset < size:
        prefix = f"{loc}pickle #{index} " if index else loc
        res = interpret_pickle(reader, offset, size, loc=prefix, nested=nested, depth=depth, torchscript=torchscript)
        for f in res.findings:
            findings.append(_shift(f, offset, len(prefix)))
        any_work = any_work or res.did_work
        storages.extend(res.persistent_ids)
        index += 1
        if not res.stopped:
            break
        if index == 1 and res.value == TORCH_LEGACY_MAGIC:
            legacy = True
        offset += res.end
        if legacy and index == 5:
            findings.extend(_check_legacy_storage(reader, offset, size, res, storages, loc))
            break
        if offset >= size:
            break
        reader.seek(offset)
        head = reader.read(min(65536, size - offset))
        if probe_pickle(head, SliceReader(reader, offset, size - offset), size - offset):
            continue
        findings.append(
            Finding(
                "pickle.stream.trailing-data",
                Severity.UNSAFE if any_work else Severity.SUSPICIOUS,
                f"{loc}offset {offset}",
                f"{size - offset} bytes after the last pickle are not a pickle",
            )
        )
        break
    return PickleFileResult("pytorch-legacy" if legacy else "pickle", findings, index)


_ELEMENT_SIZE = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "QInt8": 1, "QUInt8": 1, "QInt32": 4,
    "QUInt4x2": 1, "QUInt2x4": 1,
}


def _check_legacy_storage(
    reader: BinaryIO, offset: int, size: int, keys: PickleStreamResult, storages: list[Any], loc: str
) -> list[Finding]:
    """Walk the raw storage section of a legacy torch file: per key, an int64 count then the bytes.

    The section must end exactly at the end of the file: bytes torch never reads can hide a
    second payload for another loader.
    """
    where = f"{loc}offset {offset}"
    if not isinstance(keys.value, list) or not all(isinstance(k, str) for k in keys.value):
        return [Finding("pytorch.legacy.layout", Severity.SUSPICIOUS, where,
                        "storage key list is not a list of strings")]
    elem: dict[str, int] = {}
    for pid in storages:
        if isinstance(pid, tuple) and len(pid) >= 3 and isinstance(pid[1], _Global) and isinstance(pid[2], str):
            kind = pid[1].name.removesuffix("Storage")
            if kind in _ELEMENT_SIZE:
                elem[pid[2]] = _ELEMENT_SIZE[kind]
            elif kind == "Untyped":
                # Dtypes without a typed storage class (float8, uint16...) are saved as bytes.
                elem[pid[2]] = 1
    pos = offset
    for key in keys.value:
        if key not in elem:
            return [Finding("pytorch.legacy.layout", Severity.SUSPICIOUS, where,
                            f"storage {key!r} has no known element type")]
        reader.seek(pos)
        raw = reader.read(8)
        if len(raw) < 8:
            return [Finding("pytorch.legacy.layout", Severity.SUSPICIOUS, f"{loc}offset {pos}",
                            "storage section truncated")]
        pos += 8 + int.from_bytes(raw, "little") * elem[key]
    if pos != size:
        return [
            Finding(
                "pytorch.legacy.layout", Severity.SUSPICIOUS, f"{loc}offset {min(pos, size)}",
                f"storage section ends at {pos}, file at {size}",
            )
        ]
    return []


def _shift(f: Finding, base: int, skip: int) -> Finding:
    """Make a stream-relative offset file-relative (only past the location prefix)."""
    if not base:
        return f
    head, tail = f.location[:skip], f.location[skip:]
    tail = re.sub(r"offset (\d+)", lambda m: f"offset {int(m.group(1)) + base}", tail, count=1)
    return Finding(f.rule_id, f.severity, head + tail, f.message)


def _default_nested(depth: int) -> NestedScanner:
    def scan(loc: str, data: bytes) -> list[Finding]:
        if depth >= _MAX_PICKLE_DEPTH:
            return [Finding("pickle.nested.too-deep", Severity.UNSAFE, loc.rstrip(": "), "pickles nested too deep")]
        if not probe_pickle(data[:65536]):
            return [
                Finding("pickle.nested.opaque", Severity.UNSAFE, loc.rstrip(": "),
                        "a loader is handed bytes that are not a readable pickle")
            ]
        return scan_pickle_bytes(data, loc=loc, depth=depth + 1)

    return scan
