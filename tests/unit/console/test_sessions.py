"""The console's seals and CSRF tokens, without a database."""

from __future__ import annotations

import pytest

from registry.console.sessions import CsrfError, SessionKey, check_csrf


def test_a_csrf_token_checks_only_against_its_own_cookie_purpose_and_key():
    key = SessionKey(b"k" * 32)
    token = key.mac("csrf", "cookie-1")
    check_csrf(key, "cookie-1", token)
    for bound, submitted, purpose, other in (("cookie-2", token, "csrf", key), ("cookie-1", token, "signin", key),
                                             ("cookie-1", token, "csrf", SessionKey(b"j" * 32)),
                                             ("cookie-1", "", "csrf", key), (None, token, "csrf", key)):
        with pytest.raises(CsrfError):
            check_csrf(other, bound, submitted, purpose=purpose)


def test_a_short_key_is_refused():
    with pytest.raises(ValueError):
        SessionKey(b"short")


@pytest.mark.parametrize("submitted", ["é", "\u00ff" * 64, "\udcff", "١٢٣", "0" * 63 + "é"])
def test_a_non_ascii_or_surrogate_value_is_a_csrf_error_not_a_type_error(submitted):
    key = SessionKey(b"k" * 32)
    with pytest.raises(CsrfError):
        check_csrf(key, "cookie-1", submitted)
    with pytest.raises(CsrfError):
        check_csrf(key, submitted, key.mac("csrf", "cookie-1"))
