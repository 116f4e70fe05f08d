"""What a model reference in a Kubernetes object names, and its pinned form: the admission webhook's grammar.

A reference (``registry/domain/admission_refs.py`` finds them) is one of:

- ``modelreg://tenant/name@prod`` (or, as ``modelreg fetch`` takes it, ``tenant/name@3``);
- ``hf://tenant/name[:revision]``, KServe's Hugging Face form, read through the registry's ``/hf`` where the
  namespace's policy says its storage initializer's ``HF_ENDPOINT`` is the registry (revision: an alias,
  ``main`` for ``prod``, a version number or a commit);
- ``s3://tenant/name@ref/path`` on a node's ``modelreg serve-s3`` (bucket = tenant, ADR 0014), where the
  namespace's policy says ``s3://`` is served so;
- ``oci://host/tenant/name:tag`` or ``...@sha256:...``, and an image volume's ``host/tenant/name:tag``: the
  registry's ``/v2`` when ``host`` is one of its hosts (tags: the number, an alias, either with ``-image``);
- anything else (``gs://``, ``https://``, another registry's image): *elsewhere*.

:func:`target_of` parses without I/O; :meth:`ModelTarget.pinned` writes the reference naming exactly the version the
registry resolved (a number, a commit, a manifest digest) in the reference's own form, for the mutating step.

Example:
    >>> t = target_of("oci://registry.example/acme/llm:prod-image", "storage-uri", {"registry.example"})
    >>> t.scheme, t.registry_host, t.model, t.selector, t.image
    ('oci', True, 'acme/llm', 'prod', True)
    >>> t.pinned(number=3, commit="c" * 40, digest="sha256:" + "d" * 64).rpartition(":")[0]
    'oci://registry.example/acme/llm@sha256'
    >>> target_of("hf://acme/llm:main", "storage-uri", set()).selector
    'prod'
    >>> target_of("gs://bucket/llm", "storage-uri", set()).scheme
    'other'
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from registry.domain.errors import InvalidRefError
from registry.domain.refs import ALIAS_RE, NAME_RE, SCHEME, parse_ref

MODELREG, HF, S3, OCI, IMAGE, OTHER = "modelreg", "hf", "s3", "oci", "image", "other"
DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
COMMIT_RE = re.compile(r"\A[0-9a-f]{40}\Z")
NUMBER_RE = re.compile(r"\A[1-9][0-9]{0,9}\Z")
IMAGE_SUFFIX = "-image"
HUB_DEFAULT_BRANCH, DEFAULT_ALIAS = "main", "prod"
MAX_URI_LENGTH = 2048
"""The longest reference judged; a longer one is denied unread."""


@dataclass(frozen=True)
class ModelTarget:
    """What one reference names.

    Attributes:
        uri: The reference as written.
        scheme: ``modelreg``, ``hf``, ``s3``, ``oci``, ``image`` or ``other``.
        registry_host: An ``oci``/``image`` reference names one of the registry's hosts.
        tenant, name: The model, when the reference has the registry's shape (None otherwise).
        selector: The alias, version number, commit or ``sha256:`` digest named (None: none).
        selector_kind: ``alias``, ``version``, ``commit`` or ``digest``.
        image: An ``-image`` tag: the image-shaped manifest.
        problem: Why the reference has not the registry's shape (None when it has).
        host: The image host as written (``oci``/``image``).
        rest: What follows the model and selector (an ``s3`` key's path).
    """

    uri: str
    scheme: str
    registry_host: bool = False
    tenant: str | None = None
    name: str | None = None
    selector: str | None = None
    selector_kind: str | None = None
    image: bool = False
    problem: str | None = None
    host: str | None = None
    rest: str = ""

    @property
    def model(self) -> str | None:
        return f"{self.tenant}/{self.name}" if self.tenant and self.name else None

    def pinned(self, *, number: int, commit: str, digest: str | None) -> str:
        """The reference naming exactly the resolved version (``digest``: its manifest's, for ``/v2``).

        Raises:
            ValueError: an ``oci``/``image`` reference without a digest, or one that has not the registry's shape.
        """
        if self.model is None:
            raise ValueError(f"{self.uri!r} names no model of the registry")
        if self.scheme == MODELREG:
            prefix = SCHEME if self.uri.startswith(SCHEME) else ""
            return f"{prefix}{self.model}@{number}"
        if self.scheme == HF:
            return f"hf://{self.model}:{commit}"
        if self.scheme == S3:
            return f"s3://{self.tenant}/{self.name}@{number}{self.rest}"
        if digest is None:
            raise ValueError(f"{self.uri!r}: no manifest digest to pin to")
        prefix = "oci://" if self.scheme == OCI else ""
        return f"{prefix}{self.host}/{self.model}@{digest}"


def target_of(uri: str, kind: str, registry_hosts: Collection[str]) -> ModelTarget:
    """Parse one reference (``kind`` as :mod:`registry.domain.admission_refs` says; ``init-fetch`` takes
    ``modelreg fetch``'s REF, with or without its scheme). Never raises: what does not parse says why."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_LENGTH:
        return ModelTarget(str(uri)[:80], OTHER, problem=f"a reference is 1 to {MAX_URI_LENGTH} characters")
    if uri.startswith(SCHEME) or kind == "init-fetch":
        return _modelreg(uri)
    if uri.startswith("hf://"):
        return _hf(uri)
    if uri.startswith("s3://"):
        return _s3(uri)
    if uri.startswith("oci://"):
        return _image(uri, uri[len("oci://"):], OCI, registry_hosts)
    if kind == "image-volume" and "://" not in uri:
        return _image(uri, uri, IMAGE, registry_hosts)
    return ModelTarget(uri, OTHER)


def _modelreg(uri: str) -> ModelTarget:
    try:
        ref = parse_ref(uri)
    except InvalidRefError as exc:
        return ModelTarget(uri, MODELREG, problem=exc.details["reason"])
    if ref.version is None and ref.alias is None:
        return ModelTarget(uri, MODELREG, tenant=ref.tenant, name=ref.name,
                      problem="name a version or an alias: tenant/name@3 or tenant/name@prod")
    if ref.version is not None:
        return ModelTarget(uri, MODELREG, tenant=ref.tenant, name=ref.name, selector=str(ref.version),
                      selector_kind="version")
    return ModelTarget(uri, MODELREG, tenant=ref.tenant, name=ref.name, selector=ref.alias, selector_kind="alias")


def _model(uri: str, scheme: str, tenant: str, name: str) -> ModelTarget | None:
    """A ModelTarget saying what is wrong with the names, or None when both are names."""
    if not NAME_RE.match(tenant) or not NAME_RE.match(name):
        return ModelTarget(uri, scheme, problem="not tenant/name of the registry")
    return None


def _hf(uri: str) -> ModelTarget:
    body = uri[len("hf://"):]
    repo, colon, revision = body.partition(":")
    tenant, _, name = repo.partition("/")
    wrong = _model(uri, HF, tenant, name)
    if wrong is not None:
        return wrong
    if colon and not revision:
        return ModelTarget(uri, HF, tenant=tenant, name=name, problem="nothing after ':'")
    revision = revision or HUB_DEFAULT_BRANCH
    return ModelTarget(uri, HF, tenant=tenant, name=name, **_revision(revision, hub=True))


def _revision(revision: str, *, hub: bool) -> dict:
    if hub and COMMIT_RE.match(revision):
        return {"selector": revision, "selector_kind": "commit"}
    if NUMBER_RE.match(revision):
        return {"selector": revision, "selector_kind": "version"}
    alias = DEFAULT_ALIAS if hub and revision == HUB_DEFAULT_BRANCH else revision
    if ALIAS_RE.match(alias):
        return {"selector": alias, "selector_kind": "alias"}
    return {"problem": f"{revision!r} is no alias, version number or commit"}


def _s3(uri: str) -> ModelTarget:
    bucket, _, key = uri[len("s3://"):].partition("/")
    first, slash, path = key.partition("/")
    name, at, ref = first.partition("@")
    wrong = _model(uri, S3, bucket, name)
    if wrong is not None:
        return wrong
    if not at:
        return ModelTarget(uri, S3, tenant=bucket, name=name, problem="an s3 key is <model>@<ref>/<path>")
    return ModelTarget(uri, S3, tenant=bucket, name=name, rest=f"{slash}{path}", **_revision(ref, hub=False))


def _image(uri: str, body: str, scheme: str, registry_hosts: Collection[str]) -> ModelTarget:
    host, slash, repo = body.partition("/")
    if not slash or not ("." in host or ":" in host or host == "localhost"):
        # No host: Docker Hub's, never the registry's.
        return ModelTarget(uri, scheme, problem="names no registry host")
    ours = host in registry_hosts
    if "@" in repo:
        path, _, digest = repo.partition("@")
        selector = {"selector": digest, "selector_kind": "digest"} if DIGEST_RE.match(digest) else \
            {"problem": f"{digest!r} is no sha256 digest"}
        image = False
    else:
        path, colon, tag = repo.rpartition(":")
        if not colon or "/" in tag:
            path, tag = repo, ""
        image = tag.endswith(IMAGE_SUFFIX)
        tag = tag[: -len(IMAGE_SUFFIX)] if image else tag
        selector = _revision(tag, hub=False) if tag else {"problem": "name a tag or a digest"}
    tenant, _, name = path.partition("/")
    wrong = _model(uri, scheme, tenant, name)
    if wrong is not None:
        return ModelTarget(uri, scheme, registry_host=ours, host=host, problem=wrong.problem)
    return ModelTarget(uri, scheme, registry_host=ours, tenant=tenant, name=name, image=image, host=host, **selector)
