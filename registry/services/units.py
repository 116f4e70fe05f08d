"""The release unit of a version: its components and how they differ from the unit it replaces.

A version is one unit; its components (``registry/domain/components.py``) are recorded when it is sealed
(:func:`record_components`, table ``version_components``), with what version detail shows of its registry-held
parts, so no read computes them again or opens a part's blob. :func:`components_of` is the one place they
are read; :func:`unit_diff` compares two versions of a model (``modelreg diff``), and :func:`policy_unit` is
the ``unit`` the approval and promotion policies judge: the components, the unit replaced (``base``) and what
changed, the files whose templates a security approval must name, the suites that evaluate it, the prompt
templates each of them renders and the prompt templates that changed.

Usage (a sketch, not run as a doctest)::

    doc = unit_diff(session, principal, "acme", "llm", 3, 4)
    doc["diff"]["changed"]   # -> ['tokenizer']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, undefer

from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.db.models import Version, VersionComponent, VersionFacts
from registry.domain.components import (
    COMPONENTS,
    SERVING_PROFILE,
    Component,
    ComponentDiff,
    Member,
    diff_components,
    template_review_files,
)
from registry.domain.errors import InvalidInputError, InvalidServingProfileError, InvalidStateError, RegistryError
from registry.domain.serving_profile import fit_profile, parse_serving_profile
from registry.domain.unit_parts import (
    HELD_COMPONENTS,
    MAX_PROMPTS,
    UnitParts,
    is_held_part,
    part_text,
    profile_document,
    prompt_name,
    read_held_parts,
    serving_config,
)
from registry.services.loaders import find_version_unchecked, version_ref
from registry.storage.base import BlobStore
from registry.templating import declared_variables
from registry.templating.isolated import diff_in_child


def check_parts(parts: Mapping[str, bytes], facts: Mapping[str, Any] | None, gpus: Mapping[str, Any], *,
                runtime_margin_bytes: int, require_fit: bool = True) -> UnitParts:
    """Check a unit's registry-held parts (every path ``unit_parts.is_held_part`` names, with its bytes).

    Args:
        parts: path -> bytes of the unit's ``prompts/*.jinja`` and ``serving-profile.json``.
        facts: The unit's facts document (the capacity gate's weight and attention figures), or None.
        gpus: The GPU table (policy data ``modelreg.config.gpus``).
        runtime_margin_bytes: Bytes per GPU kept for the runtime (``serving_runtime_margin_bytes``).
        require_fit: Raise when the profile does not fit (a gate); False: return the fit, to show it.

    Raises:
        InvalidInputError: a part too large, not UTF-8, a bad prompt name, too many prompts.
        PromptTemplateError: a prompt template that does not parse or reaches for Python internals.
        InvalidServingProfileError: a profile that is not valid, or not in its canonical JSON form.
        ServingProfileDoesNotFitError: a profile that does not fit its GPUs (the arithmetic in its details).
    """
    prompts: dict[str, list[str]] = {}
    names = sorted(p for p in parts if p != SERVING_PROFILE)
    if len(names) > MAX_PROMPTS:
        raise InvalidInputError(f"{len(names)} prompt templates; a unit holds at most {MAX_PROMPTS}",
                                reason="too-many-prompts")
    for path in names:
        name = prompt_name(path)
        if name is None:
            raise InvalidInputError(f"{path[:200]}: a prompt template's name is 1-64 letters, digits, '_' or '-' "
                                    "(not starting with '-')", reason="bad-prompt-name")
        prompts[name] = declared_variables(part_text(path, parts[path]))
    profile = fit = None
    if SERVING_PROFILE in parts:
        text = part_text(SERVING_PROFILE, parts[SERVING_PROFILE])
        profile = parse_serving_profile(profile_document(text))
        if text != profile.canonical_json():
            raise InvalidServingProfileError("document", f"{SERVING_PROFILE} must be the profile's canonical JSON "
                                                         "(modelreg submit and derive write it so)")
        fit = fit_profile(profile, facts, gpus, runtime_margin_bytes=runtime_margin_bytes)
        if require_fit:
            fit.require()
    return UnitParts(prompts, profile, fit)


def _read_version(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                  number: int) -> Version:
    """``versions.read_version``, which this module cannot import (versions -> lifecycle -> stages -> units)."""
    require(principal, tenant, Permission.READ)
    return find_version_unchecked(session, tenant, name, number)


def record_components(session: Session, version: Version, components: Iterable[Component], *,
                      parts: UnitParts | None = None, parts_error: RegistryError | None = None) -> None:
    """Record the sealed version's components (replacing any an earlier attempt of its seal recorded).

    Args:
        components: The unit's components, from its files and the parts its facts split.
        parts: Its registry-held parts as :func:`check_parts` read them (prompt variables, the profile).
        parts_error: Why its registry-held parts were refused, recorded on their components instead.
    """
    session.execute(delete(VersionComponent).where(VersionComponent.version_id == version.id))
    for c in components:
        session.add(VersionComponent(
            version_id=version.id, name=c.name, digest=c.digest, member_count=len(c.members),
            members=[[m.path, m.sha256, m.part] for m in c.members], detail=_part_detail(c.name, parts, parts_error)))
    session.flush()


def _part_detail(name: str, parts: UnitParts | None, error: RegistryError | None) -> dict[str, Any] | None:
    if name not in HELD_COMPONENTS:
        return None
    if error is not None or parts is None:
        shown = error or InvalidInputError("the unit's registry-held parts were not checked")
        return {"error": {"type": shown.code, "message": shown.message}}
    if name == "prompt_templates":
        return {"prompts": parts.prompts}
    return {"profile": None if parts.profile is None else parts.profile.as_dict()}


def _recorded(session: Session, version: Version, *, members: bool) -> list[VersionComponent]:
    query = select(VersionComponent).where(VersionComponent.version_id == version.id)
    if members:
        query = query.options(undefer(VersionComponent.members))
    order = {name: i for i, name in enumerate(COMPONENTS)}
    return sorted(session.scalars(query), key=lambda r: (order.get(r.name, len(order)), r.name))


def components_of(session: Session, version: Version) -> tuple[Component, ...] | None:
    """The version's components as recorded at seal, or None until it is sealed (no unit yet)."""
    rows = _recorded(session, version, members=True)
    if not rows:
        return None
    return tuple(Component(r.name, r.digest, tuple(Member(path, sha256, part) for path, sha256, part in r.members))
                 for r in rows)


