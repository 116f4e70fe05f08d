"""The release world of the manifest and long-poll tests: ``acme/llm`` 1 and 2 approved, 3 awaiting approval,
``prod`` -> 1, with tokens of a node of acme, a reader of acme and a node of another tenant.

Built once per worker and database by ``build_release_world`` (a seeded world, ``tests/support/worlds.py``);
the ``release_world`` fixture (``tests/integration/conftest.py``) serves a copy through the API.
"""

from __future__ import annotations

from registry.domain.aliases import make_target
from registry.services import aliases, revocations
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"
BASE = f"/v1/models/{T}/{M}/manifest"


def build_release_world(container, root):
    """The world above; returns ``(tokens, admin)``."""
    admin = make_admin(container, T)
    for seed in (1, 2, 3):
        awaiting_version(container, admin, root / f"v{seed}", T, M, seed=seed)
    for number in (1, 2):
        approve_standin(container, T, M, number)
    promote(container, admin, 1)
    tokens = {"node": role_token(container, "nod", T, "node"), "reader": role_token(container, "rea", T, "auditor"),
              "other-node": role_token(container, "onod", "other", "node")}
    for tenant in ("beta", "gamma"):  # the tenants releases are served for (a canary's, another)
        make_admin(container, tenant)
    return tokens, admin


def promote(container, admin, number, canary=None, tenants=()):
    """Point ``prod`` at ``number`` (with a canary for ``tenants``)."""
    with container.session_factory() as session:
        aliases.promote(session, admin, T, M, "prod", make_target(number, canary, tenants),
                        policy=container.policy, clock=container.clock)


def revoke(container, admin, number):
    """Revoke version ``number`` of acme/llm."""
    with container.session_factory() as session:
        revocations.revoke(session, admin, T, M, number, "recalled", clock=container.clock)


def _as(tokens, who="node"):
    return {"Authorization": f"Bearer {tokens[who]}"}
