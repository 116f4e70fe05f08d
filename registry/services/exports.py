"""Exports of a sealed version for auditors: a CycloneDX 1.6 ML-BOM and a signed SLSA provenance statement.

- ``cyclonedx``: the BOM is built with ``cyclonedx-python-lib``: one ``machine-learning-model`` component
  (group = tenant, name = model, version = the version number; the purl ``pkg:huggingface/org/name@rev`` of
  a Hugging Face upstream, none for the other sources; the resolved license; the upstream at its resolved
  revision as an external reference; facts, scans, approvals and eval failures as ``modelreg:*``
  properties), with one ``data`` sub-component per component of the release unit
  (``registry/domain/components.py``: bom-ref ``component:NAME``, the component digest as its SHA-256, each
  member as a ``modelreg:member`` property ``<sha256>  <member>``, the lines the digest hashes) and one
  ``file`` sub-component per file carrying its SHA-256. The file components' JSON is written directly, in
  the order and form ``cyclonedx-python-lib`` writes them (as library objects, 20,000 files took ~20 s to
  sort and serialize); ``reference=True`` builds them with the library, to compare. The library does not model
  ``modelCard``, so it is added to the serialized JSON here (:func:`model_card`: parameters from the facts
  and the README's front matter, performance metrics from the completed evals, considerations from the
  README's sections), and the whole document is validated with the library's strict 1.6 JSON validator
  before it is returned: a document that fails is a bug (:class:`BomSchemaError`, a 500), never served.
  A LoRA adapter's BOM also names the base it is bound to (issue 34): a second ``machine-learning-model``
  component (bom-ref ``base-model``: group, name and version of the base version, its statement digest as a
  property) holding its ``weights`` component as a ``data`` component whose SHA-256 is the bound weights digest,
  and a ``dependencies`` entry from the adapter (``model``) to it; the adapter's performance metrics name the
  base they ran on in their slice (``on=acme/llm@1``).
- ``slsa``: an in-toto Statement v1 whose subjects are the version's files (path and sha256), predicate
  ``https://slsa.dev/provenance/v1`` (the submission as external parameters, the policy and signed-manifest
  digests as internal ones, the upstream at its resolved revision as the resolved dependency; mirroring
  from submission to sealing as the run), in a DSSE envelope (payload type ``application/vnd.in-toto+json``)
  signed with the key release manifests are signed with now, a key of the newest trust root
  (``GET /v1/keys`` lists it).

Who may export: auditors of the version's tenant and administrators (``audit``), as for the other
provenance answers; readers may not. Only a sealed version (it has files and a signed manifest) exports.

Usage (a sketch, not run as a doctest)::

    done = export(session, auditor, "acme", "tiny", 1, "slsa", keyring=container.keyring,
                  blob_store=container.blob_store, clock=container.clock,
                  root_expiry=dt.timedelta(days=365))
    done.media_type
    # -> 'application/vnd.dsse.envelope.v1+json'
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from cyclonedx.contrib.license.factories import LicenseFactory
from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.license import License, LicenseAcknowledgement
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.clock import Clock
from registry.db.models import Principal, Version, VersionFacts
from registry.domain.components import Component as UnitComponent
from registry.domain.errors import InvalidInputError, InvalidStateError
from registry.domain.exports import ExportFormat
from registry.domain.source_uris import DEFAULT_HF_ENDPOINT, hub_endpoint, upstream_resource_uri
from registry.domain.text import printable
from registry.services import evals, licenses, loaders, manifests, scans, units
from registry.services.facts import facts_document
from registry.services.loaders import version_ref
from registry.services.trust_roots import release_signer
from registry.signing.bundle import IN_TOTO_PAYLOAD_TYPE, STATEMENT_TYPE
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope
from registry.signing.keyring import KeyRing
from registry.storage.base import BlobStore

CYCLONEDX, SLSA = ExportFormat.cyclonedx.value, ExportFormat.slsa.value
FORMATS = (CYCLONEDX, SLSA)
CYCLONEDX_MEDIA_TYPE = "application/vnd.cyclonedx+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SLSA_PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://modelreg.dev/provenance/mirror/v1"
"""What a modelreg "build" is: pin an upstream revision, mirror and hash its files, sign their manifest."""
BUILDER_ID = "https://modelreg.dev/registry"
MAX_METRICS = 2000
"""Performance metrics in one model card (every suite's metrics and their per-language and length slices)."""
MAX_SCANS = 8
"""Scan records listed per file (a file rescanned by every scanner upgrade has one per version)."""
MAX_TEXT = 4096
"""Characters of one text taken from a README (a section, a front matter value)."""
MAX_LIST = 64
"""Items taken from a front matter list (datasets, languages, base models)."""
UNIT_COMPONENT_DESCRIPTION = ("a component of the release unit (registry/domain/components.py); its SHA-256 is the "
                              "sha256 of its modelreg:member lines, each followed by a newline, sorted by member")
_HEX40, _HEX64 = re.compile(r"\A[0-9a-f]{40}\Z"), re.compile(r"\A[0-9a-f]{64}\Z")
# README sections of the Hugging Face model card template (and common variants), by what they tell.
_USE_HEADINGS = ("direct use", "intended use", "intended uses", "uses", "intended uses & limitations")
_LIMIT_HEADINGS = ("limitations", "bias, risks, and limitations", "risks and limitations", "out-of-scope use")
_ETHICS_HEADINGS = ("ethical considerations", "bias", "biases")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


class BomSchemaError(Exception):
    """The CycloneDX document built for a version fails the 1.6 schema: a bug of the exporter.

    Deliberately not a ``RegistryError``: the API answers it as a 500 (logged), never as a document.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"the CycloneDX document fails the 1.6 schema at {path}: {message}")
        self.path = path


@dataclass(frozen=True)
class Export:
    """One exported document: its bytes as served, their media type and a file name to save them under."""

    format: str
    media_type: str
    content: bytes
    filename: str

    def document(self) -> dict[str, Any]:
        return json.loads(self.content)


def export(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int, fmt: str,
           *, keyring: KeyRing, blob_store: BlobStore, clock: Clock, root_expiry: dt.timedelta) -> Export:
    """Export ``tenant/name@number`` as ``fmt`` (``cyclonedx`` or ``slsa``).

    Raises:
        InvalidInputError: ``fmt`` is not one of :data:`FORMATS`.
        PermissionDeniedError: the principal may not ``audit`` in ``tenant``.
        TenantNotFoundError, ModelNotFoundError, VersionNotFoundError: no such version.
        InvalidStateError: the version is not sealed yet.
        NoSigningKeyError: (slsa) the registry holds no key of the newest trust root.
        BomSchemaError: (cyclonedx) the document fails the schema (a bug).
    """
    if fmt not in FORMATS:
        raise InvalidInputError(f"unknown export format {str(fmt)[:40]!r}: use {' or '.join(FORMATS)}",
                                field="format", value=str(fmt)[:40])
    require(principal, tenant, Permission.AUDIT)
    version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, tenant, name), number)
    if version.manifest_bundle is None or any(f.sha256 is None for f in version.files):
        raise InvalidStateError(f"{version_ref(version)} is not sealed yet (state {version.state}): "
                                "nothing to export", state=version.state)
    stem = f"{tenant}-{name}-{number}"
    if fmt == CYCLONEDX:
        content = cyclonedx_bom(session, version, blob_store=blob_store, clock=clock)
        return Export(fmt, f"{CYCLONEDX_MEDIA_TYPE}; version=1.6", content, f"{stem}.cdx.json")
    statement = slsa_statement(session, version)
    _root, key = release_signer(session, keyring, expires_in=root_expiry, clock=clock)
    envelope = sign_envelope(canonical_json(statement), IN_TOTO_PAYLOAD_TYPE, key)
    # One line: an ``.intoto.jsonl`` file holds one envelope per line (the SLSA convention).
    return Export(fmt, DSSE_MEDIA_TYPE, json.dumps(envelope).encode(), f"{stem}.intoto.jsonl")


# --- CycloneDX -------------------------------------------------------------------------------------


def cyclonedx_bom(session: Session, version: Version, *, blob_store: BlobStore, clock: Clock,
                  serial_number: uuid.UUID | None = None, reference: bool = False) -> bytes:
    """The version's CycloneDX 1.6 ML-BOM, validated, as JSON bytes (the caller checked the principal).

    Args:
        serial_number: The BOM's serial number; None for a random one. With one given (and a clock that
            stands still) the same rows give the same bytes, as an OCI referrer needs.
        reference: Build every file component as a ``cyclonedx-python-lib`` object too, as the library would
            order and write them (slow: 20,000 files take tens of seconds). The default writes the file
            components' JSON directly, in the library's order; both give the same bytes, which the tests and
            ``bench/bom.py`` check.

    Raises:
        BomSchemaError: the document fails the strict 1.6 schema.
    """
    tenant, name = version.model.tenant.name, version.model.name
    facts = facts_document(session.get(VersionFacts, version.id))
    readme = licenses.read_readme(version, blob_store)
    front = licenses.front_matter(readme) if readme is not None else None
    card = front if isinstance(front, dict) else {}
    eval_docs = [evals.result_doc(r) for r in evals.results_of(session, version)]
    scan_docs = {s["path"]: s for s in scans.file_scans(session, version.files)}

    parts = [_unit_component(c) for c in units.components_of(session, version) or ()]
    if reference:
        parts += [Component(type=ComponentType.FILE, name=f.path, bom_ref=f"file:{f.path}",
                            hashes=[_sha256(f.sha256)], properties=_file_properties(f.size, scan_docs.get(f.path)))
                  for f in version.files]
    model = Component(
        type=ComponentType.MACHINE_LEARNING_MODEL, bom_ref="model", group=tenant, name=name,
        version=str(version.number), purl=_purl(version), licenses=_licenses(version.license),
        external_references=_upstream_refs(version), components=parts,
        properties=_model_properties(session, version, facts, card, eval_docs))
    tool = Component(type=ComponentType.APPLICATION, name="modelreg", version=_modelreg_version())
    base = _base_component(version)
    bom = Bom(components=[model, *([base] if base is not None else [])],
              metadata=BomMetaData(timestamp=clock.now(), tools=ToolRepository(components=[tool])),
              **({"serial_number": serial_number} if serial_number is not None else {}))
    if base is not None:
        bom.register_dependency(model, [base])
    document = json.loads(JsonV1Dot6(bom).output_as_string())
    # The library sorts top-level components too: find the version's own by its bom-ref.
    own = next(c for c in document["components"] if c["bom-ref"] == "model")
    if not reference and version.files:
        # The library sorts nested components by type, then name: the unit's ``data`` components (already in
        # the document, which places the ``components`` key) before the ``file`` ones, those by path.
        own.setdefault("components", []).extend([
            _file_component_json(f.path, f.sha256, f.size, scan_docs.get(f.path))
            for f in sorted(version.files, key=lambda f: f.path)])
    own["modelCard"] = model_card(facts, card, _body(readme), eval_docs)
    content = json.dumps(document, indent=2).encode()
    validate_bom(content)
    return content


def validate_bom(content: bytes | str) -> None:
    """Validate a CycloneDX JSON document against the strict 1.6 schema (``registry/domain/bom_schema.py``).

    Raises:
        BomSchemaError: the first violation, with its JSON path.
    """
    # Imported here: jsonschema's format checker compiles an IRI grammar on import (a second of CPU), which
    # every API and worker process would pay at start although few ever build a BOM.
    from registry.domain import bom_schema

    error = bom_schema.first_error(json.loads(content))
    if error is not None:
        raise BomSchemaError(error.message, error.json_path)


def model_card(facts: dict[str, Any] | None, card: dict[str, Any], body: str,
               eval_docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The CycloneDX 1.6 ``modelCard`` of a version (only what is known; nothing guessed).

    Args:
        facts: The version's facts document, or None.
        card: The README's front matter (``pipeline_tag``, ``datasets``...), hostile input.
        body: The README after its front matter (bounded), for the considerations sections.
        eval_docs: The version's eval results (:func:`registry.services.evals.result_doc`).
    """
    parameters: dict[str, Any] = {}
    task = _text(card.get("pipeline_tag"), 128)
    if task:
        parameters["task"] = task
    family = _fact(facts, "architecture", "model_type")
    if isinstance(family, str) and family:
        parameters["architectureFamily"] = printable(family)
    classes = _fact(facts, "architecture", "architectures")
    if isinstance(classes, list) and classes:
        parameters["modelArchitecture"] = printable(", ".join(str(c) for c in classes))
    datasets = _texts(card.get("datasets"), 256)
    if datasets:
        parameters["datasets"] = [{"type": "dataset", "name": d} for d in datasets]
    io_formats = _io_formats(task)
    if io_formats:
        parameters["inputs"], parameters["outputs"] = [{"format": io_formats[0]}], [{"format": io_formats[1]}]
    out: dict[str, Any] = {"bom-ref": "model-card"}
    if parameters:
        out["modelParameters"] = parameters
    metrics = _performance_metrics(eval_docs)
    if metrics:
        out["quantitativeAnalysis"] = {"performanceMetrics": metrics}
    sections = _sections(body)
    considerations: dict[str, Any] = {}
    for key, headings in (("useCases", _USE_HEADINGS), ("technicalLimitations", _LIMIT_HEADINGS)):
        found = [sections[h] for h in headings if sections.get(h)]
        if found:
            considerations[key] = found
    ethics = [sections[h] for h in _ETHICS_HEADINGS if sections.get(h)]
    if ethics:
        considerations["ethicalConsiderations"] = [{"name": text} for text in ethics]
    if considerations:
        out["considerations"] = considerations
    return out


