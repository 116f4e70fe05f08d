"""The admission grammar: what a reference names, and its pinned form (``registry/domain/admission.py``)."""

from __future__ import annotations

import pytest

from registry.domain.admission import target_of

HOSTS = {"registry.example:5000"}
COMMIT, DIGEST = "c" * 40, "sha256:" + "d" * 64


@pytest.mark.parametrize(("uri", "kind", "expected", "pinned"), [
    ("modelreg://acme/llm@prod", "storage-uri", ("modelreg", "acme/llm", "prod", "alias"), "modelreg://acme/llm@3"),
    ("acme/llm@2", "init-fetch", ("modelreg", "acme/llm", "2", "version"), "acme/llm@3"),
    ("hf://acme/llm", "storage-uri", ("hf", "acme/llm", "prod", "alias"), f"hf://acme/llm:{COMMIT}"),
    ("hf://acme/llm:main", "storage-uri", ("hf", "acme/llm", "prod", "alias"), f"hf://acme/llm:{COMMIT}"),
    (f"hf://acme/llm:{COMMIT}", "storage-uri", ("hf", "acme/llm", COMMIT, "commit"), f"hf://acme/llm:{COMMIT}"),
    ("s3://acme/llm@prod/config.json", "storage-uri", ("s3", "acme/llm", "prod", "alias"),
     "s3://acme/llm@3/config.json"),
    ("oci://registry.example:5000/acme/llm:prod-image", "storage-uri", ("oci", "acme/llm", "prod", "alias"),
     f"oci://registry.example:5000/acme/llm@{DIGEST}"),
    ("registry.example:5000/acme/llm:3", "image-volume", ("image", "acme/llm", "3", "version"),
     f"registry.example:5000/acme/llm@{DIGEST}"),
    (f"registry.example:5000/acme/llm@{DIGEST}", "image-volume", ("image", "acme/llm", DIGEST, "digest"),
     f"registry.example:5000/acme/llm@{DIGEST}"),
])
def test_registry_shaped_references_and_their_pinned_form(uri, kind, expected, pinned):
    target = target_of(uri, kind, HOSTS)
    assert target.problem is None
    assert (target.scheme, target.model, target.selector, target.selector_kind) == expected
    assert target.pinned(number=3, commit=COMMIT, digest=DIGEST) == pinned


@pytest.mark.parametrize(("uri", "kind", "scheme", "ours", "problem"), [
    ("gs://bucket/llm", "storage-uri", "other", False, None),
    ("https://example.com/llm.tar", "storage-uri", "other", False, None),
    ("pvc://claim/llm", "storage-uri", "other", False, None),
    ("acme/llm:1", "image-volume", "image", False, "names no registry host"),  # Docker Hub's
    ("docker.io/acme/llm:1", "image-volume", "image", False, None),
    ("registry.example:5000/acme/llm", "image-volume", "image", True, "name a tag or a digest"),
    ("registry.example:5000/a/b/c:1", "image-volume", "image", True, "not tenant/name of the registry"),
    ("registry.example:5000/acme/llm@sha256:zz", "image-volume", "image", True, "'sha256:zz' is no sha256 digest"),
    ("modelreg://acme/llm", "storage-uri", "modelreg", False, "name a version or an alias"),
    ("modelreg://../x@1", "storage-uri", "modelreg", False, "invalid tenant name"),
    ("hf://acme/llm:", "storage-uri", "hf", False, "nothing after ':'"),
    ("s3://acme/llm/config.json", "storage-uri", "s3", False, "an s3 key is <model>@<ref>/<path>"),
    ("x" * 5000, "storage-uri", "other", False, "a reference is 1 to 2048 characters"),
])
def test_other_references_say_why_they_are_not_the_registrys(uri, kind, scheme, ours, problem):
    target = target_of(uri, kind, HOSTS)
    assert (target.scheme, target.registry_host) == (scheme, ours)
    if problem is None:
        assert target.problem is None
    else:
        assert target.problem is not None and problem in target.problem
