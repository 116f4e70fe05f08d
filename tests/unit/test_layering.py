"""The import rules that keep the house clear (architecture.md), checked on the source itself."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
    ("registry/client", {"sqlalchemy", "fastapi", "boto3", "api", "workers"}),
])
def test_package_does_not_import(package, forbidden):
    offenders = {path: names & forbidden for path, names in _imports(package).items() if names & forbidden}
    assert offenders == {}


def test_fetch_client_and_signing_load_without_sqlalchemy_or_fastapi():
    code = ("import sys, registry.client.http, registry.signing, registry.client.api, registry.client.cache, "
            "registry.client.trust, registry.client.download, registry.client.assemble, registry.client.fetch, "
            "registry.client.progress, registry.client.errors, registry.cli.fetch; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'fastapi', 'boto3')"
            " or m.startswith(('registry.db', 'registry.services', 'registry.storage'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


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