def _performance_metrics(eval_docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each completed suite's metrics (slice ``suite=<name> runner=<runner>@<version>``), then the same metrics
    per language and per prompt-length bucket (``... language=en``); at most :data:`MAX_METRICS`."""
    out: list[dict[str, str]] = []
    for doc in eval_docs:
        if doc["status"] != evals.COMPLETED:
            continue
        where = f"suite={doc['suite']} runner={doc['runner']}@{doc['runner_version']}"
        ran_on = doc.get("ran_on")
        if isinstance(ran_on, dict):
            where += f" on={ran_on.get('base_model')}@{ran_on.get('base_version')}"
        slices = [(where, doc["metrics"])]
        for dimension, groups in sorted((doc.get("breakdown") or {}).items()):
            if isinstance(groups, dict):
                slices += [(f"{where} {dimension}={group}", values) for group, values in sorted(groups.items())]
        for where_, values in slices:
            if isinstance(values, dict):
                out += [{"type": printable(str(k)), "value": _value(v), "slice": printable(where_)}
                        for k, v in sorted(values.items())]
    return out[:MAX_METRICS]


def _value(value: Any) -> str:
    return printable(value) if isinstance(value, str) else json.dumps(value)


def _model_properties(session: Session, version: Version, facts: dict[str, Any] | None, card: dict[str, Any],
                      eval_docs: list[dict[str, Any]]) -> list[Property]:
    record = manifests.approval_record(session, version)
    pairs: list[tuple[str, Any]] = [
        ("modelreg:state", version.state), ("modelreg:source", f"{version.source_kind}:{version.source_repo}"),
        ("modelreg:revision:requested", version.requested_revision),
        ("modelreg:revision:resolved", version.resolved_revision),
        ("modelreg:manifest:digest", version.manifest_digest),
        ("modelreg:manifest:signing-key-id", version.signing_key_id),
        ("modelreg:sealed-at", version.sealed_at.isoformat() if version.sealed_at else None),
        ("modelreg:revoked", version.revoke_reason if version.revoked_at else None),
    ]
    binding = version.adapter_binding
    if binding is not None:
        pairs += [("modelreg:adapter-of", version_ref(binding.base)),
                  ("modelreg:adapter-of:weights-digest", binding.weights_digest)]
    for finding in version.license_findings:
        pairs.append((f"modelreg:license:{finding.source}", finding.normalized or f"unrecognized: {finding.problem}"))
    for fact in ("formats", "parameters", "dtypes", "tensor_bytes"):
        pairs.append((f"modelreg:facts:weights.{fact}", _fact(facts, "weights", fact)))
    for fact in ("method", "bits", "tool"):
        pairs.append((f"modelreg:facts:quantization.{fact}", _fact(facts, "quantization", fact)))
    pairs.append(("modelreg:facts:architecture.torch_dtype", _fact(facts, "architecture", "torch_dtype")))
    decision = record["decision"]
    if decision is not None:
        pairs += [("modelreg:policy:bundle-digest", decision["bundle_digest"]),
                  ("modelreg:policy:input-digest", decision["input_digest"])]
    pairs += [("modelreg:approval", f"{a['principal']} ({a['capacity']}) {a['decision']} at {a['at']}")
              for a in record["approvals"]]
    pairs += [(f"modelreg:eval:{d['suite']}", f"{d['status']}" + (f": {d['reason']}" if d["reason"] else ""))
              for d in eval_docs]
    for key in ("base_model", "language", "library_name"):
        pairs += [(f"modelreg:card:{key}", value) for value in _texts(card.get(key), 256)]
    return [Property(name=k, value=v if isinstance(v, str) else json.dumps(v)) for k, v in pairs if v is not None]


def _base_component(version: Version) -> Component | None:
    """An adapter's base as its BOM names it (None for a version that is no adapter): the base version, holding
    its ``weights`` component with the bound digest, what the adapter's signed statement binds it to."""
    binding = version.adapter_binding
    if binding is None:
        return None
    base = binding.base
    weights = Component(type=ComponentType.DATA, name="weights", bom_ref="base-model:component:weights",
                        description=UNIT_COMPONENT_DESCRIPTION, hashes=[_sha256(binding.weights_digest)])
    return Component(
        type=ComponentType.MACHINE_LEARNING_MODEL, bom_ref="base-model", group=base.model.tenant.name,
        name=base.model.name, version=str(base.number), purl=_purl(base), external_references=_upstream_refs(base),
        description="the base model this LoRA adapter is bound to: the adapter's signed statement names this "
                    "version and the digest of its weights component",
        components=[weights],
        properties=[Property(name="modelreg:manifest:digest", value=binding.base_manifest_digest),
                    Property(name="modelreg:adapter-of:requested", value=binding.requested)])


def _unit_component(component: UnitComponent) -> Component:
    """One component of the release unit as a ``data`` component: its digest as its SHA-256 hash, each member
    as a ``modelreg:member`` property (``<sha256>  <member>``, the line its digest hashes)."""
    return Component(
        type=ComponentType.DATA, name=component.name, bom_ref=f"component:{component.name}",
        description=UNIT_COMPONENT_DESCRIPTION, hashes=[_sha256(component.digest)],
        properties=[Property(name="modelreg:member", value=f"{m.sha256}  {m.name}") for m in component.members])


def _file_properties(size: int, scan: dict[str, Any] | None) -> list[Property]:
    return [Property(name=k, value=v) for k, v in _file_property_pairs(size, scan)]


def _file_property_pairs(size: int, scan: dict[str, Any] | None) -> list[tuple[str, str]]:
    out = [("modelreg:size", str(size))]
    if scan is not None:
        out.append(("modelreg:scan:verdict", str(scan["verdict"])))
        # Every scanner's record (modelreg's and modelscan's), newest first, a few at most.
        out += [("modelreg:scan", f"{s['scanner']} {s['scanner_version']}: {s['verdict']}")
                for s in reversed(scan["scans"][-MAX_SCANS:])]
    return out


def _file_component_json(path: str, sha256: str, size: int, scan: dict[str, Any] | None) -> dict[str, Any]:
    """A file component as ``JsonV1Dot6`` writes it: its keys in the library's order, its properties sorted by
    name then value (the library keeps them in a sorted set, so a duplicate pair is written once)."""
    return {"bom-ref": f"file:{path}", "hashes": [{"alg": "SHA-256", "content": sha256}], "name": path,
            "properties": [{"name": k, "value": v} for k, v in sorted(set(_file_property_pairs(size, scan)))],
            "type": "file"}


def _sha256(digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=digest)


def _licenses(license: str | None) -> list[License]:
    if not license:
        return []
    # An SPDX id or expression, or ``other:<name>`` (kept as the license's name).
    return [LicenseFactory().make_from_string(license, license_acknowledgement=LicenseAcknowledgement.CONCLUDED)]


def _hf_endpoint(version: Version) -> str:
    return hub_endpoint(version.source_endpoint)


def _purl(version: Version) -> PackageURL | None:
    """``pkg:huggingface/org/name@revision`` (``repository_url`` for another hub) of a Hugging Face upstream."""
    if version.source_kind != "hf" or not version.resolved_revision or "/" not in version.source_repo:
        return None
    namespace, _, repo = version.source_repo.partition("/")
    endpoint = _hf_endpoint(version)
    qualifiers = {} if endpoint == DEFAULT_HF_ENDPOINT else {"repository_url": endpoint}
    return PackageURL("huggingface", namespace, repo, version.resolved_revision.lower(), qualifiers or None)


def _upstream_refs(version: Version) -> list[ExternalReference]:
    if version.source_kind == "hf" and version.resolved_revision:
        url = f"{_hf_endpoint(version)}/{version.source_repo}/tree/{version.resolved_revision}"
        return [ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(url),
                                  comment="the upstream repository at the resolved revision")]
    if version.source_kind == "s3":
        return [ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(f"s3://{version.source_repo}"),
                                  comment=f"the upstream prefix (revision {version.resolved_revision})")]
    return []


