"""The import rules that keep the house clear (architecture.md), checked on the source itself."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in source_tree.python_files(package):
        names: set[str] = set()
        for node in ast.walk(source_tree.tree(path)):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("package,forbidden", [
    ("registry", {"api", "workers"}),
    ("api", {"workers"}),
    ("workers", {"api"}),
    ("registry/domain", {"sqlalchemy", "fastapi", "boto3", "httpx"}),
    ("registry/storage", {"sqlalchemy", "fastapi"}),
    ("registry/sources", {"sqlalchemy", "fastapi"}),
    ("registry/scanning", {"sqlalchemy", "fastapi"}),
    ("registry/evals", {"sqlalchemy", "fastapi", "boto3"}),
    ("registry/templating", {"sqlalchemy", "fastapi", "boto3", "httpx", "transformers", "torch"}),
    ("registry/client", {"sqlalchemy", "fastapi", "boto3", "api", "workers"}),
    ("registry/node", {"sqlalchemy", "fastapi", "boto3", "api", "workers"}),
    ("registry/tlog", {"sqlalchemy", "fastapi", "boto3", "httpx", "pydantic", "api", "workers"}),
])
def test_package_does_not_import(package, forbidden):
    offenders = {path: names & forbidden for path, names in _imports(package).items() if names & forbidden}
    assert offenders == {}


SERVER_SIDE = ("registry.db", "registry.services", "registry.storage", "registry.console", "registry.jobs",
               "registry.bootstrap", "registry.scanning", "registry.sources", "registry.evals")


def _registry_imports(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each file of ``package`` -> the ``registry.*`` modules it imports (anywhere in it, functions included)."""
    found: dict[str, set[str]] = {}
    for path in source_tree.python_files(package, root):
        names: set[str] = set()
        for node in ast.walk(source_tree.tree(path)):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names if alias.name.startswith("registry."))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("registry"):
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(root))] = names
    return found


def _importing(package: str, prefixes: tuple[str, ...], root: Path = ROOT) -> dict[str, list[str]]:
    return {path: sorted(n for n in names if n.startswith(prefixes))
            for path, names in _registry_imports(package, root).items() if any(n.startswith(prefixes) for n in names)}


def test_the_node_and_the_client_hold_no_server_code_and_the_client_no_node_code():
    """registry/node (the node's programs) may use registry/client (talking to a registry); never the
    reverse, and neither reaches the server's packages."""
    assert _importing("registry/node", tuple(p + "." for p in SERVER_SIDE)) == {}
    assert _importing("registry/client", tuple(p + "." for p in SERVER_SIDE) + ("registry.node.",)) == {}


def test_templating_reaches_only_the_domain_and_the_static_template_check():
    """registry/templating is pure logic over template text: services, the database and storage stay out."""
    allowed = ("registry.domain.", "registry.scanning.jinja_check.", "registry.scanning.model.", "registry.templating.")
    outside = {path: sorted(n for n in names if not n.startswith(allowed))
               for path, names in _registry_imports("registry/templating").items()}
    assert {path: names for path, names in outside.items() if names} == {}


RELEASE_VERIFIERS = {"verify_release", "verify_manifest", "verify_release_log"}
"""The calls that decide whether a release is accepted; only the opener makes them."""
VERIFIER_HOMES = {"registry/node/opener.py", "registry/signing/release.py", "registry/node/log_proofs.py"}


def verifier_calls(root: Path = ROOT) -> list[str]:
    """``path:line name`` of each call of a release verifier outside the opener (and their own modules)."""
    found = []
    for package in ("registry", "api", "workers"):
        for path in source_tree.python_files(package, root):
            relative = str(path.relative_to(root))
            if relative in VERIFIER_HOMES:
                continue
            for node in ast.walk(source_tree.tree(path)):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = (func.id if isinstance(func, ast.Name)
                            else func.attr if isinstance(func, ast.Attribute) else "")
                    if name in RELEASE_VERIFIERS:
                        found.append(f"{relative}:{node.lineno} {name}")
    return found


def test_only_the_opener_verifies_a_release():
    """Every node program accepts a release through registry/node/opener.py (``ReleaseOpener``); a re-check
    of a recorded release goes through its ``verify_recorded``. No other module calls a verifier."""
    assert verifier_calls() == []


def test_the_verifier_check_finds_a_planted_bypass(tmp_path):
    for package in ("registry/node", "api", "workers"):
        (tmp_path / package).mkdir(parents=True)
    (tmp_path / "registry" / "node" / "opener.py").write_text("def f(e, r):\n    return verify_release(e, r)\n")
    (tmp_path / "registry" / "node" / "serve_s3.py").write_text(
        "from registry.node import opener\n\ndef f(e, b):\n    return opener.verify_manifest(e, b)\n")
    assert verifier_calls(tmp_path) == ["registry/node/serve_s3.py:4 verify_manifest"]


