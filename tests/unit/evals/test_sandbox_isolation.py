"""A hostile ``command`` suite in the real runner subprocess: what it may see, write and reach (issue 18).

The suite is a script among the model's files (the only place a suite's own code can come from, besides
what Python has installed). It tries the data directory's secrets (presign secret, console key, signing
key, admin token), another tenant's blob, the worker's home and source tree, writes outside its
directory, and connects to a server standing in for the API on loopback and on this machine's other
address. Each attempt is reported as a metric (1: it worked), so the test sees exactly which got through.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from registry.bootstrap import prepare_embedded
from registry.evals import sandbox
from registry.settings import Settings
from registry.storage.local import LocalBlobStore

HOSTILE = textwrap.dedent("""
    import json, os, socket, sys
    targets = json.load(open(os.path.join(os.path.dirname(__file__), "targets.json")))
    got = {}
    for name, path in targets["read"].items():
        try:
            got["read." + name] = int(bool(open(path, "rb").read()))
        except OSError as e:
            got["read." + name] = 0
            print(f"read {name}: {e.strerror}")
    for name, path in targets["list"].items():
        try:
            found = set(os.listdir(path)) & set(targets["expect_hidden"][name])
            got["list." + name] = int(bool(found))
        except OSError as e:
            got["list." + name] = 0
            print(f"list {name}: {e.strerror}")
    for name, path in targets["write"].items():
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write("planted")
            got["write." + name] = 1
        except OSError as e:
            got["write." + name] = 0
            print(f"write {name}: {e.strerror}")
    for name, (host, port) in targets["connect"].items():
        try:
            socket.create_connection((host, port), timeout=3).close()
            got["connect." + name] = 1
        except OSError as e:
            got["connect." + name] = 0
            print(f"connect {name}: {e.strerror or e}")
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for name, path in targets["remount"].items():
        # MS_REMOUNT | MS_BIND without MS_RDONLY: make a read-only view writable; then unmount it.
        remounted = libc.mount(None, path.encode(), None, 32 | 4096, None) == 0
        unmounted = libc.umount2(path.encode(), 2) == 0
        got["remount." + name] = int(remounted or unmounted)
        if not (remounted or unmounted):
            print(f"remount {name}: {os.strerror(ctypes.get_errno())}")
    json.dump({"metrics": got}, open(sys.argv[1], "w"))