def _fact(facts: dict[str, Any] | None, group: str, name: str) -> Any:
    cell = ((facts or {}).get(group) or {}).get(name)
    return cell.get("value") if isinstance(cell, dict) else None


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    return printable(value[:limit]) if isinstance(value, str) and value.strip() else None


def _texts(value: Any, limit: int) -> list[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [t for t in (_text(v, limit) for v in items[:MAX_LIST]) if t]


def _io_formats(task: str | None) -> tuple[str, str] | None:
    """Input and output formats a Hugging Face ``pipeline_tag`` states (``image-to-text``, ``text-generation``)."""
    if not task:
        return None
    found = re.fullmatch(r"([a-z]+)-to-([a-z]+)", task)
    if found:
        return found.group(1), found.group(2)
    if task in ("text-generation", "text2text-generation", "summarization", "translation", "fill-mask"):
        return "text", "text"
    return None


def _body(readme: bytes | None) -> str:
    """The README's text after its front matter (when it has one)."""
    if readme is None:
        return ""
    text = readme.decode("utf-8", "replace").lstrip("\ufeff")
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), len(lines) - 1)
        lines = lines[end + 1:]
    return "\n".join(lines)


def _sections(body: str) -> dict[str, str]:
    """Markdown sections by lower-case heading: each one's text up to the next heading, bounded."""
    out: dict[str, str] = {}
    heading, lines = None, []
    for line in [*body.splitlines(), "# end"]:
        found = _HEADING.match(line)
        if not found:
            lines.append(line)
            continue
        text = "\n".join(lines).strip()
        if heading is not None and text and heading not in out:
            out[heading] = "\n".join(printable(line) for line in text[:MAX_TEXT].splitlines())
        heading, lines = found.group(1).strip().lower(), []
    return out


