"""`modelreg serve-s3` against the real API (SQLite and PostgreSQL, a local directory and a SeaweedFS bucket),
with boto3 as the loaders' S3 client: ListObjectsV2, HeadObject and ranged GetObject over a verified release,
each chunk checked against the digest the release signs and kept in the node cache; S3 XML errors; SigV4
refusals; loopback only. Each test gets its own ``endpoint`` (``tests/support/s3_endpoint.py``) over its own
copy of the seeded world (database, blob directory or bucket): every module here marks itself
``pytestmark = pytest.mark.seeded(builder=build_endpoint_world)``.
"""

from __future__ import annotations

import pytest

from tests.support.s3_endpoint import served_endpoint


@pytest.fixture
def endpoint(store_container, seeded, tmp_path):
    """acme/llm@1 approved; serve-s3 in a thread in front of the live API, with a node cache."""
    with served_endpoint(store_container, seeded, tmp_path) as served:
        yield served