""")


def definition(runner: str = "command", **settings) -> dict:
    return {"suite": "t", "runner": runner, "runner_version": "x", "settings": settings, "timeout_s": 120,
            "memory_mb": 4096, "evalsets": []}


def _other_address() -> str | None:
    """An IPv4 address of this machine that is not loopback."""
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s, 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
        return socket.inet_ntoa(packed[20:24])
    return None


@pytest.fixture
def api_standin():
    """A listening TCP server on every address (as the API is), counting the connections it accepts."""
    server = socket.create_server(("0.0.0.0", 0))
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


@pytest.fixture
def home_secret():
    """A file planted in the worker's real home (``$HOME`` is the runner's work directory, not this)."""
    path = Path.home() / f".modelreg-sandbox-test-{uuid.uuid4().hex}"
    path.write_text("the worker's own secret")
    yield path
    path.unlink()


def test_a_hostile_command_suite_sees_no_secrets_writes_nowhere_and_reaches_nothing(
        tmp_path, api_standin, home_secret):
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir)
    prepare_embedded(settings)
    (data_dir / "admin-token").write_text("mr_admin_token")
    other_blob = LocalBlobStore(data_dir / "blobs", "secret").put(io.BytesIO(b"another tenant's weights")).digest
    blob_path = next(p for p in (data_dir / "blobs").rglob(other_blob) if p.is_file())
    source_tree = Path(__file__).resolve().parents[3]
    port, accepted = api_standin
    other = _other_address()
    in_root = Path(f"/planted-by-a-suite-{uuid.uuid4().hex}")

    model = tmp_path / "model"
    model.mkdir()
    (model / "evaluate.py").write_text(HOSTILE)
    connect = {"api_loopback": ["127.0.0.1", port]}
    if other:
        connect["api_other_address"] = [other, port]
    targets = {
        "read": {"presign_secret": str(data_dir / "presign-secret"), "console_key": str(data_dir / "console-key"),
                 "signing_key": str(data_dir / "keys" / "signing-key.pem"),
                 "admin_token": str(data_dir / "admin-token"), "other_tenant_blob": str(blob_path),
                 "worker_home": str(home_secret), "source_tree": str(source_tree / "pyproject.toml")},
        "list": {"data_dir": str(data_dir), "worker_home": str(Path.home()), "tmp": "/tmp"},
        "expect_hidden": {"data_dir": sorted(os.listdir(data_dir)), "worker_home": [home_secret.name],
                          # What else the worker's /tmp holds, less the ways down to what the runner is shown
                          # (this test's directory; the checkout and Python, when they live under /tmp).
                          "tmp": sorted(set(os.listdir("/tmp")) - {
                              p.parts[2] for p in (tmp_path, source_tree, Path(sys.prefix), Path(sys.base_prefix))
                              if len(p.parts) > 2 and p.parts[1] == "tmp"})},
        "write": {"next_to_the_model": str(tmp_path / "planted"), "model_dir": str(model / "planted"),
                  "data_dir": str(data_dir / "planted"), "root": str(in_root)},
        "connect": connect,
        "remount": {"model_dir": str(model), "python": sys.base_prefix},
    }
    (model / "targets.json").write_text(json.dumps(targets))

    try:
        outcome = sandbox.run_runner(definition(command=["{python}", "{model_dir}/evaluate.py", "{output}"]),
                                     model, [], facts=None, work_root=tmp_path)
        planted_in_root = in_root.exists()
    finally:
        in_root.unlink(missing_ok=True)

    assert outcome.status == "completed", outcome.log
    metrics = outcome.result["metrics"]
    assert set(metrics) == {f"{kind}.{name}" for kind in ("read", "list", "write", "connect", "remount")
                            for name in targets[kind]}
    got_through = {name for name, value in metrics.items() if value}
    # A write under /tmp lands in the runner's private /tmp (gone with it); out here nothing appears.
    assert got_through <= {"write.next_to_the_model", "write.data_dir"}, outcome.log.decode()
    assert outcome.isolated is True
    assert not (tmp_path / "planted").exists() and not (model / "planted").exists()
    assert not (data_dir / "planted").exists() and not planted_in_root
    assert accepted == []
    log = outcome.log.decode()
    assert "read presign_secret: No such file or directory" in log
    assert "connect api_loopback: Connection refused" in log
    assert "remount python: Operation not permitted" in log
    if other:
        assert "connect api_other_address: Network is unreachable" in log


def test_the_work_directory_is_writable_and_the_model_read_only(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "write.py").write_text(textwrap.dedent("""
        import json, os, sys
        def tries(path):
            try:
                open(path, "w").write("x")
                return 1
            except OSError:
                return 0
        work = os.path.dirname(sys.argv[2])
        json.dump({"metrics": {"model": tries(os.path.join(sys.argv[1], "planted")),
                               "work": tries(os.path.join(work, "scratch")),
                               "tmp": tries("/tmp/scratch")}}, open(sys.argv[2], "w"))
    """))
    outcome = sandbox.run_runner(definition(command=["{python}", "{model_dir}/write.py", "{model_dir}", "{output}"]),
                                 model, [], facts=None, work_root=tmp_path)
    assert outcome.status == "completed", outcome.log
    assert outcome.result["metrics"] == {"model": 0.0, "work": 1.0, "tmp": 1.0}
    assert not (model / "planted").exists()


REFUSING = textwrap.dedent("""
    # The kernel refuses every new namespace below this one: a worker where unshare(2) is not allowed.
    for kind in ("user", "mnt", "net"):
        open(f"/proc/sys/user/max_{kind}_namespaces", "w").write("0")
    import json, sys
    from pathlib import Path
    from registry.evals import sandbox
    model, work, allow = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "allow"
    definition = {"suite": "t", "runner": "command", "runner_version": "x", "timeout_s": 60, "memory_mb": 4096,
                  "evalsets": [], "settings": {"command": ["{python}", "-c",
                  "import json, sys; json.dump({'ran': 1}, open(sys.argv[1], 'w'))", "{output}"]}}
    outcome = sandbox.run_runner(definition, model, [], facts=None, work_root=work,
                                 isolation=sandbox.Isolation(allow_unisolated=allow))
    print(json.dumps({"status": outcome.status, "reason": outcome.reason, "error": outcome.error,
                      "isolated": outcome.isolated, "metrics": outcome.result.get("metrics")}))
""")


@pytest.mark.parametrize("allow", [False, True])
def test_where_namespaces_are_refused_the_eval_fails_closed_unless_allowed(tmp_path, allow):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is needed to make a worker whose namespaces are refused")
    model = tmp_path / "model"
    model.mkdir()
    script = tmp_path / "refusing.py"
    script.write_text(REFUSING)
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, str(script), str(model), str(tmp_path),
         "allow" if allow else "deny"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.splitlines()[-1])
    if allow:
        assert (doc["status"], doc["isolated"], doc["metrics"]) == ("completed", False, {"ran": 1.0})
    else:
        assert (doc["status"], doc["reason"], doc["isolated"]) == ("failed", "unisolated", False)
        assert doc["error"].startswith("the runner cannot be isolated: new user, mount and network namespaces: ")
