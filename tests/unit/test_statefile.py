"""Secret and state files: written whole under a unique temporary name, and made once when processes race.

The race is the one `make test` once lost: several processes starting together on a fresh data
directory, each making the console key (and the presign secret, and the signing key). They are real
processes, held at a start line until all are ready, so they reach the first write together.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from registry.statefile import create_exclusive, create_once, write_atomic

RACERS = 12
ROUNDS = 4

# A racer imports everything first, says "ready", then waits on its stdin: one byte per round starts
# every racer at once on a fresh data directory of that round.
_RACER = """
import json, sys
from registry.bootstrap import bootstrap, load_settings, prepare_embedded
from pathlib import Path
print("ready", flush=True)
for data in sys.argv[2:]:
    sys.stdin.read(1)
    if sys.argv[1] == "container":
        # The console key made by the container itself (a process with no prepare_embedded before it).
        container = bootstrap(load_settings(data_dir=data, database_url="sqlite://"))
        print(json.dumps({"console": container.console_key.mac("x", "y")}), flush=True)
    else:
        settings = load_settings(data_dir=data)
        prepare_embedded(settings)
        print(json.dumps({"presign": settings.presign_secret.get_secret_value(),
                          "console": settings.console_key.get_secret_value(),
                          "signing": Path(settings.signing_key_file).read_text()}), flush=True)
"""


def _race(tmp_path: Path, how: str) -> list[list[dict]]:
    """Each round's values, one per racer; no racer may fail or leave a temporary file behind."""
    dirs = [tmp_path / f"data-{i}" for i in range(ROUNDS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, how, *map(str, dirs)], env=env, bufsize=0, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for _ in range(RACERS)]
    try:
        for r in racers:
            assert r.stdout.readline().strip() == "ready", r.stderr.read()
        rounds = []
        for data in dirs:
            for r in racers:
                r.stdin.write("g")
            values = []
            for r in racers:
                line = r.stdout.readline()
                assert line, f"a first start failed:\n{r.stderr.read()[-2000:]}"
                values.append(json.loads(line))
            leftovers = [p.name for p in data.rglob("*") if p.name.endswith(".tmp")]
            assert not leftovers, leftovers
            rounds.append(values)
    finally:
        for r in racers:
            r.kill()
            r.wait()
    return rounds


def test_processes_starting_together_agree_on_every_secret(tmp_path):
    for i, values in enumerate(_race(tmp_path, "embedded")):
        assert all(v == values[0] for v in values), "first starts disagree on a secret"
        data = tmp_path / f"data-{i}"
        assert values[0]["console"] == (data / "console-key").read_text().strip()
        assert values[0]["presign"] == (data / "presign-secret").read_text().strip()


def test_containers_starting_together_agree_on_the_console_key(tmp_path):
    for values in _race(tmp_path, "container"):
        assert len({v["console"] for v in values}) == 1, "containers disagree on the console key"


def test_create_once_keeps_the_first_value_and_mode(tmp_path):
    path = tmp_path / "secret"
    assert create_once(path, b"first") == b"first"
    assert create_once(path, b"second") == b"first"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_create_exclusive_never_replaces(tmp_path):
    path = tmp_path / "key.pem"
    create_exclusive(path, b"one")
    try:
        create_exclusive(path, b"two")
    except FileExistsError:
        pass
    else:
        raise AssertionError("create_exclusive replaced an existing file")
    assert path.read_bytes() == b"one"
    assert [p.name for p in tmp_path.iterdir()] == ["key.pem"]


def test_write_atomic_replaces_with_the_mode_asked(tmp_path):
    path = tmp_path / "metrics.prom"
    write_atomic(path, b"old")
    write_atomic(path, b"new", mode=0o644)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.prom"]


# Where a file is published by a rename that is not a secret or state file: blobs (committed under their
# digest), a fetched release's directory, a swept LocalModelCache folder (renamed aside before it is
# deleted), and an adapter's signed config set aside inside a fetch's staging directory (published whole by
# assemble's rename). Every other replace goes through registry/statefile.py.
RENAMES_ALLOWED = {"registry/statefile.py", "registry/storage/local.py", "registry/node/cache.py",
                   "registry/node/assemble.py", "registry/node/sweep.py", "registry/node/adapters.py"}


def test_every_secret_and_state_file_is_written_by_statefile():
    import ast

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in sorted((root / "registry").rglob("*.py")):
        rel = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and (node.func.value.id, node.func.attr) in {("os", "replace"), ("os", "rename"),
                                                                  ("tempfile", "mkstemp")}
                    and rel not in RENAMES_ALLOWED):
                offenders.append(f"{rel}:{node.lineno}")
    assert offenders == []
