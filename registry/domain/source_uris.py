"""Where a version came from, written as an address: one place maps a source kind and repository to a URI.

A version records its upstream as a kind (``hf``, ``s3``, ``local``, ``upload``), a repository and, for a hub,
its endpoint. :func:`submission_uri` is the form a submitter wrote (``hf://org/repo``, ``s3://bucket/prefix``,
a directory); :func:`upstream_url` the address anyone else can resolve (the hub's page, the S3 prefix; None
for a directory on the registry's machine or an upload); :func:`upstream_resource_uri` an in-toto resource
URI, which names every kind.

Example:
    >>> submission_uri("hf", "org/m"), upstream_url("hf", "org/m", None), upstream_resource_uri("s3", "b/p", None)
    ('hf://org/m', 'https://huggingface.co/org/m', 's3://b/p')
    >>> upstream_url("local", "/srv/m", None) is None, upstream_resource_uri("upload", "m", None)
    (True, 'urn:modelreg:upload:m')
"""

from __future__ import annotations

HF, S3, LOCAL, UPLOAD = "hf", "s3", "local", "upload"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"


def hub_endpoint(endpoint: str | None) -> str:
    """The hub a ``hf`` version came from (Hugging Face's own when none was recorded), without a trailing slash."""
    return (endpoint or DEFAULT_HF_ENDPOINT).rstrip("/")


def submission_uri(kind: str, repo: str) -> str:
    """The source as a submitter names it: ``hf://org/repo``, ``s3://bucket/prefix``, else the repository as is."""
    if kind == HF:
        return f"hf://{repo}"
    if kind == S3:
        return f"s3://{repo}"
    return repo


def upstream_url(kind: str, repo: str, endpoint: str | None) -> str | None:
    """The upstream as an address others can resolve; None for a directory on the registry's machine or an upload."""
    if kind == HF:
        return f"{hub_endpoint(endpoint)}/{repo}"
    if kind == S3:
        return f"s3://{repo}"
    return None


def upstream_resource_uri(kind: str, repo: str, endpoint: str | None) -> str:
    """An in-toto ResourceDescriptor URI for the upstream: ``git+`` the hub's URL, the S3 prefix, ``file://`` a
    directory, ``urn:modelreg:upload:`` an upload."""
    if kind == HF:
        return f"git+{hub_endpoint(endpoint)}/{repo}"
    if kind == S3:
        return f"s3://{repo}"
    if kind == LOCAL:
        return f"file://{repo}"
    return f"urn:modelreg:upload:{repo}"
