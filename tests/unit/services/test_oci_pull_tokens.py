"""Pull tokens: what a scope grants (pull of repositories the principal may read or fetch in), nothing more."""

from __future__ import annotations

import datetime as dt

import jwt
import pytest

from registry.auth import AuthenticatedPrincipal, Role
from registry.clock import ManualClock
from registry.domain.errors import InvalidInputError, PermissionDeniedError, PullScopeDeniedError
from registry.services import oci_serving, oci_tokens
from registry.services.oci_tokens import OciCaller

KEY = b"k" * 32
NODE = AuthenticatedPrincipal(1, "node-1", False, {"acme": frozenset({(Role.NODE, "")}),
                                                   "lab": frozenset({(Role.SUBMITTER, "")})})


def _issue(*scopes: str, principal=NODE):
    return oci_tokens.issue_pull_token(principal, 7, list(scopes), service="reg", key=KEY,
                                clock=ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)), ttl_seconds=300)


def test_a_token_grants_pull_of_the_readable_repositories_of_its_scope_only():
    issued = _issue("repository:acme/llm:pull", "repository:other/secret:pull", "repository:lab/x:push",
                    "repository:lab/y:pull,push")
    assert issued.repositories == ("acme/llm", "lab/y")
    claims = jwt.decode(issued.token, KEY, algorithms=["HS256"], options={"verify_exp": False, "verify_aud": False})
    assert claims["access"] == [{"type": "repository", "name": "acme/llm", "actions": ["pull"]},
                                {"type": "repository", "name": "lab/y", "actions": ["pull"]}]
    assert (claims["tid"], claims["pid"], claims["exp"] - claims["iat"], claims["catalog"]) == (7, 1, 300, False)
    assert oci_tokens.is_pull_token(issued.token) and not oci_tokens.is_pull_token("mr_abc")
    assert _issue("repository:acme/llm:pull registry:catalog:*").repositories == ("acme/llm",)


@pytest.mark.parametrize("scope", ["repository:acme:pull", "repository:ACME/llm:pull", "acme/llm", "x" * 300])
def test_a_malformed_scope_is_refused(scope):
    with pytest.raises(InvalidInputError):
        _issue(scope)


def test_require_pull_checks_the_tokens_scope_and_the_principals_roles():
    caller = OciCaller(NODE, frozenset({"acme/llm"}))
    oci_serving.require_pull(caller, "acme", "llm")
    with pytest.raises(PullScopeDeniedError):
        oci_serving.require_pull(caller, "acme", "other")
    with pytest.raises(PermissionDeniedError):
        oci_serving.require_pull(OciCaller(NODE), "other", "secret")
    # A token naming a repository its principal can no longer read grants nothing.
    with pytest.raises(PermissionDeniedError):
        oci_serving.require_pull(OciCaller(NODE, frozenset({"other/secret"})), "other", "secret")


def test_the_scopes_of_one_request_are_bounded():
    many = [f"repository:acme/m{i}:pull" for i in range(oci_tokens.MAX_SCOPES)]
    assert len(_issue(*many).repositories) == oci_tokens.MAX_SCOPES
    with pytest.raises(InvalidInputError):
        _issue(*many, "repository:acme/one-more:pull")
    with pytest.raises(InvalidInputError):
        _issue(" ".join(many + ["repository:acme/one-more:pull"]))
