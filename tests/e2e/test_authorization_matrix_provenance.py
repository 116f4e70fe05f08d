"""The authorization matrix (``tests/support/authorization_matrix.py``) for provenance, the audit log and the
transparency log (``/v1/provenance``, ``/v1/audit``, ``/log``): every route as every caller on its own and the other
tenant, on a live app over SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.authorization_matrix import check_matrix


def test_authorization_matrix_provenance(container):
    check_matrix(container, "provenance")