def components_document(session: Session, version: Version) -> list[dict[str, Any]] | None:
    """What ``version show`` and the API list: each component's name, digest and member count (the members
    themselves are not read)."""
    rows = _recorded(session, version, members=False)
    if not rows:
        return None
    return [{"name": r.name, "digest": r.digest, "members": r.member_count} for r in rows]


def unit_parts_document(session: Session, version: Version, *, blob_store: BlobStore,
                        policy_data: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """The unit's registry-held parts as ``version show`` prints them: each prompt template's variables, the
    serving profile and its capacity arithmetic against the operator's GPU table today (``fits`` false shown,
    not raised), or ``error`` when the parts were refused. None when the unit holds none, or is not sealed.

    Read from the recorded components (no part blob is opened), except for a unit sealed before they held the
    parts' detail (migration 0033), whose parts are read from the store, bounded. ``policy_data`` is called
    only for a unit with a serving profile (the policy engine is not loaded for others).
    """
    held = [r for r in _recorded(session, version, members=False) if r.name in HELD_COMPONENTS]
    if not held:
        return None
    if any(r.detail is None for r in held):
        return _parts_read_from_blobs(session, version, blob_store=blob_store, policy_data=policy_data)
    error = next((r.detail["error"] for r in held if "error" in r.detail), None)
    if error is not None:
        return {"prompts": [], "serving_profile": None, "error": error}
    prompts = next((r.detail.get("prompts") or {} for r in held if r.name == "prompt_templates"), {})
    document = next((r.detail.get("profile") for r in held if r.name == "serving_profile"), None)
    profile = fit = None
    if document is not None:
        row = session.get(VersionFacts, version.id)
        gpus, margin = serving_config(policy_data())
        try:
            profile = parse_serving_profile(document)
        except InvalidInputError as exc:  # a profile sealed under rules since tightened
            return {"prompts": [], "serving_profile": None, "error": {"type": exc.code, "message": exc.message}}
        fit = fit_profile(profile, row.facts if row is not None else None, gpus, runtime_margin_bytes=margin)
    return {**UnitParts(prompts, profile, fit).as_dict(), "error": None}


def _parts_read_from_blobs(session: Session, version: Version, *, blob_store: BlobStore,
                           policy_data: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`unit_parts_document` of a unit whose parts' detail migration 0033 could not record."""
    held = [f for f in version.files if is_held_part(f.path)]
    if not held or any(f.sha256 is None for f in held):
        return None
    gpus, margin = serving_config(policy_data())
    row = session.get(VersionFacts, version.id)
    try:
        data = read_held_parts(held, lambda digest, size: b"".join(blob_store.open_range(digest, 0, size)))
        parts = check_parts(data, row.facts if row is not None else None, gpus, runtime_margin_bytes=margin,
                            require_fit=False)
    except InvalidInputError as exc:
        return {"prompts": [], "serving_profile": None, "error": {"type": exc.code, "message": exc.message}}
    return {**parts.as_dict(), "error": None}


def _sealed_components(session: Session, version: Version) -> tuple[Component, ...]:
    found = components_of(session, version)
    if found is None:
        raise InvalidStateError(f"{version_ref(version)} is {version.state}: it is not sealed yet (no unit)",
                                state=version.state)
    return found


def unit_diff(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, old: int,
              new: int, *, blob_store: BlobStore) -> dict[str, Any]:
    """The component diff from ``tenant/name@old`` to ``@new``: what changed, member by member, and each
    changed chat template rendered old and new on the standard conversations.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        VersionNotFoundError, ModelNotFoundError, TenantNotFoundError: no such version.
        InvalidStateError: either version is not sealed yet.
    """
    before = _read_version(session, principal, tenant, name, old)
    after = _read_version(session, principal, tenant, name, new)
    return {"model": f"{tenant}/{name}", **diff_document(session, before, after, blob_store=blob_store)}


def diff_document(session: Session, before: Version, after: Version, *,
                  blob_store: BlobStore | None = None) -> dict[str, Any]:
    """``{from, to, components: {from, to}, diff, template_review_files, templates}`` of two versions (no
    permission check: the caller has read both). ``templates`` (with a ``blob_store``): per chat-template
    member added or changed, the rendered diff (:mod:`registry.templating.isolated`).

    Raises:
        InvalidStateError: either version is not sealed yet.
        BlobNotFoundError, BlobStoreError: a template's bytes cannot be read.
    """
    old_components, new_components = _sealed_components(session, before), _sealed_components(session, after)
    diff = diff_components(old_components, new_components)
    doc = {"from": before.number, "to": after.number,
           "components": {"from": {c.name: c.digest for c in old_components},
                          "to": {c.name: c.digest for c in new_components}},
           "diff": diff.as_dict(), "template_review_files": list(template_review_files(diff))}
    if blob_store is not None:
        doc["templates"] = _rendered_template_diffs(session, diff, before, after, blob_store)
    return doc


MAX_RENDERED_TEMPLATES = 8
"""Chat templates one diff renders (each in a child process); the rest are listed, not rendered."""


def _rendered_template_diffs(session: Session, diff: ComponentDiff, before: Version, after: Version,
                             blob_store: BlobStore) -> list[dict[str, Any]]:
    change = next((c for c in diff.changes if c.name == "chat_templates"), None)
    if change is None:
        return []
    old_files = {f.path: f.sha256 for f in before.files}
    new_files = {f.path: f.sha256 for f in after.files}
    added = {m.name for m in change.added}
    tokens = _special_tokens(session, after)
    out = []
    for i, member in enumerate((*change.added, *change.changed)):
        if i >= MAX_RENDERED_TEMPLATES:
            out.append({"member": member.name, "rendered": None, "suspicious": True,
                        "reason": f"over the {MAX_RENDERED_TEMPLATES} templates one diff renders"})
            continue
        new = template_text(member, new_files, blob_store)
        old = None if member.name in added else template_text(member, old_files, blob_store)
        unreadable = next((t for t in (new, old) if isinstance(t, TemplateUnreadable)), None)
        if unreadable is not None:
            out.append({"member": member.name, "rendered": None, "reason": unreadable.reason, "suspicious": True})
            continue
        rendered = diff_in_child(old, new, variables=tokens)
        out.append({"member": member.name, "rendered": rendered, "suspicious": rendered["suspicious"]})
    return out


@dataclass(frozen=True)
class TemplateUnreadable:
    """Why a template member's text could not be read for rendering."""

    reason: str


MAX_TEMPLATE_FILE_BYTES = 4 << 20
"""A template (or the JSON document holding one) read for rendering is at most this large."""


def _read_small(files: dict[str, str | None], path: str, blob_store: BlobStore) -> bytes | TemplateUnreadable:
    digest = files.get(path)
    if digest is None:
        return TemplateUnreadable(f"{path} is not in the version")
    data = b""
    for piece in blob_store.open_range(digest):
        data += piece
        if len(data) > MAX_TEMPLATE_FILE_BYTES:
            return TemplateUnreadable(f"{path} is over {MAX_TEMPLATE_FILE_BYTES} bytes")
    return data


def template_text(member: Member, files: dict[str, str | None],
                  blob_store: BlobStore) -> str | None | TemplateUnreadable:
    """The text of a chat-template member: a template file, or the part of a JSON document it names.

    Returns:
        The template; None when the version has no such member; :class:`TemplateUnreadable` when it
        cannot be rendered here (a GGUF's template, a file too large, not UTF-8, not the expected JSON).
    """
    if member.path not in files:
        return None
    if member.path.endswith((".gguf", ".gguf.part")):
        return TemplateUnreadable("a GGUF file's template is not rendered here (its digest is compared)")
    data = _read_small(files, member.path, blob_store)
    if isinstance(data, TemplateUnreadable):
        return data
    try:
        text = data.decode("utf-8")
        if not member.path.endswith(".json"):
            return text
        value = json.loads(text).get("chat_template")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return TemplateUnreadable(f"{member.path} is not UTF-8 JSON holding a chat_template")
    name = member.part.split("/", 1)[1] if member.part and "/" in member.part else None
    if isinstance(value, list):
        value = next((i.get("template") for i in value
                      if isinstance(i, dict) and i.get("name") == (name or "default")), None)
    return value if isinstance(value, str) else TemplateUnreadable(f"{member.name} is not a template string")


def _special_tokens(session: Session, version: Version) -> dict[str, str]:
    """The special tokens a template sees (``bos_token``...), as the facts readers recorded them at seal."""
    row = session.get(VersionFacts, version.id)
    cells = (row.facts.get("tokenizer") if row is not None else None) or {}
    out = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = (cells.get(key) or {}).get("value") if isinstance(cells.get(key), dict) else None
        if isinstance(value, str):
            out[key] = value
    return out


def policy_unit(session: Session, version: Version, base: Version | None, base_reason: str | None,
                suites: Mapping[str, Sequence[str]]) -> dict[str, Any] | None:
    """``input.unit``: the version's components, the unit it replaces and the diff, for the policies.

    Args:
        version: The version judged (its files stored).
        base: The version it replaces (the alias's current target, or the baseline alias's), or None.
        base_reason: How ``base`` was chosen (``alias:prod``), shown in messages.
        suites: The eval suites that apply to ``version`` -> the prompt templates their eval sets render.

    Returns:
        None until the version is sealed; else ``{components, base, changed,
        template_review_files, suites, suite_prompts, prompts_changed}``. With no base every component counts
        as changed (and every prompt template), and no template is a *change* to review (a first version's
        templates are checked by the scanners).
    """
    components = components_of(session, version)
    if components is None:
        return None
    base_components = components_of(session, base) if base is not None and base.id != version.id else None
    diff = diff_components(base_components or (), components)
    prompts = next((c for c in diff.changes if c.name == "prompt_templates"), None)
    return {
        "components": {c.name: c.digest for c in components},
        "base": None if base_components is None else {
            "version": base.number, "reason": base_reason, "components": {c.name: c.digest for c in base_components}},
        "changed": list(diff.changed),
        "template_review_files": [] if base_components is None else list(template_review_files(diff)),
        "suites": sorted(suites),
        "suite_prompts": {name: sorted(read) for name, read in sorted(suites.items())},
        "prompts_changed": [] if prompts is None else sorted(
            {prompt_name(m.path) or m.path for m in (*prompts.added, *prompts.removed, *prompts.changed)}),
    }
