"""Routes that read a raw body refuse a caller before reading it (issue 18), on a real uvicorn server.

A raw socket sends the request's headers only and waits: the answer must come while the body is still
unsent. A route that reads first never answers (the socket times out), and would have taken the whole
body from anyone before refusing them.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
from sqlalchemy import func, select

from api.app import create_app
from api.middleware import MAX_BODY_BYTES
from registry.auth import issue_token
from registry.db.models import EvalSet, Principal
from registry.evals.cases import MAX_EVALSET_BYTES
from tests.support.live_app import serve_in_thread
from tests.support.registry import role_token

SECONDS_TO_ANSWER = 10


def _headers_only(url: str, method: str, path: str, token: str, length: int,
                  content_type: str = "application/octet-stream") -> tuple[int, dict]:
    """Send the request line and headers (a body of ``length`` bytes announced, none sent); the answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=SECONDS_TO_ANSWER) as conn:
        conn.sendall(f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                     f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode())
        received = b""
        try:
            while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < _length(received):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            pytest.fail(f"no answer within {SECONDS_TO_ANSWER}s while the body was unsent: the route reads first")
    head, body = received.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def _length(received: bytes) -> int:
    for line in received.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.fixture
def live(container):
    with serve_in_thread(create_app(container)) as url:
        yield url


def _admin_token(container) -> str:
    with container.session_factory() as session:
        admin = Principal(name="root", is_admin=True)
        session.add(admin)
        session.flush()
        token = issue_token(session, admin).token
        session.commit()
        return token


def _evalsets(container) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(EvalSet))


def test_a_non_admin_eval_set_upload_is_refused_before_its_body(live, container):
    token = role_token(container, "sam", "acme", "submitter")
    status, problem = _headers_only(live, "PUT", "/v1/evalsets/quality", token, MAX_EVALSET_BYTES)
    assert status == 403 and problem["type"].endswith("/permission-denied"), problem
    assert _evalsets(container) == 0


def test_an_eval_set_said_to_be_too_large_is_refused_before_its_body(live, container):
    status, problem = _headers_only(live, "PUT", "/v1/evalsets/quality", _admin_token(container),
                                    MAX_EVALSET_BYTES + 1)
    assert status == 413 and problem["type"].endswith("/limit-exceeded"), problem
    assert _evalsets(container) == 0


def test_a_blob_upload_by_a_caller_who_may_not_submit_is_refused_before_its_body(live, container):
    token = role_token(container, "ada", "acme", "auditor")
    # Far over the bound of parsed bodies: an upload streams, and its route bounds it after authorizing.
    status, problem = _headers_only(live, "PUT", "/v1/blobs/sha256/" + "0" * 64 + "?tenant=acme", token, 64 << 20)
    assert status == 403 and problem["type"].endswith("/permission-denied"), problem


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_paths_info_from_a_caller_who_may_not_read_is_refused_before_its_body(live, container, content_type):
    token = role_token(container, "eve", "other", "submitter")
    status, problem = _headers_only(live, "POST", "/hf/api/models/acme/tiny/paths-info/main", token,
                                    MAX_BODY_BYTES, content_type)
    assert status == 403 and problem["type"].endswith("/permission-denied"), problem


@pytest.mark.parametrize("path", ["/v1/models/acme/tiny/versions", "/v1/whoami", "/ui/sign-in"])
def test_a_body_said_to_be_over_the_bound_is_refused_before_it_is_read_even_unauthenticated(live, path):
    status, problem = _headers_only(live, "POST", path, "not-a-token", MAX_BODY_BYTES + 1, "application/json")
    assert status == 413 and problem["type"].endswith("/limit-exceeded"), problem
    assert problem["limit"] == MAX_BODY_BYTES


def _read_answer(conn: socket.socket) -> bytes:
    """The whole HTTP answer: its head, then as many body bytes as it declares (they may come in later segments)."""
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _declared_length(answer):
        data = conn.recv(65536)
        if not data:
            break
        answer += data
    return answer


def _declared_length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_a_chunked_body_is_read_only_up_to_the_bound(live):
    """No declared length: the body is counted as it arrives and refused once it passes the bound."""
    parts = urlsplit(live)
    chunk = b"x" * (1 << 20)
    with socket.create_connection((parts.hostname, parts.port), timeout=SECONDS_TO_ANSWER) as conn:
        conn.sendall(f"POST /v1/models/acme/tiny/versions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        for _ in range(MAX_BODY_BYTES // len(chunk) + 1):
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = _read_answer(conn)  # answered with the last chunk still unterminated: never read further
    assert answer.split()[1] == b"413", answer[:200]
    assert b"limit-exceeded" in answer
