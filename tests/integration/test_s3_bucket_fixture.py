"""The ``s3_bucket`` fixture deletes its bucket: a SeaweedFS server has room for a few hundred collections only.

Each bucket is a collection with a volume of its own; a worker that kept every test's bucket ran out of volumes
late in a CI run (stop 43: "No writable volumes and no free volumes left", 17 failures). The fixture is
``SeaweedS3.bucket``; one test uses it and finds the bucket gone after it, in any test order.
"""

from __future__ import annotations


def test_a_bucket_written_into_is_gone_after_its_test(s3_server):
    client = s3_server.client()
    with s3_server.bucket() as name:
        client.put_object(Bucket=name, Key="registry/x", Body=b"x")
        assert name in {b["Name"] for b in client.list_buckets()["Buckets"]}
    assert name not in {b["Name"] for b in client.list_buckets()["Buckets"]}


def test_the_fixture_gives_a_new_empty_bucket_of_the_session_server(s3_server, s3_bucket):
    client = s3_server.client()
    assert client.list_objects_v2(Bucket=s3_bucket).get("KeyCount", 0) == 0
    client.put_object(Bucket=s3_bucket, Key="registry/x", Body=b"x")
    assert client.get_object(Bucket=s3_bucket, Key="registry/x")["Body"].read() == b"x"
