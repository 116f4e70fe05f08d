"""A serving node against a stand-in manifest endpoint in front of a real registry (``manifest_standin``):
one approved version, releases (and trust roots) the test signs with its own keys, and the node's
``modelreg`` command lines. Used by the fetch tests whose stand-in server is the attacker
(``tests/integration/fetch_client/``, whose ``node`` fixture builds a ``Node``), with the seeded worlds they
start from and what they read off a fetch: its summary, a directory's files, a refusal's one line."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import subprocess
from pathlib import Path

from registry.services import loaders as version_service
from registry.signing.keys import SigningKey
from registry.signing.release import release_payload, sign_release
from registry.signing.trust_root import root_document, sign_root
from tests.support.manifest_standin import Standin
from tests.support.registry import make_admin
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG
from tests.support.tiny_model import tiny_model_files

WORKTREE = Path(__file__).resolve().parents[2]
BIG = bytes((i * 7919 + i // 1000) % 251 for i in range(3 * 1024 * 1024 + 12345))
PART = "1M"
NOW = dt.datetime.now(dt.timezone.utc)
LATER = NOW + dt.timedelta(days=365)


def build_node_world(container, root, files=None):
    """acme/tiny version 1 approved (a seeded world: built once per worker and database)."""
    admin = make_admin(container, "acme")
    files = files or {**tiny_model_files(1), "big.txt": BIG}
    awaiting_version(container, admin, root / "src", "acme", "tiny", files=files)
    approve_standin(container, "acme", "tiny", 1)


def build_twin_world(container, root):
    """A version two of whose files hold the same bytes (one blob, two files in DEST)."""
    build_node_world(container, root, {**tiny_model_files(1), "big.txt": BIG, "copy/big-again.txt": BIG})


class Node:
    """One registry, one approved version, a stand-in manifest endpoint and a node's files."""

    def __init__(self, container, tmp_path: Path, standin: Standin, signing_key_pem: str) -> None:
        self.container, self.tmp, self.standin = container, tmp_path, standin
        self.key = SigningKey.generate()
        self.registry_key = SigningKey.from_pem(signing_key_pem)
        self.root_file = tmp_path / "trust-root.json"
        self.root_file.write_text(json.dumps(sign_root(root_document(1, [self.key.public_key], 1, LATER), [self.key])))
        standin.roots[1] = json.loads(self.root_file.read_text())
        self.cache = tmp_path / "node-cache"
        self.use_cache = True  # False: MODELREG_CACHE unset, as KServe's storage initializer runs it
        with container.session_factory() as session:
            model = version_service.load_model_unchecked(session, "acme", "tiny")
            version = version_service.load_version_unchecked(session, model, 1)
            self.files = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in version.files]
            self.bundle = version.manifest_bundle
            self.revision = version.resolved_revision or "0" * 40
        statement = base64.b64decode(self.bundle["dsseEnvelope"]["payload"])
        self.statement_digest = hashlib.sha256(statement).hexdigest()

    def blob_file(self, digest: str) -> Path:
        return self.tmp / "blobs" / "blobs" / "sha256" / digest[:2] / digest

    def release(self, *, ref: str = "prod", serial: int = 1, expires: dt.datetime | None = None,
                files: list[dict] | None = None, keys: list[SigningKey] | None = None,
                root_version: int = 1, version: int = 1, log: dict | None = None, unit: dict | None = None) -> dict:
        """Sign and serve a release; ``unit`` (``{"components", "parts"}``) makes it carry its release unit."""
        payload = release_payload(
            model="acme/tiny", ref=ref, tenant="acme", version=version,
            source={"kind": "local", "repo": "tiny", "revision": self.revision},
            files=files if files is not None else self.files, license="apache-2.0", facts=None,
            statement_digest=self.statement_digest, approval_digest="d" * 64, serial=serial,
            issued_at=NOW - dt.timedelta(minutes=1), expires_at=expires or NOW + dt.timedelta(hours=1),
            **(unit or {}))
        envelope = sign_release(payload, keys or [self.key])
        store = self.container.blob_store
        transport = {f["path"]: self.standin.transport_url(store.presign_get(f["sha256"], dt.timedelta(hours=1)))
                     for f in self.files}
        body = {"envelope": envelope, "transport": transport, "signature_bundle": self.bundle,
                "trust_root_version": root_version}
        if log is not None:
            body["log"] = log
        self.standin.manifests[("acme", "tiny", ref)] = body
        return body

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "MODELREG_CACHE"}
        env.update(PYTHONPATH=str(WORKTREE), MODELREG_URL=self.standin.url, MODELREG_TOKEN="node-token")
        if self.use_cache:
            env["MODELREG_CACHE"] = str(self.cache)
        else:
            # The default cache of old would land here: it must stay empty.
            env.update(HOME=str(self.tmp / "home"), XDG_CACHE_HOME=str(self.tmp / "home" / ".cache"))
        return env

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=timeout, env=self.env())

    def fetch(self, dest: Path, ref: str = "acme/tiny@prod", *extra: str) -> subprocess.CompletedProcess:
        return self.cli("fetch", ref, str(dest), "--trust-root", str(self.root_file), "--part-size", PART,
                        "--parallel", "4", "--json", *extra)

    def popen_fetch(self, dest: Path) -> subprocess.Popen:
        return subprocess.Popen([MODELREG, "fetch", "acme/tiny@prod", str(dest), "--trust-root", str(self.root_file),
                                 "--part-size", PART, "--parallel", "4", "--json"], env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def summary_of(result: subprocess.CompletedProcess) -> dict:
    """The last ``summary`` event of a ``--json`` run."""
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return next(line for line in reversed(lines) if line["event"] == "summary")


def tree(path: Path) -> dict[str, bytes] | None:
    """Every file under ``path`` with its bytes; None when ``path`` does not exist."""
    if not path.exists():
        return None
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def assert_refused(result: subprocess.CompletedProcess, code: int, kind: str) -> None:
    """The run exited with ``code`` and said one stderr line, ``error: KIND: ...``."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {kind}: "), result.stderr


def bytes_requested(gets: list[dict], sizes: dict[str, int]) -> dict[str, int]:
    """How many bytes of each blob the stand-in's blob GETs asked for (a GET without a range: all of it)."""
    total: dict[str, int] = {}
    for g in gets:
        digest = g["path"].rsplit("/", 1)[-1]
        if g["range"]:
            first, last = g["range"].removeprefix("bytes=").split("-")
            total[digest] = total.get(digest, 0) + int(last) - int(first) + 1
        else:
            total[digest] = total.get(digest, 0) + sizes[digest]
    return total


def revoke(node: Node) -> None:
    """The registry answers the release of acme/tiny@prod: revoked."""
    node.standin.problems[("acme", "tiny", "prod")] = (409, {"code": "revoked", "detail": "acme/tiny@1 was revoked"})


def cached_blob(node: Node, digest: str) -> Path:
    return node.cache / "tenants" / "acme" / "blobs" / "sha256" / digest[:2] / digest


def flip(path: Path, offset: int) -> None:
    """What a root process does to a file it can reach: mode bits do not stop it."""
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def big_file(node: Node) -> dict:
    """The release's entry for big.txt, the file that comes in ranges."""
    return next(f for f in node.files if f["path"] == "big.txt")


def refusal_leaves_dest_as_it_was(node: Node, attack, code: int, kind: str, dest_kind: str, cache: str) -> None:
    """After ``attack(node)``, a fetch into an absent or empty DEST, with or without the node cache, is refused
    with ``code`` and ``kind``; DEST is as it was and neither a root nor a serial was persisted."""
    dest = node.tmp / "mnt-models"
    if dest_kind == "empty":
        dest.mkdir()
    node.use_cache = cache == "cache"
    attack(node)
    assert_refused(node.fetch(dest), code, kind)
    assert tree(dest) == (None if dest_kind == "absent" else {})
    if dest_kind == "empty":
        assert list(dest.iterdir()) == []
    # Neither a root nor a serial was persisted for a fetch that failed.
    assert not (node.cache / "trust" / "roots").exists() and not (node.cache / "trust" / "serials.json").exists()
