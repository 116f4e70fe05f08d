"""Who may call what (``tests/support/authorization_matrix.py``): every route has exactly one rule, every rule
falls in one family of the ``test_authorization_matrix_*`` modules that call it as every caller on its own and
the other tenant, and the refused tokens fail by their state alone.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import create_app
from registry.db.models import Principal
from tests.support.authorization_matrix import (
    DEPLOYMENT,
    FAMILIES,
    REFUSED_TOKENS,
    RULES,
    build_world,
    family_of,
    route_keys,
)

MODULES = {name: f"test_authorization_matrix_{name.replace('-', '_')}.py" for name in
           [*(name for name, _ in FAMILIES), DEPLOYMENT]}


def test_every_route_has_exactly_one_rule(container):
    routes = route_keys(create_app(container))
    missing = sorted(routes - RULES.keys())
    stale = sorted(RULES.keys() - routes)
    assert not missing, f"routes without an authorization rule (add one line each to RULES): {missing}"
    assert not stale, f"rules for routes that no longer exist: {stale}"


def test_every_family_has_its_module_and_routes():
    """A family nobody runs would leave its routes out of the matrix."""
    from pathlib import Path

    here = Path(__file__).parent
    assert sorted(p.name for p in here.glob("test_authorization_matrix_*.py")) == sorted(MODULES.values())
    assert {family_of(key) for key in RULES} == set(MODULES)


def test_refused_tokens_fail_by_their_state_alone(container):
    """The refused tokens are administrators' tokens: re-enabled, the disabled principal gets in."""
    world = build_world(container)
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        for caller in REFUSED_TOKENS:
            r = client.get("/v1/whoami", headers={"Authorization": f"Bearer {world.tokens[caller]}"}
                           if caller != "no token" else {})
            assert r.status_code == 401 and r.json()["type"].endswith("/unauthenticated"), caller
        with container.session_factory() as session:
            principal = session.query(Principal).filter_by(name="disabled").one()
            principal.disabled = False
            session.commit()
        r = client.get("/v1/whoami", headers={"Authorization": f"Bearer {world.tokens['disabled principal']}"})
        assert r.status_code == 200 and r.json()["is_admin"]
