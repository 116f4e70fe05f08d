"""Helpers for the web console's tests: sign in through the forms, read a form's CSRF token."""

from __future__ import annotations

import hashlib
import io
import re

from registry.auth import AuthenticatedPrincipal, issue_token
from registry.bootstrap import Container
from registry.db.models import Principal, RoleBinding, Tenant
from registry.domain.files import FileEntry
from registry.services import versions
from tests.support.registry import drain

CSRF_RE = re.compile(r'name="csrf" value="([^"]*)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the page's first form."""
    found = CSRF_RE.search(html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def sign_in(client, token: str, next_path: str = "/ui"):
    """Sign in through the sign-in form (the client keeps the cookies); return the POST's answer."""
    page = client.get("/ui/sign-in", params={"next": next_path})
    return client.post("/ui/sign-in", data={"token": token, "csrf": csrf_of(page.text), "next": next_path},
                       follow_redirects=False)


def person(container: Container, name: str, tenant: str, *roles: tuple[str, str]) -> str:
    """A principal ``name`` holding ``roles`` (``(role, capacity)``) in ``tenant`` (made if need be); its token."""
    with container.session_factory() as session:
        row = session.query(Tenant).filter_by(name=tenant).first()
        if row is None:
            row = Tenant(name=tenant)
            session.add(row)
            session.flush()
        principal = Principal(name=name)
        session.add(principal)
        session.flush()
        for role, capacity in roles:
            session.add(RoleBinding(principal_id=principal.id, tenant_id=row.id, role=role, capacity=capacity))
        issued = issue_token(session, principal)
        session.commit()
        return issued.token


def awaiting_upload(container: Container, submitter: AuthenticatedPrincipal, tenant: str, name: str,
                    files: dict[str, bytes], *, label: str = "console", license: str | None = "mit") -> int:
    """Upload ``files`` as ``submitter``, submit them and run the pipeline; return the version number."""
    entries = []
    with container.session_factory() as session:
        for path, data in files.items():
            digest = hashlib.sha256(data).hexdigest()
            versions.upload_blob(session, submitter, tenant, digest, io.BytesIO(data), len(data),
                                 blob_store=container.blob_store)
            entries.append(FileEntry(path, len(data), digest))
        version, _ = versions.submit_uploaded(session, submitter, tenant, name, entries, label=label,
                                              limits=container.limits(), clock=container.clock, license=license)
        number = version.number
    drain(container)
    return number
