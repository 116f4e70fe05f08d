"""Image digests back to versions: which released version a digest a kubelet reports for an image volume is of.

The registry serves every released version in two shapes (``raw`` ModelPack and ``image``:
``registry/services/oci_builds.py``) and stores each shape's manifest and config digests (``oci_artifacts``). A
kubelet reports one of them for an image volume (KEP-5365; ``registry/domain/image_volumes.py``): containerd the
*config* digest, CRI-O the *manifest* digest. Either, of either shape, names one version; a digest of a tenant
the caller does not name is never found. A revoked version is found like any other: where it still runs is the
question a revocation asks. Authorization is the caller's (the receipts service, for a node of the tenant).

Usage (a sketch, not run as a doctest)::

    match = version_for_image_digest(session, "acme", "sha256:...")
    match.version.number, match.shape, match.kind
    # -> (7, 'image', 'config')
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from registry.db.models import Model, OciArtifact, Tenant, Version
from registry.domain.errors import InvalidInputError
from registry.domain.image_volumes import DIGEST_RE

MANIFEST, CONFIG = "manifest", "config"
"""Which of a shape's digests matched: its manifest's (CRI-O) or its config's (containerd)."""


@dataclass(frozen=True, slots=True)
class ImageDigestMatch:
    """The version a digest is of, the shape it is a digest of, and which of that shape's digests it is."""

    version: Version
    shape: str
    kind: str


def version_for_image_digest(session: Session, tenant: str, digest: str, *,
                             model: str | None = None) -> ImageDigestMatch | None:
    """The version of ``tenant`` (of its model ``model``, when named) that ``digest`` is the manifest or config
    digest of, in any shape served; None where it is of none.

    Raises:
        InvalidInputError: ``digest`` is not ``sha256:`` and 64 lower-case hex digits.
    """
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise InvalidInputError("an image digest is sha256:<64 lower-case hex digits>", field="digest",
                                value=str(digest)[:80])
    query = (select(OciArtifact, Version).join(Version, Version.id == OciArtifact.version_id)
             .join(Model, Model.id == OciArtifact.model_id).join(Tenant, Tenant.id == Model.tenant_id)
             .where(Tenant.name == tenant,
                    or_(OciArtifact.manifest_digest == digest, OciArtifact.config_digest == digest)))
    if model is not None:
        query = query.where(Model.name == model)
    # Every manifest and config names its version (``descriptor``, or the image's labels): a digest is of at most
    # one row. The lowest id is taken all the same, so an answer never depends on the plan.
    row = session.execute(query.order_by(OciArtifact.id).limit(1)).first()
    if row is None:
        return None
    artifact, version = row
    return ImageDigestMatch(version, artifact.shape, MANIFEST if artifact.manifest_digest == digest else CONFIG)
