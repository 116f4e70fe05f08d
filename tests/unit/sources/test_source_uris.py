"""Source URIs (registry/sources/__init__.py)."""

from __future__ import annotations

import os

import pytest

from registry.domain.errors import InvalidInputError
from registry.sources import open_source, parse_source_uri


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("hf://Qwen/Qwen2.5-0.5B-Instruct", ("hf", "Qwen/Qwen2.5-0.5B-Instruct")),
        ("hf://gpt2", ("hf", "gpt2")),
        ("hf://acme/tiny/", ("hf", "acme/tiny")),
        ("HF://acme/tiny", ("hf", "acme/tiny")),
        ("s3://models", ("s3", "models")),
        ("s3://models/llama/8b/", ("s3", "models/llama/8b")),
        ("s3://my.bucket-1/a", ("s3", "my.bucket-1/a")),
        ("file:///srv/models/tiny", ("local", "/srv/models/tiny")),
        ("file://localhost/srv/models/tiny/", ("local", "/srv/models/tiny")),
        ("file:///srv/my%20model", ("local", "/srv/my model")),
        ("/srv/models/../models/tiny", ("local", "/srv/models/tiny")),
    ],
)
def test_parse(uri, expected):
    assert parse_source_uri(uri) == expected


def test_relative_plain_path_is_made_absolute():
    assert parse_source_uri("models/tiny") == ("local", os.path.join(os.getcwd(), "models", "tiny"))


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "   ",
        "http://example.com/model",
        "ftp://host/x",
        "hf://",
        "hf://a/b/c",
        "hf://acme/../x",
        "hf://acme/tiny.git",
        "hf://acme--x/tiny",
        "hf://acme/ti ny",
        "s3://",
        "s3://Bad_Bucket/x",
        "s3://b/x",
        "s3://bucket/a/../b",
        "s3://bucket/a?versionId=1",
        "file://remote-host/srv/x",
        "file://relative",
        "file:///srv/x?y=1",
    ],
)
def test_bad_uris_are_invalid_input(uri):
    with pytest.raises(InvalidInputError):
        parse_source_uri(uri)


def test_open_source_needs_what_the_kind_needs(tmp_path):
    with pytest.raises(InvalidInputError):
        open_source("hf://acme/tiny")  # no endpoint: never fall back to the public hub
    with pytest.raises(InvalidInputError):
        open_source("s3://bucket/prefix")
    with pytest.raises(InvalidInputError):
        open_source(str(tmp_path), include=["[unclosed"])
    assert open_source(str(tmp_path)).kind == "local"
