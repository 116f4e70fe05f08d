"""LoRA adapters: a version bound to its base version's weights digest, and checked against that base at seal.

An adapter is a version of its own model submitted with ``adapter_of`` (``acme/llm@3``, ``acme/llm@prod``, or
``sha256:<hex>``, the digest of the base version's signed statement). :func:`resolve_base` finds the base for
the submitter (readable, sealed, not revoked, failed, rejected or deleted, not an adapter itself) and
:func:`bind` records the binding (table ``adapter_bindings``) in the submission's transaction: the base version,
the digest of its ``weights`` component and of its signed statement. When the adapter's files are sealed,
:func:`check_files` reads its ``adapter_config.json`` and safetensors header and the base's safetensors headers
(headers only; a pickle is never read) and :func:`conclude_check` records the outcome of
``registry/domain/adapters.py``'s check, returning the refusal that fails the version (every reason listed).
:func:`statement_binding` is what the adapter's signed statement says of its base (``predicate.modelreg.
adapter_of``), and :func:`verify_binding` holds a version's recorded binding against its signature.

Usage (a sketch, not run as a doctest)::

    base = adapters.resolve_base(session, principal, "acme", "llm-support", "acme/llm@3")
    adapters.bind(session, version, base)              # in the submission's transaction
    adapters.binding_document(version)                 # {"model": "acme/llm", "version": 3, "weights_digest": ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, Permission
from registry.db.models import AdapterBinding, Model, Tenant, Version, VersionComponent, VersionFile
from registry.domain import adapters as rules
from registry.domain.errors import (
    AdapterBaseNotFoundError,
    AdapterBaseUnusableError,
    AdapterBindingMismatchError,
    InvalidInputError,
    InvalidRefError,
    NotFoundError,
    RegistryError,
    RevokedError,
)
from registry.domain.files import is_sha256
from registry.domain.refs import SCHEME, parse_ref
from registry.domain.states import VersionState
from registry.scanning import safetensors
from registry.scanning._formatio import DuplicateKeyError, strict_json_loads
from registry.scanning.model import Severity
from registry.services import aliases
from registry.services.loaders import find_version_unchecked, statement_binding, version_ref
from registry.signing.bundle import verify_model_bundle
from registry.signing.keys import VerifyingKey
from registry.storage.base import BlobStore

DIGEST_PREFIX = "sha256:"
MAX_HEADER_BYTES = 32 << 20
"""A safetensors header read for the check, at most (the facts readers' bound)."""
MAX_BASE_HEADER_BYTES = 256 << 20
"""The base's headers read for one check, in all (a model of many shards reads a few MB)."""

_ENDED = {VersionState.FAILED.value: "it failed", VersionState.REJECTED.value: "it was rejected",
          VersionState.REVOKED.value: "it was revoked"}
"""The outcomes after which a version is no base (the state is the refusal's ``reason``)."""


@dataclass(frozen=True)
class BaseChoice:
    """The base version a submission names, checked, and what the binding records of it."""

    version: Version
    weights_digest: str
    requested: str


# --- binding at submission ------------------------------------------------------------------------------


def resolve_base(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                 ref: str) -> BaseChoice:
    """The base version ``ref`` names for an adapter of ``tenant/name`` submitted by ``principal``.

    Args:
        ref: ``TENANT/NAME@N``, ``TENANT/NAME@ALIAS`` (resolved now, for ``tenant``: the binding is to the
            version, never to the alias), with or without ``modelreg://``, or ``sha256:<hex>``: the digest of
            the base version's signed statement (its ``manifest_digest``).

    Raises:
        InvalidInputError, InvalidRefError: ``ref`` is no reference to a version.
        AdapterBaseNotFoundError: no such version, or one the principal may not read.
        AdapterBaseUnusableError: the version cannot be a base (``reason`` says why).
    """
    if not isinstance(ref, str) or not ref or len(ref) > rules.MAX_BASE_REF_LENGTH:
        raise InvalidInputError(f"adapter_of is a version reference of at most {rules.MAX_BASE_REF_LENGTH} characters",
                                field="adapter_of")
    if ref.startswith(DIGEST_PREFIX):
        base = _by_digest(session, principal, ref)
    else:
        base = _by_ref(session, principal, tenant, ref)
    _require_usable(base, adapter_model=f"{tenant}/{name}")
    digest = weights_digest_of(session, base)
    if digest is None:
        raise AdapterBaseUnusableError(version_ref(base), "no-weights", "it has no weights component")
    return BaseChoice(base, digest, ref)


def _may_read(principal: AuthenticatedPrincipal, tenant: str) -> bool:
    return Permission.READ in principal.permissions(tenant)


def _by_ref(session: Session, principal: AuthenticatedPrincipal, tenant: str, text: str) -> Version:
    try:
        parsed = parse_ref(text)
    except InvalidRefError as exc:
        raise InvalidRefError(text, f"adapter_of: {exc.details.get('reason') or exc.message}") from None
    if parsed.version is None and parsed.alias is None:
        raise InvalidInputError(f"adapter_of {text!r} names a model, not a version: add @VERSION or @ALIAS, or give "
                                "the base version's digest sha256:...", field="adapter_of")
    if not _may_read(principal, parsed.tenant):
        raise AdapterBaseNotFoundError(text)
    try:
        if parsed.alias is not None:
            return aliases.resolve(session, principal, parsed.tenant, parsed.name, parsed.alias,
                                   for_tenant=tenant).version
        assert parsed.version is not None
        return find_version_unchecked(session, parsed.tenant, parsed.name, parsed.version)
    except RevokedError as exc:
        raise AdapterBaseUnusableError(text, "revoked", exc.message) from None
    except NotFoundError as exc:
        raise AdapterBaseNotFoundError(text, exc.message) from None


def _by_digest(session: Session, principal: AuthenticatedPrincipal, text: str) -> Version:
    digest = text[len(DIGEST_PREFIX):]
    if not is_sha256(digest):
        raise InvalidInputError(f"adapter_of {text[:80]!r}: a digest is sha256: and 64 lower-case hex digits",
                                field="adapter_of")
    rows = session.execute(
        select(Version, Tenant.name).join(Model, Model.id == Version.model_id)
        .join(Tenant, Tenant.id == Model.tenant_id).where(Version.manifest_digest == digest).order_by(Version.id)).all()
    readable = [version for version, tenant in rows if _may_read(principal, tenant)]
    if not readable:
        raise AdapterBaseNotFoundError(text)
    return readable[0]


def _require_usable(base: Version, *, adapter_model: str | None = None) -> None:
    ref = version_ref(base)
    if base.deleted_at is not None:
        raise AdapterBaseUnusableError(ref, "deleted", "a retention rule deleted it")
    if base.state in _ENDED:
        raise AdapterBaseUnusableError(ref, base.state, _ENDED[base.state], state=base.state)
    if base.sealed_at is None:
        raise AdapterBaseUnusableError(ref, "not-sealed", "it is not sealed yet", state=base.state)
    if base.adapter_binding is not None:
        raise AdapterBaseUnusableError(ref, "adapter", "it is an adapter itself (an adapter binds to a base model)")
    if adapter_model is not None and adapter_model == f"{base.model.tenant.name}/{base.model.name}":
        raise AdapterBaseUnusableError(ref, "same-model", "an adapter is a version of its own model, not of its "
                                                          "base's (submit it with --model TENANT/ADAPTER-NAME)")


def weights_digest_of(session: Session, version: Version) -> str | None:
    """The digest of a sealed version's ``weights`` component (recorded at seal), or None."""
    return session.scalar(select(VersionComponent.digest).where(VersionComponent.version_id == version.id,
                                                                VersionComponent.name == "weights"))


def bind(session: Session, version: Version, base: BaseChoice) -> AdapterBinding:
    """Record that ``version`` is an adapter of ``base`` (flushed with the caller's transaction)."""
    binding = AdapterBinding(version_id=version.id, base_version_id=base.version.id,
                             weights_digest=base.weights_digest, base_manifest_digest=base.version.manifest_digest,
                             requested=base.requested)
    version.adapter_binding = binding
    session.flush()
    return binding


def key_of(base: BaseChoice | None) -> str | None:
    """What a binding adds to a submission's source key: the same files bound to another base are another version."""
    return None if base is None else base.version.manifest_digest


# --- reading a binding ----------------------------------------------------------------------------------


def binding_document(version: Version) -> dict[str, Any] | None:
    """The ``adapter_of`` of a version's JSON: the signed binding, what was asked for, and the check at seal."""
    signed = statement_binding(version)
    if signed is None:
        return None
    binding = version.adapter_binding
    return {**signed, "requested": binding.requested, "check": binding.check}


def adapters_bound_to_unchecked(session: Session, weights_digest: str) -> list[Version]:
    """Every adapter version bound to base weights with this digest, oldest first (no authorization check:
    for services that checked their caller, and jobs)."""
    return list(session.scalars(select(Version).join(AdapterBinding, AdapterBinding.version_id == Version.id)
                                .where(AdapterBinding.weights_digest == weights_digest).order_by(Version.id)))


def signed_binding(bundle: Mapping[str, Any], key: VerifyingKey) -> dict[str, Any] | None:
    """The binding a version's model-signing bundle carries, once its signature verified (None: not an adapter).

    Raises:
        SignatureError: the bundle does not verify with ``key``.
    """
    statement = verify_model_bundle(bundle, key)
    modelreg = statement.get("predicate", {}).get("modelreg")
    return modelreg.get("adapter_of") if isinstance(modelreg, dict) else None


def verify_binding(version: Version, key: VerifyingKey) -> None:
    """Hold ``version``'s recorded binding against what its signature covers; return nothing when they agree.

    Raises:
        SignatureError: the bundle does not verify.
        AdapterBindingMismatchError: the recorded binding and the signed one differ (or one of them is missing).
    """
    signed = signed_binding(version.manifest_bundle or {}, key)
    recorded = statement_binding(version)
    if signed != recorded:
        raise AdapterBindingMismatchError(version_ref(version), signed=signed, recorded=recorded)


# --- the check at seal ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesCheck:
    """What :func:`check_files` found, before the seal's write lock."""

    check: rules.AdapterCheck
    base_ref: str


def check_files(version: Version, blob_store: BlobStore) -> FilesCheck | None:
    """Read an adapter's files and its base's safetensors headers and check them (None: not an adapter).

    Only headers are read (``8 + N`` bytes a file); ``adapter_model.bin`` is never opened.

    Raises:
        BlobNotFoundError, BlobStoreError: the store lost a blob or cannot be reached (the seal is retried).
    """
    binding = version.adapter_binding
    if binding is None:
        return None
    base = binding.base
    stored = {f.path: f for f in version.files if f.sha256 is not None}
    adapter = _read_adapter(stored, blob_store)
    base_tensors, base_error = _read_base(base.files, blob_store)
    names = _base_names(base)
    return FilesCheck(rules.check_adapter(adapter, base_tensors, names, base_error=base_error), version_ref(base))


def conclude_check(session: Session, version: Version, found: FilesCheck | None) -> RegistryError | None:
    """Record the check on the binding (under the seal's lock) and return why the version fails, or None.

    The base is checked again: one revoked, failed or deleted since the submission fails the adapter.
    """
    binding = version.adapter_binding
    if binding is None or found is None:
        return None
    binding.check = found.check.as_dict()
    session.flush()
    try:
        _require_usable(binding.base)
        found.check.require(found.base_ref)
    except RegistryError as exc:
        return exc
    return None


def _base_names(base: Version) -> set[str]:
    """The names a ``base_model_name_or_path`` may give the base without a finding."""
    model = f"{base.model.tenant.name}/{base.model.name}"
    names = {model, f"{SCHEME}{model}", f"{model}@{base.number}", f"{SCHEME}{model}@{base.number}"}
    if base.source_kind == "hf":
        names |= {base.source_repo, f"hf://{base.source_repo}"}
    return names


def _read_adapter(stored: Mapping[str, VersionFile], blob_store: BlobStore) -> rules.AdapterInput:
    config: Any = None
    config_error: tuple[str, str] | None = None
    row = stored.get(rules.ADAPTER_CONFIG)
    if row is None:
        config_error = ("adapter.config-missing", f"the adapter has no {rules.ADAPTER_CONFIG} at its root")
    elif row.size > rules.MAX_CONFIG_BYTES:
        config_error = ("adapter.config-invalid", f"{rules.ADAPTER_CONFIG} is {row.size} bytes, over the "
                                                  f"{rules.MAX_CONFIG_BYTES} read")
    else:
        raw = b"".join(blob_store.open_range(row.sha256, 0, row.size))
        try:
            config = strict_json_loads(raw.decode("utf-8"))
        except DuplicateKeyError as exc:
            config_error = ("adapter.config-invalid", f"{rules.ADAPTER_CONFIG} repeats key {exc.key!r}: readers "
                                                      "disagree on which wins")
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            config_error = ("adapter.config-invalid", f"{rules.ADAPTER_CONFIG} is not JSON: {exc}"[:300])
    weights = stored.get(rules.ADAPTER_SAFETENSORS)
    if weights is None:
        return rules.AdapterInput(config, config_error, pickle_only=rules.ADAPTER_PICKLE in stored)
    tensors, error, _ = _header(weights, blob_store)
    return rules.AdapterInput(config, config_error, tensors=tensors, tensors_error=error)


def _read_base(files: list[VersionFile], blob_store: BlobStore) -> tuple[dict[str, rules.TensorSpec] | None,
                                                                          str | None]:
    shards = sorted((f for f in files if f.path.endswith(".safetensors") and f.sha256), key=lambda f: f.path)
    if not shards:
        return None, "the base holds no safetensors weights (GGUF or pickle weights cannot be checked against)"
    tensors: dict[str, rules.TensorSpec] = {}
    budget = MAX_BASE_HEADER_BYTES
    for shard in shards:
        found, error, size = _header(shard, blob_store, limit=min(budget, MAX_HEADER_BYTES))
        if found is None:
            return None, f"{shard.path}: {error}"
        budget -= size
        tensors.update(found)
    return tensors, None


def _header(row: VersionFile, blob_store: BlobStore, *, limit: int = MAX_HEADER_BYTES
            ) -> tuple[dict[str, rules.TensorSpec] | None, str | None, int]:
    """A safetensors file's tensors from its header alone (and the header's size), or why they cannot be read."""
    reader = blob_store.open_seekable(row.sha256)
    try:
        header, findings = safetensors.read_header(reader, row.size, max_header_size=limit)
    finally:
        reader.close()
    if header is None:
        flaw = next((f for f in findings if f.severity is Severity.UNSAFE), None)
        return None, (f"{flaw.rule_id}: {flaw.message}" if flaw else "unreadable header")[:300], 0
    return {t.name: rules.TensorSpec(t.dtype, tuple(t.shape)) for t in header.tensors}, None, header.header_size
