"""Fixtures shared by the integration modules (each module's own ``world`` stays in its module)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.fixture
def release_world(container, seeded):
    """A copy of ``tests/support/release_world.py``'s world behind the API: ``(client, tokens, admin)``.

    The module asks for it with ``pytestmark = pytest.mark.seeded(builder=build_release_world)``.
    """
    from api.app import create_app

    container.settings.event_poll_seconds = 0.05
    tokens, admin = seeded
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, tokens, admin
