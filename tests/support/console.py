"""Helpers for the web console's tests: the seeded world of ``tests/e2e/console/``, sign in through the forms,
read a form's CSRF token and a response's cookie."""

from __future__ import annotations

import hashlib
import io
import re

from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain.files import FileEntry
from registry.services import versions
from tests.support.registry import drain, person
from tests.support.tiny_model import tiny_model_files

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


def build_console_world(container, root):
    """Tenant ``acme``: a submitter who is also a security approver, a security and an ml approver, an
    auditor, a serving node; one version of ``acme/tiny`` awaiting approval. Tenant ``other`` holds a model
    nobody of ``acme`` may see."""
    tokens = {
        "sam": person(container, "sam", "acme", ("submitter", ""), ("approver", "security")),
        "sec": person(container, "sec", "acme", ("approver", "security")),
        "mia": person(container, "mia", "acme", ("approver", "ml")),
        "aud": person(container, "aud", "acme", ("auditor", "")),
        "node": person(container, "node", "acme", ("node", "")),
        "olly": person(container, "olly", "other", ("submitter", "")),
    }
    with container.session_factory() as session:
        sam = authenticate(session, tokens["sam"])
        olly = authenticate(session, tokens["olly"])
    number = awaiting_upload(container, sam, "acme", "tiny", tiny_model_files(3), label="<script>alert(1)</script>")
    awaiting_upload(container, olly, "other", "secret-model", {"config.json": b'{"model_type": "x"}'})
    return {"tokens": tokens, "number": number}


def cookie_header(response, name: str) -> str:
    found = [h for h in response.headers.get_list("set-cookie") if h.startswith(name + "=")]
    assert found, f"no {name} cookie set: {response.headers.get_list('set-cookie')}"
    return found[0]
