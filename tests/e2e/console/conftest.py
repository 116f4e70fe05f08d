"""The web console's rules through the app: sessions, CSRF, security headers, and the pages' refusals.

A real app over a real database (SQLite and PostgreSQL), driven by Starlette's TestClient; the same console
in a real browser is tests/browser/. Each module starts from ``build_console_world``
(``tests/support/console.py``), built once per worker and database whichever module asks first.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app


@pytest.fixture
def world(seeded):
    return seeded


@pytest.fixture
def client(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c
