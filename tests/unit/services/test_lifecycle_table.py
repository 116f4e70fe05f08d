"""Job kinds are one registry: every kind a service enqueues has exactly one worker handler."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from registry.jobs import JobKind
from tests.support import source_tree
from workers.handlers import build_handlers

ROOT = Path(__file__).resolve().parents[3]


def test_every_job_kind_has_a_handler_and_every_handler_a_kind() -> None:
    assert build_handlers().kinds() == sorted(k.value for k in JobKind)


def test_services_enqueue_only_through_enqueue_job() -> None:
    """A bare ``jobs.enqueue`` in a service would build its own kind and key: the helper is the one way."""
    offenders = []
    for path in sorted((ROOT / "registry" / "services").glob("*.py")):
        for node in ast.walk(source_tree.tree(path)):
            if isinstance(node, ast.Attribute) and node.attr == "enqueue":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


LIFECYCLE = "registry/services/lifecycle.py"
STAGE_TABLE = "registry.domain.stages"
DERIVED_LISTS = frozenset({"PIPELINE", "states_of", "states_after", "running_states", "failing_states",
                           "states_in_order"})
"""What other modules may import from the stage table: lists of states derived from it, never its rows."""


def _sources(root: Path) -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(root)), source_tree.tree(p)) for p in source_tree.python_files("registry", root)]


def _imports_version(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "registry.db.models" and
               any(a.name == "Version" for a in n.names) for n in ast.walk(tree))


def _mentions_version(node: ast.AST) -> bool:
    """Whether ``update(Version).where(...).values`` (or ``insert(Version)...``) names ``Version`` in its chain."""
    while isinstance(node, (ast.Call, ast.Attribute)):
        if isinstance(node, ast.Call):
            if any(isinstance(a, ast.Name) and a.id == "Version" for a in node.args):
                return True
            node = node.func
        else:
            node = node.value
    return isinstance(node, ast.Name) and node.id == "Version"


def _is_creation(call: ast.Call) -> bool:
    """``Version(..., state=VersionState.SUBMITTED.value)``: a version is born submitted."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "Version"):
        return False
    state = next(k.value for k in call.keywords if k.arg == "state")
    return ast.unparse(state) == "VersionState.SUBMITTED.value"


def state_writers(root: Path) -> list[str]:
    """Where registry/ writes a version's state outside lifecycle.py.

    ``x.state = ...`` (or ``+=``, annotated, ``setattr(x, "state", ...)``) in a module that imports
    ``Version``, and ``update(Version)...values(state=...)`` or ``Version(state=...)`` anywhere, creation aside.
    """
    found = []
    for path, tree in _sources(root):
        if path == LIFECYCLE:
            continue
        holds_versions = _imports_version(tree)
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            if holds_versions and any(isinstance(t, ast.Attribute) and t.attr == "state" for t in flat):
                found.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Call):
                if (holds_versions and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value == "state"):
                    found.append(f"{path}:{node.lineno}")
                elif any(k.arg == "state" for k in node.keywords) and _mentions_version(node) \
                        and not _is_creation(node):
                    found.append(f"{path}:{node.lineno}")
    return found


def stage_table_readers(root: Path) -> list[str]:
    """Where registry/ imports the stage table (``registry.domain.stages``) outside lifecycle.py, beyond the
    lists of states derived from it (``DERIVED_LISTS``)."""
    found = []
    for path, tree in _sources(root):
        if path in (LIFECYCLE, "registry/domain/stages.py"):
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == STAGE_TABLE:
                names = [f"{node.module}.{a.name}" for a in node.names if a.name not in DERIVED_LISTS]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.ImportFrom) and node.level and any(a.name == "stages" for a in node.names):
                names = [STAGE_TABLE] if path.startswith("registry/domain/") else []
            if any(n == STAGE_TABLE or n.startswith(STAGE_TABLE + ".") for n in names):
                found.append(f"{path}:{node.lineno}")
    return found


