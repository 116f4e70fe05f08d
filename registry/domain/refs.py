"""Names and references of models and versions, parsed once and the same way everywhere.

A model is ``tenant/name``. A reference picks a version of it: ``tenant/name@3`` (a version number),
``tenant/name@prod`` (an alias), or ``tenant/name`` alone (the caller decides what that means); the
same with the ``modelreg://`` scheme, as a KServe storage URI names it. Anything else is an
:class:`InvalidRefError` saying what is wrong.

Example:
    >>> parse_ref("modelreg://acme/llama@prod")
    ModelRef(tenant='acme', name='llama', version=None, alias='prod')
    >>> str(parse_ref("acme/llama@3"))
    'acme/llama@3'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from registry.domain.errors import InvalidRefError

# \Z, not $: "$" also matches before a final newline, and "m\n" named a model.
NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,62}\Z")
"""Tenant, model, principal and alias names: lower-case letters, digits, ``.``, ``_``, ``-``; 1-63 chars."""
# A letter first: "@3" names version 3, so an alias must never look like a number.
ALIAS_RE = re.compile(r"\A[a-z][a-z0-9._-]{0,62}\Z")
"""Alias names: a lower-case letter, then up to 62 lower-case letters, digits, ``.``, ``_`` or ``-``."""
SCHEME = "modelreg://"
_VERSION_RE = re.compile(r"\A[1-9][0-9]{0,9}\Z")
_NAME_RULE = "1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit"


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A model, and at most one of a version number or an alias."""

    tenant: str
    name: str
    version: int | None = None
    alias: str | None = None

    @property
    def model(self) -> str:
        """``tenant/name``."""
        return f"{self.tenant}/{self.name}"

    def __str__(self) -> str:
        if self.version is not None:
            return f"{self.model}@{self.version}"
        if self.alias is not None:
            return f"{self.model}@{self.alias}"
        return self.model


def parse_ref(text: str) -> ModelRef:
    """Parse ``[modelreg://]tenant/name[@version|@alias]``.

    Raises:
        InvalidRefError: naming the reference and what is wrong with it.
    """
    if not isinstance(text, str):
        raise InvalidRefError(repr(text), "a reference is text")
    body = text[len(SCHEME):] if text.startswith(SCHEME) else text
    if "://" in body:
        raise InvalidRefError(text, f"the only scheme is {SCHEME}")
    model, at, selector = body.partition("@")
    if at and not selector:
        raise InvalidRefError(text, "nothing after '@': name a version number or an alias")
    if "@" in selector:
        raise InvalidRefError(text, "more than one '@'")
    tenant, slash, name = model.partition("/")
    if not slash:
        raise InvalidRefError(text, "a model is tenant/name")
    if "/" in name:
        raise InvalidRefError(text, "a model is tenant/name, with one '/'")
    _check_name(text, "tenant", tenant)
    _check_name(text, "model", name)
    if not at:
        return ModelRef(tenant, name)
    if selector.isdigit():
        if not _VERSION_RE.match(selector):
            raise InvalidRefError(text, "a version number is a positive integer without leading zeros")
        return ModelRef(tenant, name, version=int(selector))
    if not ALIAS_RE.match(selector):
        raise InvalidRefError(text, f"invalid alias name {selector!r}: use a lower-case letter, then up "
                                    "to 62 lower-case letters, digits, '.', '_' or '-'")
    return ModelRef(tenant, name, alias=selector)


def parse_model(text: str) -> ModelRef:
    """Parse ``tenant/name`` (no version, no alias), as the CLI's ``MODEL`` argument.

    Raises:
        InvalidRefError: anything else.
    """
    ref = parse_ref(text)
    if ref.version is not None or ref.alias is not None or text.startswith(SCHEME):
        raise InvalidRefError(text, "name a model as tenant/name")
    return ref


def _check_name(text: str, kind: str, value: str) -> None:
    if not value:
        raise InvalidRefError(text, f"the {kind} name is empty")
    if not NAME_RE.match(value):
        raise InvalidRefError(text, f"invalid {kind} name {value!r}: use {_NAME_RULE}")
