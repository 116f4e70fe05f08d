"""The pure parts of release issuance: ETags, If-None-Match, the statement digest."""

from __future__ import annotations

import base64
import hashlib

import pytest

from registry.domain.errors import InvalidStateError
from registry.services.manifests import etag_matches, release_etag, statement_digest


def test_the_etag_changes_with_each_input_and_only_them():
    base = release_etag(3, 2, "acme", "k" * 64)
    assert base == release_etag(3, 2, "acme", "k" * 64)
    assert base.startswith('"') and base.endswith('"')
    others = {release_etag(4, 2, "acme", "k" * 64), release_etag(3, 1, "acme", "k" * 64),
              release_etag(3, 2, "beta", "k" * 64), release_etag(3, 2, "acme", "j" * 64)}
    assert base not in others and len(others) == 4


def test_if_none_match_forms():
    etag = release_etag(1, 1, "acme", "k" * 64)
    assert etag_matches(etag, etag)
    assert etag_matches(f'"other", W/{etag}', etag)
    assert not etag_matches('"other"', etag)
    assert not etag_matches(None, etag)
    assert not etag_matches("", etag)
    # A node holding nothing must get a release, never wait on "*".
    assert not etag_matches("*", etag)


def test_statement_digest_is_of_the_dsse_payload_bytes():
    statement = b'{"_type":"https://in-toto.io/Statement/v1"}'
    bundle = {"dsseEnvelope": {"payload": base64.b64encode(statement).decode(), "signatures": []}}
    assert statement_digest(bundle) == hashlib.sha256(statement).hexdigest()
    with pytest.raises(InvalidStateError):
        statement_digest(None)
