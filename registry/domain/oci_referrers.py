"""A released version's documents as OCI referrers of its model manifest, and the referrers index.

Pure: each document (the signature bundle, the ML-BOM, the provenance, the scan and eval reports) becomes
an OCI image manifest as image-spec ``manifest.md`` shapes an artifact without a config: its own
``artifactType``, the empty config (``application/vnd.oci.empty.v1+json``, the two bytes ``{}``), one layer
holding the document, and ``subject`` naming the model manifest. The JSON is canonical, so the same
document and subject always give the same manifest digest; a document that changes (evals run again)
gives a new referrer, never a new subject. :func:`index` is the answer of the referrers API
(distribution-spec ``spec.md``, "Listing Referrers"): an image index of their descriptors, each with the
manifest's ``artifactType`` and annotations.

Example:
    >>> subject = Subject("sha256:" + "a" * 64, 100)
    >>> ref = build(subject, Document(SCAN_REPORT, "scan-report.json", b'{"files":[]}'))
    >>> ref.manifest["subject"]["digest"] == subject.digest, ref.manifest["config"]["digest"] == EMPTY_DIGEST
    (True, True)
    >>> index([ref], artifact_type=EVAL_REPORT)
    b'{"manifests":[],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.domain.modelpack import ANNOTATION_TITLE, OCI_MANIFEST, canonical_json, digest_of

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_BYTES = b"{}"
EMPTY_DIGEST = digest_of(EMPTY_BYTES)
"""``sha256:44136fa3...``: the digest image-spec gives the empty descriptor."""

SIGNATURE = "application/vnd.dev.sigstore.bundle.v0.3+json"
"""The OpenSSF model-signing bundle (a Sigstore bundle v0.3 holding a DSSE envelope)."""
CYCLONEDX = "application/vnd.cyclonedx+json"
IN_TOTO = "application/vnd.in-toto+json"
SCAN_REPORT = "application/vnd.modelreg.scan-report.v1+json"
EVAL_REPORT = "application/vnd.modelreg.eval-report.v1+json"
KINDS = (SIGNATURE, CYCLONEDX, IN_TOTO, SCAN_REPORT, EVAL_REPORT)
"""Every artifact type a version's referrers have, in the order the index lists them."""


@dataclass(frozen=True, slots=True)
class Subject:
    """The model manifest the referrers refer to."""

    digest: str
    size: int


@dataclass(frozen=True, slots=True)
class Document:
    """One document to serve as a referrer: its bytes are the layer, ``artifact_type`` its media type too."""

    artifact_type: str
    filename: str
    """The layer's ``org.opencontainers.image.title`` (where ``oras pull`` writes it)."""
    content: bytes
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The manifest's annotations (copied into the index's descriptor)."""


@dataclass(frozen=True, slots=True)
class Referrer:
    artifact_type: str
    manifest: dict[str, Any]
    manifest_bytes: bytes
    manifest_digest: str
    layer_bytes: bytes
    layer_digest: str

    def descriptor(self) -> dict[str, Any]:
        """The referrer as the referrers index lists it."""
        out = {"mediaType": OCI_MANIFEST, "digest": self.manifest_digest, "size": len(self.manifest_bytes),
               "artifactType": self.artifact_type}
        if self.manifest.get("annotations"):
            out["annotations"] = dict(self.manifest["annotations"])
        return out


def build(subject: Subject, document: Document) -> Referrer:
    """The image manifest that serves ``document`` as a referrer of ``subject``."""
    layer_digest = digest_of(document.content)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": document.artifact_type,
        "config": {"mediaType": EMPTY, "digest": EMPTY_DIGEST, "size": len(EMPTY_BYTES)},
        "layers": [{"mediaType": document.artifact_type, "digest": layer_digest, "size": len(document.content),
                    "annotations": {ANNOTATION_TITLE: document.filename}}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject.digest, "size": subject.size},
    }
    if document.annotations:
        manifest["annotations"] = dict(document.annotations)
    manifest_bytes = canonical_json(manifest)
    return Referrer(document.artifact_type, manifest, manifest_bytes, digest_of(manifest_bytes), document.content,
                    layer_digest)


def index(referrers: Sequence[Referrer], *, artifact_type: str | None = None) -> bytes:
    """The referrers API's image index: every referrer's descriptor, or those of ``artifact_type`` only."""
    chosen = [r for r in referrers if artifact_type is None or r.artifact_type == artifact_type]
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX,
                           "manifests": [r.descriptor() for r in chosen]})

