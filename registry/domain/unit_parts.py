"""The registry-held parts of a release unit, checked: prompt templates and the serving profile.

A unit may hold, beside what its upstream published, named prompt templates at ``prompts/NAME.jinja`` and
a serving profile at ``serving-profile.json`` (``registry/domain/components.py`` fixes the places). They
arrive through ``modelreg derive`` (checked before the version exists, so a bad part is a 422 at once) or
as files of a submission (checked when the version is sealed, and the version fails with the same error).
Either way ``registry.services.units.check_parts`` decides, from the parts' bytes and the version's facts, with
what this module reads of them:

- each prompt template is UTF-8 Jinja that parses in the sandbox and reaches for no Python internals; its
  declared variables are the ones it reads (``registry.templating.declared_variables``);
- the serving profile is the canonical JSON of a valid profile (``parse_serving_profile``), so its digest
  names what is served, and it fits its GPUs (``fit_profile``, with the operator's GPU table and runtime
  margin from the policy data); refused with the arithmetic when it does not.

Example:
    >>> prompt_path("support"), prompt_name("prompts/support.jinja"), prompt_name("prompts/a/b.jinja")
    ('prompts/support.jinja', 'support', None)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from registry.domain.components import PROMPT_SUFFIX, PROMPTS_DIR, SERVING_PROFILE, classify
from registry.domain.errors import InvalidInputError, InvalidServingProfileError
from registry.domain.serving_profile import CapacityFit, ServingProfile

MAX_PROMPTS = 64
"""Prompt templates one unit may hold."""
MAX_PART_BYTES = 256 * 1024
"""Bytes of one registry-held part (a template is at most the sandbox's character bound anyway)."""
HELD_COMPONENTS = frozenset({"prompt_templates", "serving_profile"})
"""The components whose members are registry-held parts (checked by :func:`check_parts`)."""
_PROMPT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def prompt_path(name: str) -> str:
    """Where the prompt template ``name`` lives in a unit.

    Raises:
        InvalidInputError: ``name`` is not 1-64 letters, digits, ``_`` or ``-`` (not starting with ``-``).
    """
    if not isinstance(name, str) or not _PROMPT_NAME_RE.match(name):
        raise InvalidInputError(f"prompt template name {str(name)[:80]!r} must be 1-64 letters, digits, '_' or '-' "
                                "(not starting with '-')", reason="bad-prompt-name")
    return f"{PROMPTS_DIR}{name}{PROMPT_SUFFIX}"


def prompt_name(path: str) -> str | None:
    """The prompt template's name if ``path`` is one (``prompts/NAME.jinja`` with a valid name), else None."""
    if not path.startswith(PROMPTS_DIR) or not path.endswith(PROMPT_SUFFIX):
        return None
    name = path[len(PROMPTS_DIR):-len(PROMPT_SUFFIX)]
    return name if _PROMPT_NAME_RE.match(name) else None


def is_held_part(path: str) -> bool:
    """Whether ``path`` is where a registry-held part lives (what :func:`check_parts` must be given): the
    places the components table gives ``prompt_templates`` and ``serving_profile``."""
    return classify(path) in HELD_COMPONENTS


def read_held_parts(files: Iterable[Any], read: Callable[[str, int], bytes],
                    given: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """The bytes of the unit's registry-held parts (what :func:`check_parts` takes), counted and sized before a
    byte is read: more prompt templates than a unit may hold, or a part larger than a part may be, is refused
    unread (a hostile upstream may list thousands).

    Args:
        files: The unit's files (anything with ``path``, ``size`` and ``sha256``).
        read: ``(sha256, size) -> bytes`` from the blob store.
        given: path -> bytes of parts already in hand (a derive's new ones): not read again.

    Raises:
        InvalidInputError: too many prompt templates, or a part too large.
    """
    given = given or {}
    held = [f for f in files if is_held_part(f.path)]
    if sum(f.path != SERVING_PROFILE for f in held) > MAX_PROMPTS:
        raise InvalidInputError(f"a unit holds at most {MAX_PROMPTS} prompt templates", reason="too-many-prompts")
    for f in held:
        if f.path not in given and f.size > MAX_PART_BYTES:
            raise InvalidInputError(f"{f.path} is {f.size} bytes; a registry-held part is at most {MAX_PART_BYTES}",
                                    reason="part-too-large", path=f.path)
    return {f.path: given[f.path] if f.path in given else read(f.sha256, f.size) for f in held}


@dataclass(frozen=True)
class UnitParts:
    """A unit's checked registry-held parts.

    Attributes:
        prompts: name -> the variables the template reads, sorted.
        profile: The serving profile, or None.
        fit: How the profile fits its GPUs (the arithmetic), or None without a profile.
    """

    prompts: dict[str, list[str]] = field(default_factory=dict)
    profile: ServingProfile | None = None
    fit: CapacityFit | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"prompts": [{"name": n, "variables": v} for n, v in sorted(self.prompts.items())],
                "serving_profile": None if self.profile is None else {
                    **self.profile.as_dict(), "digest": self.profile.digest,
                    "capacity": None if self.fit is None else self.fit.as_dict()}}


def part_text(path: str, data: bytes) -> str:
    if len(data) > MAX_PART_BYTES:
        raise InvalidInputError(f"{path} is {len(data)} bytes; a registry-held part is at most {MAX_PART_BYTES}",
                                reason="part-too-large", path=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path} is not UTF-8 text", reason="part-not-text", path=path) from None
    control = _CONTROL_RE.search(text)
    if control is not None:
        raise InvalidInputError(f"{path} holds control character U+{ord(control.group()):04X} at {control.start()} "
                                "(a template is text: tabs and line breaks only)", reason="part-not-text", path=path)
    return text


def profile_document(text: str, path: str = SERVING_PROFILE) -> Any:
    """The JSON document of a serving profile file (bounded, duplicate keys refused)."""
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise InvalidServingProfileError("document", "a key appears twice")
        return dict(pairs)

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError):
        raise InvalidServingProfileError("document", f"{path} is not a JSON document") from None


def serving_config(policy_data: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
    """The GPU table and runtime margin of the policy data (``modelreg.config``); empty and 0 when absent."""
    config = policy_data.get("modelreg", {}).get("config", {}) if isinstance(policy_data, Mapping) else {}
    config = config if isinstance(config, Mapping) else {}
    gpus = config.get("gpus")
    margin = config.get("serving_runtime_margin_bytes")
    return (gpus if isinstance(gpus, Mapping) else {},
            margin if isinstance(margin, int) and not isinstance(margin, bool) and margin >= 0 else 0)
