"""Secrets anyone could know are refused (issue 30): a presign secret or console key under 32 bytes, a console
key that is not hex, and the values this repository publishes as examples (the Kubernetes Secret's
``change-me``, the console key docker-compose.yml used to ship)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from registry.settings import PUBLISHED_SECRETS, InsecureSecretError, Settings, check_secrets

OLD_COMPOSE_CONSOLE_KEY = "3f1c0a9e7b2d4c6f8a1e3b5d7f9c2a4e6b8d0f1a3c5e7a9b2d4f6a8c0e2b4d6f"


def settings(**secrets: str) -> Settings:
    return Settings(**{name: SecretStr(value) for name, value in secrets.items()})


@pytest.mark.parametrize(("secrets", "says"), [
    ({"presign_secret": "change-me"}, "MODELREG_PRESIGN_SECRET is an example published"),
    ({"presign_secret": "test-presign-secret"}, "MODELREG_PRESIGN_SECRET has 19 bytes, fewer than 32"),
    ({"presign_secret": OLD_COMPOSE_CONSOLE_KEY}, "MODELREG_PRESIGN_SECRET is an example published"),
    ({"console_key": OLD_COMPOSE_CONSOLE_KEY}, "MODELREG_CONSOLE_KEY is an example published"),
    ({"console_key": OLD_COMPOSE_CONSOLE_KEY.upper()}, "MODELREG_CONSOLE_KEY is an example published"),
    ({"console_key": "change-me"}, "MODELREG_CONSOLE_KEY is an example published"),
    ({"console_key": "ab" * 31}, "MODELREG_CONSOLE_KEY has 31 bytes, fewer than 32"),
    ({"console_key": "not hex at all, though long enough to pass a length check"}, "MODELREG_CONSOLE_KEY is not hex"),
])
def test_a_short_or_published_secret_is_refused_in_one_line(secrets, says):
    with pytest.raises(InsecureSecretError) as refused:
        check_secrets(settings(**secrets))
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_the_compose_files_old_console_key_is_among_the_published_ones():
    assert OLD_COMPOSE_CONSOLE_KEY in PUBLISHED_SECRETS


def test_unset_or_strong_secrets_pass():
    check_secrets(Settings())
    check_secrets(settings(presign_secret="x" * 32, console_key="5a" * 32))