def test_fetch_client_and_signing_load_without_sqlalchemy_or_fastapi():
    code = ("import sys, registry.client.http, registry.signing, registry.client.api, registry.node.cache, "
            "registry.node.trust, registry.node.download, registry.node.assemble, registry.node.fetch, "
            "registry.node.opener, registry.node.serve_s3, registry.node.sweep, registry.node.warm, "
            "registry.node.progress, registry.client.errors, registry.cli.fetch; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'fastapi', 'boto3')"
            " or m.startswith(('registry.db', 'registry.services', 'registry.storage'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cli_command_parses_its_options_without_pydantic():
    """typer 0.26 and later coerce each option through pydantic at every start (0.35 s of CPU a command:
    pyproject.toml pins typer below 0.26); a command against an unreachable registry must not load it."""
    code = ("import sys; from registry.cli import main; "
            "main(['whoami', '--url', 'http://127.0.0.1:1']); print('pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False", out.stderr[-500:]


def test_the_eval_runner_subprocess_loads_no_database_or_web_code():
    """What ``python -m registry.evals.child`` imports before any runner: the runner sees no registry internals."""
    code = ("import sys, registry.evals.child, registry.evals.cases, registry.evals.runners, registry.evals.scoring, "
            "registry.evals.runners.sanity, registry.evals.runners.command, registry.evals.runners.openai; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'fastapi', 'boto3', 'api', 'workers')"
            " or m.startswith(('registry.db', 'registry.services', 'registry.storage'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_the_cli_builds_no_api_paths():
    """Every `modelreg` command calls the registry through registry/client/api.py, the one typed API client."""
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "registry" / "cli").glob("*.py") if "/v1/" in p.read_text()]
    assert offenders == []


# --- import circles ------------------------------------------------------------------------------


def import_graph(root: Path, package: str = "registry") -> dict[str, dict[str, list[str]]]:
    """Module -> the modules of ``package`` it imports -> where (``path:line``, ``in a function`` marked).

    Module-level imports and imports inside functions count alike: a circle closed at call time is a
    circle all the same. ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``.
    """
    modules: dict[str, tuple[Path, bool]] = {}
    for path in source_tree.python_files(package, root):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, list[str]]] = {}
    for name, (path, is_package) in modules.items():
        edges: dict[str, list[str]] = {}
        tree = source_tree.tree(path)
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
            for target in targets:
                found = owner(target)
                if found is not None and found != name:
                    where = f"{path.relative_to(root)}:{node.lineno}" + (" (in a function)" if id(node) in in_function
                                                                          else "")
                    edges.setdefault(found, []).append(where)
        graph[name] = edges
    return graph


def import_circles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def _describe(graph: dict[str, dict[str, list[str]]], circle: list[str]) -> list[str]:
    return [f"{a} -> {b} at {', '.join(sorted(set(graph[a][b])))}" for a in circle for b in sorted(graph[a])
            if b in circle]


def test_no_import_circle_inside_registry():
    """No module of registry/ reaches itself through imports, at module level or inside functions."""
    graph = import_graph(ROOT)
    assert [_describe(graph, c) for c in import_circles(graph)] == []


def test_the_circle_check_sees_a_circle_closed_inside_a_function(tmp_path):
    """A planted circle (one edge at module level, one hidden in a function) is found; a chain is not."""
    package = tmp_path / "registry"
    (package / "services").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "services" / "__init__.py").write_text("")
    (package / "services" / "a.py").write_text("from registry.services import b\n")
    (package / "services" / "b.py").write_text("def f():\n    from registry.services.c import g\n")
    (package / "services" / "c.py").write_text("from . import a\n\ndef g():\n    pass\n")
    (package / "services" / "d.py").write_text("from registry.services import a\n")
    graph = import_graph(tmp_path)
    assert import_circles(graph) == [["registry.services.a", "registry.services.b", "registry.services.c"]]
    assert any("(in a function)" in line for line in _describe(graph, import_circles(graph)[0]))
    (package / "services" / "c.py").write_text("def g():\n    pass\n")
    assert import_circles(import_graph(tmp_path)) == []


CHANNEL_MODULES = re.compile(r"\Aregistry\.(services\.(oci\w*|hf|manifests|downloads)|client(\..*)?)\Z")
"""The distribution channels' modules (/v2, /hf, release manifests, their downloads, serve-s3 in the client)."""


def _channels_reached(graph: dict[str, dict[str, list[str]]], start: str) -> list[str]:
    """The channel modules ``start`` reaches through imports (module level or in functions), with the path."""
    seen, queue, reached = {start: [start]}, [start], []
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, {})):
            if child not in seen:
                seen[child] = [*seen[node], child]
                queue.append(child)
                if CHANNEL_MODULES.match(child):
                    reached.append(" -> ".join(seen[child]))
    return reached


def test_the_lifecycle_imports_no_distribution_channel():
    """Approval's reactions come through the ports (registered by bootstrap): the lifecycle reaches no channel."""
    assert _channels_reached(import_graph(ROOT), "registry.services.lifecycle") == []


def test_the_log_core_loads_only_the_standard_library_cryptography_and_the_error_hierarchy():
    """registry/tlog is shared by the log worker, the API, fetch and the witness: nothing else comes with it
    (a ``None`` in ``sys.modules`` marks a module absent, as ``registry/__init__.py`` does for httpx's CLI)."""
    code = ("import sys; before = set(sys.modules); import registry.tlog.merkle, registry.tlog.note, "
            "registry.tlog.checkpoint, registry.tlog.tiles; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before if sys.modules[m] is not None}"
            " - set(sys.stdlib_module_names)"
            " - {'_cffi_backend', '_openssl'}; "
            "reg = sorted(m for m in sys.modules if m.startswith('registry.') and not m.startswith('registry.tlog')); "
            "print(sorted(new), reg)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "['cryptography', 'registry'] ['registry.domain', 'registry.domain.errors']"
