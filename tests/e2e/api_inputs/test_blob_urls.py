"""Presigned blob URLs with odd parameters are 403; unsatisfiable or unsupported ranges 416, and ranges up to
nineteen digits still work (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from tests.support.api_inputs import (
    PROBLEM,
    upload_weights,
)


@pytest.fixture
def blob_url(api, container):
    """A stored blob and the path and query of a good presigned URL for it."""
    from urllib.parse import urlsplit

    data = bytes(range(256)) * 4
    upload_weights(api, data)
    url = urlsplit(container.blob_store.presign_get(hashlib.sha256(data).hexdigest(), dt.timedelta(minutes=5)))
    return f"{url.path}?{url.query}", data


def test_presigned_urls_with_odd_parameters_are_403(api, blob_url):
    from urllib.parse import parse_qs, urlencode

    url, data = blob_url
    path, query = url.split("?")
    good = {k: v[0] for k, v in parse_qs(query).items()}
    assert api.get(url).content == data
    for bad in ({"signature": "é" * 64}, {"signature": "\u0660" * 64}, {"signature": good["signature"].upper()},
                {"signature": good["signature"] + "0"}, {"expires": "9" * 5000}, {"expires": "9" * 4000},
                {"expires": "+" + good["expires"]}, {"expires": good["expires"] + "_0"}, {"expires": "-1"}):
        r = api.get(f"{path}?{urlencode({**good, **bad})}")
        assert r.status_code == 403, (bad, r.text)
        assert r.json()["type"] == PROBLEM + "bad-presigned-url"


@pytest.mark.parametrize("header", [
    "bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000,
    "bytes=" + "1" * 20 + "-", "bytes=0-1,2-3", "bytes=5-2", "items=0-1", "bytes=-",
])
def test_unsatisfiable_or_unsupported_ranges_are_416(api, blob_url, header):
    url, _ = blob_url
    r = api.get(url, headers={"Range": header})
    assert r.status_code == 416, r.text
    assert r.json()["type"] == PROBLEM + "range-not-satisfiable"


def test_ranges_up_to_nineteen_digits_still_work(api, blob_url):
    url, data = blob_url
    r = api.get(url, headers={"Range": "bytes=10-" + "9" * 19})
    assert r.status_code == 206 and r.content == data[10:]
    assert api.get(url, headers={"Range": "bytes=-" + "9" * 19}).content == data
