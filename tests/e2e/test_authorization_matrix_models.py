"""The authorization matrix (``tests/support/authorization_matrix.py``) for a tenant's models, versions, approvals,
aliases, retention and blobs (``/v1/models``, ``/v1/blobs``): every route as every caller on its own and the other
tenant, on a live app over SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.authorization_matrix import check_matrix


def test_authorization_matrix_models(container):
    check_matrix(container, "models")
