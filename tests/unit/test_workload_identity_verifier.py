"""The verifier of projected service-account tokens on its own (no database): what it fetches, and from where.

A real issuer on loopback (``tests/support/kube_issuer.py``) serves the keys; the registry side is
``registry/workload_identity.py``.
"""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidInputError, ServiceUnavailableError, WorkloadTokenRejectedError
from registry.settings import WorkloadIssuer
from registry.workload_identity import MAX_JWKS_BYTES, WorkloadVerifier, check_fetch_url, looks_like_jwt
from tests.support.kube_issuer import IssuerKey, KubeIssuer


@pytest.fixture
def issuer():
    with KubeIssuer() as running:
        yield running


def verifier(issuer: KubeIssuer, **options) -> WorkloadVerifier:
    return WorkloadVerifier([WorkloadIssuer(issuer=issuer.url, **options)], refresh_interval=60)


@pytest.mark.parametrize("url", ["http://kubernetes.example", "ftp://127.0.0.1/jwks", "https://user:pw@k.example",
                                 "file:///etc/passwd", "http://10.0.0.1/openid/v1/jwks"])
def test_keys_are_fetched_over_https_or_from_loopback_only(url):
    with pytest.raises(InvalidInputError):
        check_fetch_url(url, what="JWKS URL")
    with pytest.raises(InvalidInputError):
        WorkloadVerifier([WorkloadIssuer(issuer="https://k.example", jwks_url=url)])
    assert check_fetch_url("https://10.0.0.1:6443/openid/v1/jwks", what="JWKS URL")


def test_registry_tokens_never_go_to_the_verifier():
    assert not looks_like_jwt("mr_" + "a" * 43)
    assert looks_like_jwt("a.b.c") and looks_like_jwt("a.b.")
    assert not looks_like_jwt("a.b.c.") and not looks_like_jwt("a" * 20000 + ".b.c")


def test_a_verified_token_names_namespace_service_account_pod_and_node(issuer):
    identity = verifier(issuer).verify(issuer.mint("serving", "fetcher"))
    assert (identity.namespace, identity.service_account, identity.node_name) == ("serving", "fetcher", "gpu-node-7")
    assert identity.pod_name.startswith("fetcher-")
    assert identity.principal_name == f"sa:serving/fetcher@{issuer.url.split('://')[1]}"


def test_keys_from_a_jwks_url_without_discovery(issuer):
    v = verifier(issuer, jwks_url=f"{issuer.url}/openid/v1/jwks")
    v.verify(issuer.mint())
    assert "/.well-known/openid-configuration" not in issuer.hits


def test_a_discovery_document_of_another_issuer_gives_no_keys(issuer):
    v = WorkloadVerifier([WorkloadIssuer(issuer=issuer.url + "/")], refresh_interval=60)  # iss differs by a slash
    with pytest.raises(ServiceUnavailableError):
        v.verify(issuer.mint(issuer=issuer.url + "/"))


def test_an_oversized_jwks_is_not_read(issuer):
    padded = {**issuer.keys[0].jwk(), "x5c": ["A" * MAX_JWKS_BYTES]}

    class Padded:
        def jwk(self):
            return padded

    issuer.published = [Padded()]  # type: ignore[list-item]
    with pytest.raises(ServiceUnavailableError, match="more than"):
        verifier(issuer).verify(issuer.mint())


def test_a_sub_that_contradicts_the_kubernetes_claim_is_refused(issuer):
    claims = issuer.claims("serving", "fetcher")
    claims["sub"] = "system:serviceaccount:kube-system:admin"
    with pytest.raises(WorkloadTokenRejectedError) as refused:
        verifier(issuer).verify(issuer.mint(claims=claims))
    assert refused.value.reason == "claims"


def test_a_token_without_the_kubernetes_claim_is_refused(issuer):
    claims = issuer.claims()
    del claims["kubernetes.io"]
    with pytest.raises(WorkloadTokenRejectedError) as refused:
        verifier(issuer).verify(issuer.mint(claims=claims))
    assert refused.value.reason == "claims"


def test_an_es256_token_under_an_rsa_kid_is_refused(issuer):
    es = IssuerKey.generate("ES256")
    es.kid = issuer.keys[0].kid  # the RSA key's kid, an EC signature
    with pytest.raises(WorkloadTokenRejectedError) as refused:
        verifier(issuer).verify(issuer.mint(key=es))
    assert refused.value.reason == "algorithm"


def test_principal_names_tell_two_issuers_of_one_host_apart_and_read_as_node_names():
    from registry.workload_identity import is_node_principal_name, principal_name

    a = principal_name("https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE", "serving",
                       "fetcher")
    b = principal_name("https://oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF0123456789ABCDEF/", "serving",
                       "fetcher")
    assert a == "sa:serving/fetcher@oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE" and a != b
    gke = principal_name("https://container.googleapis.com/v1/projects/p/locations/us-central1/clusters/c",
                         "serving", "fetcher")
    assert all(is_node_principal_name(n) for n in (a, b, gke))
    assert not is_node_principal_name("sa:serving/fetcher@host/../x y")
