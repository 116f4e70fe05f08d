"""The pickle allow-list against callables that execute code, import, or touch files, processes or the network.

None of them may be allowed: a pickle that resolves one and calls it is never ``safe``, whether it names the
callable with ``GLOBAL`` (protocol 0) or ``STACK_GLOBAL`` (protocol 4), and whatever the file is called.
"""

from __future__ import annotations

import io

import pytest

from registry.scanning import Verdict, scan_stream
from registry.scanning.pickle_scan import ALLOWED_GLOBALS, SCANNED_LOADERS, classify_global

_BY_MODULE = {
    # code execution and compilation
    "builtins": "exec eval compile __import__ getattr setattr delattr open input breakpoint globals locals vars "
                "type memoryview help",
    "__builtin__": "eval execfile file open getattr",
    "code": "InteractiveInterpreter InteractiveConsole interact compile_command",
    "codeop": "compile_command Compile",
    "types": "FunctionType CodeType ModuleType MethodType",
    "marshal": "loads load",
    "timeit": "timeit repeat Timer",
    "cProfile": "run runctx Profile",
    "profile": "run runctx",
    "trace": "Trace",
    "pdb": "run runeval runcall set_trace Pdb",
    "bdb": "Bdb",
    "doctest": "debug_script run_docstring_examples",
    "pydoc": "pipepager locate",
    "ctypes": "CDLL PyDLL cdll pythonapi",
    "_ctypes": "dlopen",
    "operator": "attrgetter methodcaller itemgetter getitem",
    "_operator": "attrgetter methodcaller",
    "functools": "partial reduce",
    "_functools": "reduce partial",
    "copy": "deepcopy",
    # imports
    "importlib": "import_module __import__ reload",
    "importlib.util": "spec_from_file_location module_from_spec",
    "importlib.machinery": "SourceFileLoader",
    "imp": "load_source load_module",
    "zipimport": "zipimporter",
    "pkgutil": "resolve_name get_importer",
    "runpy": "run_path run_module _run_code",
    "pip": "main",
    "pip._internal": "main",
    "sys": "exit settrace setprofile",
    # loaders of further serialized data
    "pickle": "loads load Unpickler",
    "_pickle": "loads load",
    "dill": "loads load",
    "cloudpickle": "loads",
    "joblib": "load",
    "shelve": "open",
    "yaml": "load unsafe_load full_load",
    "numpy": "load fromfile loadtxt",
    "numpy.testing._private.utils": "runstring",
    "torch": "load",
    "torch.hub": "load load_state_dict_from_url",
    "torch.jit": "load",
    "torch.serialization": "load",
    "torch.utils.cpp_extension": "load load_inline",
    "pandas": "read_pickle",
    # processes
    "os": "system popen execv execve execl execlp execvp spawnv spawnl spawnlp posix_spawn fork kill putenv",
    "posix": "system popen execv fork",
    "nt": "system",
    "subprocess": "Popen call check_call check_output run getoutput getstatusoutput",
    "_posixsubprocess": "fork_exec",
    "pty": "spawn fork",
    "multiprocessing": "Process",
    "multiprocessing.util": "spawnv_passfds",
    "concurrent.futures": "ProcessPoolExecutor",
    "asyncio": "create_subprocess_shell create_subprocess_exec",
    "asyncio.subprocess": "create_subprocess_shell",
    "threading": "Thread Timer",
    "_thread": "start_new_thread",
    "signal": "signal",
    "atexit": "register",
    "platform": "popen",
    "uuid": "_get_command_stdout",
    "webbrowser": "open open_new get",
    # files
    "io": "open FileIO",
    "_io": "open FileIO",
    "codecs": "open",
    "pathlib": "Path PosixPath",
    "shutil": "rmtree copy copyfile move chown make_archive unpack_archive",
    "tempfile": "mkstemp NamedTemporaryFile",
    "glob": "glob",
    "fileinput": "input",
    "linecache": "getline",
    "tarfile": "open",
    "zipfile": "ZipFile",
    "sqlite3": "connect",
    "dbm": "open",
    "logging.config": "fileConfig listen",
    "posixpath": "os.system",
    # network
    "socket": "socket create_connection create_server fromfd",
    "_socket": "socket",
    "ssl": "wrap_socket",
    "urllib.request": "urlopen urlretrieve",
    "urllib": "urlopen urlretrieve",
    "http.client": "HTTPConnection HTTPSConnection",
    "ftplib": "FTP",
    "smtplib": "SMTP",
    "telnetlib": "Telnet",
    "xmlrpc.client": "ServerProxy",
    "requests": "get post request",
    "requests.api": "request",
    "httpx": "get Client",
    "aiohttp": "ClientSession",
    "socketserver": "TCPServer",
}
DANGEROUS_CALLABLES: list[tuple[str, str]] = sorted(
    (module, name) for module, names in _BY_MODULE.items() for name in names.split()
)
"""Callables that run code, import, unpickle, spawn processes, or touch files or the network."""
MAY_BE_SUSPICIOUS = frozenset({("codecs", "open"), ("copy", "deepcopy")})
"""Outside every dangerous package today: not allowed (so never safe), but only ``suspicious``."""


def _short_unicode(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _protocol0_call(module: str, name: str) -> bytes:
    # GLOBAL module name; MARK; STRING 'x'; TUPLE; REDUCE; STOP
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n(S'x'\ntR."


def _protocol4_call(module: str, name: str) -> bytes:
    # PROTO 4; module; name; STACK_GLOBAL; 'x'; TUPLE1; REDUCE; STOP
    return b"\x80\x04" + _short_unicode(module) + _short_unicode(name) + b"\x93" + _short_unicode("x") + b"\x85R."


def test_the_list_is_large_enough_to_mean_something() -> None:
    assert len(DANGEROUS_CALLABLES) >= 150


@pytest.mark.parametrize(("module", "name"), DANGEROUS_CALLABLES)
def test_no_dangerous_callable_is_allowed(module: str, name: str) -> None:
    assert (module, name) not in ALLOWED_GLOBALS
    assert (module, name) not in SCANNED_LOADERS
    for fix_imports in (True, False):
        assert classify_global(module, name, fix_imports=fix_imports).severity is not None


@pytest.mark.parametrize(("module", "name"), DANGEROUS_CALLABLES)
def test_a_pickle_calling_a_dangerous_callable_is_never_safe(module: str, name: str) -> None:
    for build in (_protocol0_call, _protocol4_call):
        data = build(module, name)
        for path in ("model.pkl", "pytorch_model.bin", "notes.txt"):
            scan = scan_stream(path, io.BytesIO(data), len(data))
            assert scan.format == "pickle" and scan.verdict is not Verdict.SAFE, (build.__name__, path, scan.as_dict())
            assert scan.verdict is Verdict.UNSAFE or (module, name) in MAY_BE_SUSPICIOUS, (
                build.__name__, path, scan.as_dict())
