"""Edge input on the HTTP API: free text, NUL characters, strict integers, presigned URLs and ranges (SQLite
and PostgreSQL). ``api`` is a TestClient over the app with an administrator's token who submits in ``acme``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.support.api_inputs import make_token


@pytest.fixture
def api(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_token(container, 'root', admin=True, submitter_in='acme')}"
        yield client
