"""The referrer manifests of a version's documents and the referrers index (pure, no fixtures)."""

from __future__ import annotations

import hashlib
import json

from registry.domain.oci_referrers import (
    CYCLONEDX,
    EMPTY_BYTES,
    EMPTY_DIGEST,
    IN_TOTO,
    KINDS,
    OCI_INDEX,
    SIGNATURE,
    Document,
    Subject,
    build,
    index,
)

SUBJECT = Subject("sha256:" + "b" * 64, 1234)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_referrer_is_an_artifact_with_the_empty_config_one_layer_and_the_subject():
    doc = Document(CYCLONEDX, "acme-llm-1.cdx.json", b'{"bomFormat":"CycloneDX"}',
                   {"dev.modelreg.version": "acme/llm@1"})
    ref = build(SUBJECT, doc)
    assert EMPTY_DIGEST == _sha256(EMPTY_BYTES) == (
        "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
    assert ref.manifest == {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "artifactType": CYCLONEDX,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": EMPTY_DIGEST, "size": 2},
        "layers": [{"mediaType": CYCLONEDX, "digest": _sha256(doc.content), "size": len(doc.content),
                    "annotations": {"org.opencontainers.image.title": "acme-llm-1.cdx.json"}}],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": SUBJECT.digest,
                    "size": 1234},
        "annotations": {"dev.modelreg.version": "acme/llm@1"}}
    assert ref.manifest_digest == _sha256(ref.manifest_bytes) and json.loads(ref.manifest_bytes) == ref.manifest
    # The same document and subject give the same bytes; another document, another digest, same subject.
    assert build(SUBJECT, doc).manifest_bytes == ref.manifest_bytes
    other = build(SUBJECT, Document(CYCLONEDX, "acme-llm-1.cdx.json", b"{}", doc.annotations))
    assert other.manifest_digest != ref.manifest_digest and other.manifest["subject"] == ref.manifest["subject"]


def test_the_index_lists_descriptors_with_artifact_type_and_annotations_and_filters():
    refs = [build(SUBJECT, Document(kind, "f", kind.encode(), {"k": kind})) for kind in (SIGNATURE, IN_TOTO)]
    doc = json.loads(index(refs))
    assert (doc["schemaVersion"], doc["mediaType"]) == (2, OCI_INDEX)
    assert doc["manifests"] == [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": r.manifest_digest,
                                 "size": len(r.manifest_bytes), "artifactType": r.artifact_type,
                                 "annotations": {"k": r.artifact_type}} for r in refs]
    assert [d["artifactType"] for d in json.loads(index(refs, artifact_type=IN_TOTO))["manifests"]] == [IN_TOTO]
    assert json.loads(index([]))["manifests"] == []
    assert KINDS[0] == SIGNATURE
