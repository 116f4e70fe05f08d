"""A serving node against a stand-in manifest endpoint in front of a real registry (``manifest_standin``):
one approved version, releases (and trust roots) the test signs with its own keys, and the node's
``modelreg`` command lines. Used by the fetch tests whose stand-in server is the attacker."""

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
from tests.support.server import MODELREG

WORKTREE = Path(__file__).resolve().parents[2]
BIG = bytes((i * 7919 + i // 1000) % 251 for i in range(3 * 1024 * 1024 + 12345))
PART = "1M"
NOW = dt.datetime.now(dt.timezone.utc)
LATER = NOW + dt.timedelta(days=365)


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
                root_version: int = 1, version: int = 1, log: dict | None = None) -> dict:
        payload = release_payload(
            model="acme/tiny", ref=ref, tenant="acme", version=version,
            source={"kind": "local", "repo": "tiny", "revision": self.revision},
            files=files if files is not None else self.files, license="apache-2.0", facts=None,
            statement_digest=self.statement_digest, approval_digest="d" * 64, serial=serial,
            issued_at=NOW - dt.timedelta(minutes=1), expires_at=expires or NOW + dt.timedelta(hours=1))
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
