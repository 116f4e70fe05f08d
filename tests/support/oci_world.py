"""The world of the OCI endpoint tests: two tenants' models through the real pipeline, served by uvicorn.

Built once per worker and database and copied for each test (``tests/support/worlds.py``): a module that
asks for ``oci_world`` marks itself ``pytest.mark.seeded(builder=build_world)``. ``oci_store_world`` (the
same world on each blob store, SeaweedFS included) builds it afresh in the test's own store.

Tenant ``acme`` holds ``llm``: version 1 approved and promoted to ``prod``, version 2 approved and then
revoked, version 3 awaiting approval. Tenant ``other`` holds ``secret``, approved. ``node`` is a token of a
serving node of acme, ``outsider`` one of other's. Shared by ``tests/integration/test_oci_endpoint.py``
(oras-py and plain HTTP) and ``tests/integration/test_oci_skopeo.py`` (skopeo, docker-registry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import oras.client

from api.app import create_app
from registry.auth import AuthenticatedPrincipal
from registry.bootstrap import Container
from registry.domain.aliases import make_target
from registry.services import aliases, revocations
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

TENANT, NAME = "acme", "llm"
REPO = f"{TENANT}/{NAME}"
EXTRA = {"README.md": b"# tiny\n", "modeling_tiny.py": b"print('tiny')\n", "extra/deep/notes.txt": b"notes\n"}
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass
class World:
    container: Container
    admin: AuthenticatedPrincipal
    url: str
    node: str
    """A token of ``node-1``, a serving node of acme."""
    outsider: str
    """A token of ``outsider``, a serving node of other only."""
    files: dict[str, bytes]
    other_files: dict[str, bytes]

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"} if token else {},
                            timeout=30)

    def pull_token(self, token: str, *scopes: str) -> str:
        r = httpx.get(f"{self.url}/v2/token", params=[("service", self.host), *(("scope", s) for s in scopes)],
                      auth=("anyone", token), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["token"]


def build_world(container: Container, tmp_path: Path):
    admin = make_admin(container, TENANT)
    files = {**tiny_model_files(1), **EXTRA}
    for number, seed in ((1, 1), (2, 2), (3, 3)):
        got = awaiting_version(container, admin, tmp_path / f"src{number}", TENANT, NAME,
                               files=files if number == 1 else {**tiny_model_files(seed), "README.md": b"v%d\n" % seed})
        assert got == number
    approve_standin(container, TENANT, NAME, 1)
    approve_standin(container, TENANT, NAME, 2)
    with container.session_factory() as session:
        aliases.promote(session, admin, TENANT, NAME, "prod", make_target(1), policy=container.policy,
                        clock=container.clock)
        aliases.promote(session, admin, TENANT, NAME, "next", make_target(2), policy=container.policy,
                        clock=container.clock)
        revocations.revoke(session, admin, TENANT, NAME, 2, "a bad batch", clock=container.clock)
    other_admin = make_admin(container, "other")
    other_files = {**tiny_model_files(9), "SECRET.md": b"other tenant's\n"}
    awaiting_version(container, other_admin, tmp_path / "other", "other", "secret", files=other_files)
    approve_standin(container, "other", "secret", 1)
    node = role_token(container, "node-1", TENANT, "node")
    outsider = role_token(container, "outsider", "other", "node")
    return admin, node, outsider, files, other_files


@contextmanager
def served_world(container: Container, tmp_path: Path) -> Iterator[World]:
    """:func:`build_world` in ``container``, served by uvicorn on loopback while the block runs."""
    with served_copy(container, build_world(container, tmp_path)) as world:
        yield world


@contextmanager
def served_copy(container: Container, built: tuple) -> Iterator[World]:
    """A world :func:`build_world` returned (or the ``seeded`` copy of it), served by uvicorn on loopback."""
    admin, node, outsider, files, other_files = built
    with serve_in_thread(create_app(container)) as url:
        yield World(container, admin, url, node, outsider, files, other_files)


def oras_client(world: World, token: str) -> oras.client.OrasClient:
    client = oras.client.OrasClient(hostname=world.host, insecure=True)
    client.auth.set_basic_auth("anyone", token)
    return client


def pulled_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def sha256_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
