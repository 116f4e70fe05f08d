"""The authorization matrix (``tests/support/authorization_matrix.py``) for the OCI distribution endpoint and its
token service (``/v2``): every route as every caller on its own and the other tenant, on a live app over
SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.authorization_matrix import check_matrix


def test_authorization_matrix_oci(container):
    check_matrix(container, "oci")
