"""A client that goes away in the middle of an upload (a real uvicorn server and a raw socket)."""

from __future__ import annotations

import hashlib
import logging
import socket
import time

from sqlalchemy import select

from api.app import create_app
from registry.auth import issue_token
from registry.db.models import Blob, Principal, RoleBinding, Tenant
from tests.support.live_app import serve_in_thread


def _submitter_token(container) -> str:
    with container.session_factory() as session:
        tenant, principal = Tenant(name="acme"), Principal(name="alice")
        session.add_all([tenant, principal])
        session.flush()
        session.add(RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role="submitter", capacity=""))
        token = issue_token(session, principal).token
        session.commit()
        return token


def _records_about(caplog, path: str) -> list[logging.LogRecord]:
    # The access line every request gets (``modelreg.access``) is not about the disconnect.
    return [r for r in caplog.records if r.name != "modelreg.access"
            and (path in r.getMessage() or r.exc_info or r.levelno >= logging.WARNING)]


def test_a_client_that_disconnects_mid_upload_is_one_info_line(container, caplog, tmp_path):
    caplog.set_level(logging.INFO)
    token = _submitter_token(container)
    data = b"m" * 200_000
    digest = hashlib.sha256(data).hexdigest()
    path = f"/v1/blobs/sha256/{digest}"
    with serve_in_thread(create_app(container)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                f"PUT {path}?tenant=acme HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode() + data[: len(data) // 2]
            )
        # The server notices the closed connection when it reads the rest of the body.
        deadline = time.monotonic() + 30
        while not _records_about(caplog, path) and time.monotonic() < deadline:
            time.sleep(0.05)
    records = _records_about(caplog, path)
    assert len(records) == 1, [(r.name, r.levelname, r.getMessage()) for r in records]
    (record,) = records
    assert record.levelno == logging.INFO and record.exc_info is None, record.getMessage()
    assert "disconnected" in record.getMessage() and "\n" not in record.getMessage()
    assert not any(r.exc_info or r.levelno >= logging.WARNING for r in caplog.records)
    assert not container.blob_store.exists(digest)
    with container.session_factory() as session:
        assert session.scalar(select(Blob).where(Blob.digest == digest)) is None
