"""Versions ready for release, made through the real pipeline, for the alias and revocation tests.

``approve_standin`` is a stand-in for the approvals flow (built in parallel, merged later): it makes
a version ``approved`` through ``lifecycle.approve``, the one way the approvals service does it too.
"""

from __future__ import annotations

from pathlib import Path

from registry.auth import AuthenticatedPrincipal
from registry.bootstrap import Container
from registry.db.models import Version
from registry.domain.states import VersionState
from registry.services import lifecycle, loaders, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import drain
from tests.support.tiny_model import tiny_model_files


def submit_directory(container: Container, admin: AuthenticatedPrincipal, root: Path, tenant: str, name: str,
                     files: dict[str, bytes], *, run_jobs: bool = True) -> tuple[int, int]:
    """Write ``files`` under ``root``, submit it and run every job (unless ``run_jobs`` is false); return the
    version's id and number (whatever state it reached)."""
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, tenant, name, SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        version_id, number = version.id, version.number
    if run_jobs:
        drain(container)
    return version_id, number


def awaiting_version(container: Container, admin: AuthenticatedPrincipal, root: Path, tenant: str, name: str,
                     files: dict[str, bytes] | None = None, seed: int = 1) -> int:
    """Submit a model directory and run the pipeline to ``awaiting_approval``; return the version number."""
    version_id, number = submit_directory(container, admin, root, tenant, name, files or tiny_model_files(seed))
    with container.session_factory() as session:
        state = session.get(Version, version_id).state
    assert state == VersionState.AWAITING_APPROVAL.value, state
    return number


def approve_standin(container: Container, tenant: str, name: str, number: int) -> None:
    """Stand-in for the approvals flow: move an awaiting version to ``approved`` via ``lifecycle.approve``."""
    with container.session_factory() as session:
        model = loaders.load_model_unchecked(session, tenant, name)
        version = loaders.load_version_unchecked(session, model, number)
        lifecycle.approve(session, version, "approvals-standin", {"stand_in": "approvals flow, merged separately"},
                          container.ports)
        session.commit()
