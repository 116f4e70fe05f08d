"""The authorization matrix (``tests/support/authorization_matrix.py``) for the web console's pages and forms (``/ui``),
with each caller's console session: every route as every caller on its own and the other tenant, on a live app over
SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.authorization_matrix import check_matrix


def test_authorization_matrix_console(container):
    check_matrix(container, "console")