def test_only_lifecycle_writes_a_version_state() -> None:
    """``version.state`` is written in lifecycle.py alone (a version created ``submitted`` aside)."""
    assert state_writers(ROOT) == []


def test_only_lifecycle_reads_the_stage_table() -> None:
    """The stage table's rows and moves (``registry.domain.stages``) are known to lifecycle.py alone; other
    modules read only the lists of states derived from it."""
    assert stage_table_readers(ROOT) == []


PLANTED_WRITES = {
    "assign": "from registry.db.models import Version\n\ndef f(version):\n    version.state = 'approved'\n",
    "tuple": "from registry.db.models import Version\n\ndef f(v):\n    v.note, v.state = 1, 'failed'\n",
    "setattr": "from registry.db.models import Version\n\ndef f(v):\n    setattr(v, 'state', 'failed')\n",
    "update": "from sqlalchemy import update\nfrom registry.db.models import Version\n\n"
              "def f(s):\n    s.execute(update(Version).where(Version.id == 1).values(state='approved'))\n",
    "born approved": "from registry.db.models import Version\n\ndef f():\n    return Version(state='approved')\n",
}
PLANTED_READS = {
    "from module": "from registry.domain.stages import STAGES\n",
    "from package": "from registry.domain import stages\n",
    "import": "import registry.domain.stages\n",
    "in a function": "def f():\n    from registry.domain.stages import next_stage\n",
    "a row beside a derived list": "from registry.domain.stages import PIPELINE, STAGES\n",
}


def _plant(tmp_path: Path, source: str) -> Path:
    (tmp_path / "registry" / "services").mkdir(parents=True, exist_ok=True)
    (tmp_path / "registry" / "services" / "planted.py").write_text(source)
    return tmp_path


@pytest.mark.parametrize("source", PLANTED_WRITES.values(), ids=PLANTED_WRITES.keys())
def test_a_planted_state_write_is_found(tmp_path, source) -> None:
    assert state_writers(_plant(tmp_path, source)) == [f"registry/services/planted.py:{source.count(chr(10))}"]


@pytest.mark.parametrize("source", PLANTED_READS.values(), ids=PLANTED_READS.keys())
def test_a_planted_stage_table_reader_is_found(tmp_path, source) -> None:
    assert len(stage_table_readers(_plant(tmp_path, source))) == 1


def test_a_derived_list_is_no_stage_table_reader(tmp_path) -> None:
    source = "from registry.domain.stages import PIPELINE, running_states, states_after\n"
    assert stage_table_readers(_plant(tmp_path, source)) == []


def test_what_is_no_state_write_is_not_found(tmp_path) -> None:
    """A job's state, a version born submitted, and reading a state are none of a version's moves."""
    source = ("from registry.db.models import Job\n\ndef f(job):\n    job.state = 'dead'\n"
              "\ndef g(Version, VersionState):\n    return Version(state=VersionState.SUBMITTED.value)\n"
              "\ndef h(v):\n    return v.state == 'approved'\n")
    assert state_writers(_plant(tmp_path, source)) == []


def ports_lookups(root: Path) -> list[str]:
    """Where a service reaches a port other than through the ports it is passed: ``session.info`` or a
    clock of its own (``SystemClock()``)."""
    found = []
    for path, tree in _sources(root):
        if not path.startswith("registry/services/"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "info" and isinstance(node.value, ast.Name)
                    and "session" in node.value.id):
                found.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "SystemClock":
                found.append(f"{path}:{node.lineno}")
    return found


def test_services_take_their_ports_explicitly() -> None:
    assert ports_lookups(ROOT) == []


@pytest.mark.parametrize("source", [
    "def f(session, log):\n    log.info('a logger is no session')\n    return session.info.get('modelreg.clock')\n",
    "from registry.clock import SystemClock\n\ndef f(clock=None):\n    return clock or SystemClock()\n",
], ids=["session.info", "fallback clock"])
def test_a_planted_ports_lookup_is_found(tmp_path, source) -> None:
    assert len(ports_lookups(_plant(tmp_path, source))) == 1
