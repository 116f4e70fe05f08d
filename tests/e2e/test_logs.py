"""JSON logs of a real `modelreg serve`: a request id on every line of a request, never a token, never
file contents, never a query string."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid

import httpx
from fastapi.testclient import TestClient

from api.app import create_app
from registry import logs
from registry.bootstrap import bootstrap
from registry.settings import Settings
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files


def _lines(text: str) -> list[dict]:
    """The JSON log lines; the others are the startup lines `serve` prints and what native libraries
    (TensorFlow's C++ logging, loaded by the scanners) write to stderr themselves, none in Python's format."""
    assert not re.search(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR) ", text, re.MULTILINE), "a text log line"
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_json_logs_carry_request_ids_and_no_token_or_file_contents(tmp_path):
    server = start_server(tmp_path / "data", extra_env={"MODELREG_LOG_FORMAT": "json"}, workers=1)
    token = server.admin_token
    wrong_token = "mr_" + uuid.uuid4().hex
    contents = f"FILE-CONTENTS-{uuid.uuid4().hex}".encode()
    query_marker = f"QUERY-{uuid.uuid4().hex}"
    auth = {"Authorization": f"Bearer {token}"}
    try:
        kept = httpx.get(f"{server.url}/v1/whoami", headers={**auth, "X-Request-ID": "trace-0123.abc"})
        assert kept.status_code == 200 and kept.headers["x-request-id"] == "trace-0123.abc"
        replaced = httpx.get(f"{server.url}/v1/whoami", headers={**auth, "X-Request-ID": "two words"})
        made = httpx.get(f"{server.url}/v1/whoami", params={"q": query_marker}, headers=auth)
        for r in (replaced, made):
            assert r.status_code == 200 and len(r.headers["x-request-id"]) == 32
        assert replaced.headers["x-request-id"] != made.headers["x-request-id"]
        refused = httpx.get(f"{server.url}/v1/whoami", headers={"Authorization": f"Bearer {wrong_token}"})
        assert refused.status_code == 401 and "x-request-id" in refused.headers
        assert httpx.post(f"{server.url}/v1/tenants", json={"name": "acme"}, headers=auth).status_code == 201
        uploaded = httpx.put(f"{server.url}/v1/blobs/sha256/{hashlib.sha256(contents).hexdigest()}",
                             params={"tenant": "acme"}, content=contents, headers=auth)
        assert uploaded.status_code == 201, uploaded.text
        # A submission the worker thread mirrors, seals and scans, reading the files' bytes.
        model = tmp_path / "models" / "tiny"
        model.mkdir(parents=True)
        files = tiny_model_files(3)
        for path, data in files.items():
            (model / path).write_bytes(data)
        (model / "notes.txt").write_bytes(contents)
        server.cli("submit", str(model), "--model", "acme/tiny", "--json", check=True)
    finally:
        server.stop()

    text = server.log.read_text()
    for secret in (token, wrong_token, contents.decode(), query_marker):
        assert secret not in text
    lines = _lines(text)
    access = [line for line in lines if line["logger"] == "modelreg.access"]
    by_id = {line["request_id"]: line for line in access}
    assert by_id["trace-0123.abc"]["path"] == "/v1/whoami" and by_id["trace-0123.abc"]["status"] == 200
    assert by_id[made.headers["x-request-id"]]["path"] == "/v1/whoami"
    assert by_id[refused.headers["x-request-id"]]["status"] == 401
    assert "two words" not in text
    assert all(len(line["request_id"]) <= 128 for line in access)


def test_every_line_logged_during_a_request_carries_its_id(tmp_path, caplog):
    """A line logged from inside a route (here the metrics collector, in the threadpool, warning that the
    database is away) carries the id of the request it was logged for."""
    container = bootstrap(Settings(database_url="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path))
    formatter = logs.JsonFormatter()
    # What `logs.handler` does: the id is read when the line is logged, in the thread that logs it.
    caplog.handler.addFilter(logs.RequestIdFilter())
    try:
        with caplog.at_level(logging.INFO), TestClient(create_app(container)) as client:
            r = client.get("/metrics", headers={"X-Request-ID": "scrape-7"})
            assert r.status_code == 200
            outside = logs.request_id.get()
    finally:
        container.dispose()
    assert outside is None
    lines = [json.loads(formatter.format(record)) for record in caplog.records]
    warned = [line for line in lines if line["logger"] == "registry.metrics"]
    assert warned and all(line["request_id"] == "scrape-7" for line in warned)
    assert any(line["logger"] == "modelreg.access" and line["request_id"] == "scrape-7" for line in lines)