@functools.cache
def _modelreg_version() -> str:
    try:
        return metadata.version("modelreg")
    except metadata.PackageNotFoundError:
        return "0.1.0"


# --- SLSA ----------------------------------------------------------------------------------------------


def slsa_statement(session: Session, version: Version) -> dict[str, Any]:
    """The version's in-toto Statement v1 with an SLSA provenance v1 predicate (unsigned)."""
    record = manifests.approval_record(session, version)
    submitter = session.get(Principal, version.submitted_by) if version.submitted_by else None
    external = {
        "model": f"{version.model.tenant.name}/{version.model.name}",
        "source": {"kind": version.source_kind, "repo": version.source_repo, "endpoint": version.source_endpoint,
                   "revision": version.requested_revision, "include": list(version.include),
                   "exclude": list(version.exclude)},
        "submittedBy": submitter.name if submitter is not None else None,
    }
    internal = {
        "version": version.number,
        "manifest": {"statementDigest": manifests.statement_digest(version.manifest_bundle),
                     "signingKeyId": version.signing_key_id},
        "policy": record["decision"],
        "approvalDigest": _sha256_hex(canonical_json(record)),
        "approvals": record["approvals"],
        "license": version.license,
        "state": version.state,
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f.path, "digest": {"sha256": f.sha256}} for f in version.files],
        "predicateType": SLSA_PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": external,
                                "internalParameters": internal,
                                "resolvedDependencies": [_upstream_descriptor(version)]},
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"modelreg": _modelreg_version()}},
                "metadata": {"invocationId": version_ref(version), "startedOn": _rfc3339(version.created_at),
                             **({"finishedOn": _rfc3339(version.sealed_at)} if version.sealed_at else {})},
            },
        },
    }


def _upstream_descriptor(version: Version) -> dict[str, Any]:
    """The upstream at its resolved revision, as an in-toto ResourceDescriptor."""
    revision = (version.resolved_revision or "").lower()
    digest = {}
    if _HEX40.match(revision):
        digest["gitCommit"] = revision
    elif _HEX64.match(revision):
        digest["sha256"] = revision
    uri = upstream_resource_uri(version.source_kind, version.source_repo, version.source_endpoint)
    out: dict[str, Any] = {"uri": uri, "name": version.source_repo}
    if digest:
        out["digest"] = digest
    elif version.resolved_revision:
        out["annotations"] = {"revision": version.resolved_revision}
    return out


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
