"""Helpers for the web console's tests: sign in through the forms, read a form's CSRF token."""

from __future__ import annotations

import hashlib
import io
import re

from registry.auth import AuthenticatedPrincipal
from registry.bootstrap import Container
from registry.domain.files import FileEntry
from registry.services import versions
from tests.support.registry import drain, person  # noqa: F401 (person: the console tests' people)

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
                                              limits=container.limits(), ports=container.ports, license=license)
        number = version.number
    drain(container)
    return number
