"""The ``s3_bucket`` fixture deletes its bucket: a SeaweedFS server has room for a few hundred collections only.

Each bucket is a collection with a volume of its own; a worker that kept every test's bucket ran out of volumes
late in a CI run (stop 43: "No writable volumes and no free volumes left", 17 failures). The two tests run in this
order in one worker (``--dist loadfile`` keeps a module whole and in order): the first uses a bucket, the second
finds it gone.
"""

from __future__ import annotations

USED: list[str] = []


def test_a_test_writes_into_its_bucket(s3_server, s3_bucket):
    s3_server.client().put_object(Bucket=s3_bucket, Key="registry/x", Body=b"x")
    USED.append(s3_bucket)


def test_the_bucket_is_gone_after_the_test(s3_server):
    assert USED, "run this module whole: the test before this one leaves the bucket name"
    names = {b["Name"] for b in s3_server.client().list_buckets()["Buckets"]}
    assert USED[0] not in names
