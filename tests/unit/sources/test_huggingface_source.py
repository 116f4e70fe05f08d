"""HuggingFaceSource construction and guards that need no server."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidInputError, InvalidPathError
from registry.sources.base import UpstreamFile
from registry.sources.huggingface import HuggingFaceSource


@pytest.mark.parametrize("endpoint", ["", "huggingface.co", "ftp://hub", None])
def test_an_explicit_http_endpoint_is_required(endpoint):
    with pytest.raises(InvalidInputError):
        HuggingFaceSource("acme/tiny", endpoint=endpoint)  # type: ignore[arg-type]


@pytest.mark.parametrize("repo", ["", "a/b/c", "acme/../x", "acme/ti ny"])
def test_repo_ids_are_validated(repo):
    with pytest.raises(InvalidInputError):
        HuggingFaceSource(repo, endpoint="http://127.0.0.1:9")


def test_open_checks_revision_and_path_before_any_request():
    # Port 9 (discard) on loopback: were a request made, it would fail as an UpstreamError instead.
    src = HuggingFaceSource("acme/tiny", endpoint="http://127.0.0.1:9/")
    assert src.endpoint == "http://127.0.0.1:9"
    f = UpstreamFile(path="config.json", size=2, git_sha1="0" * 40)
    with pytest.raises(InvalidInputError):
        src.open("main", f)
    with pytest.raises(InvalidPathError):
        src.open("a" * 40, UpstreamFile(path="../evil.txt", size=1))
