"""The authorization matrix (``tests/support/authorization_matrix.py``) for the rest: health and documents, tenants,
principals, tokens, node bindings, webhooks, eval sets, scans, events, keys and the trust root: every route as every
caller on its own and the other tenant, on a live app over SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.authorization_matrix import check_matrix


def test_authorization_matrix_deployment(container):
    check_matrix(container, "deployment")
