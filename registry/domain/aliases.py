"""Aliases: names (``prod``, ``canary``, ``staging``) that point at a version of a model, pure rules.

An alias's value is an :class:`AliasTarget`: a main version and, optionally, a :class:`Canary`: a
second version and the tenants that receive it. :func:`resolve` is the one function that says which
version a caller gets; :func:`rollback_target` reads an alias's history and says where a rollback
goes. Nothing here touches a database.

Decisions a reader might question:

- Canary tenants are names of the tenants a request is served for (the resolver says which; without
  it, the model's own tenant). Routing is not a permission: both versions are approved and readable.
- A revoked target never resolves, for the main route or the canary route alike: the caller gets a
  :class:`RevokedError` naming the version and the reason, never a silent fall-back to the other one.
- A rollback undoes the newest move not undone yet, and restores the whole value it replaced (main
  version and canary). A second rollback goes one step further back, it does not redo the move the
  first one undid: ``1 → 2 → 3``, rollback gives 2, rollback again gives 1 (like an undo stack). A
  rollback target that cannot be released (say, revoked since) is refused by the promotion policy;
  an older one is never picked in its place.

Example:
    >>> prod = AliasTarget(3, Canary(4, frozenset({"beta"})))
    >>> resolve("acme/llm", "prod", prod, "beta", revoked={}).version
    4
    >>> resolve("acme/llm", "prod", prod, "acme", revoked={}).version
    3
    >>> history = [Move(Action.PROMOTE, None, AliasTarget(1)), Move(Action.PROMOTE, AliasTarget(1), prod)]
    >>> rollback_target("acme/llm", "prod", history)
    AliasTarget(version=1, canary=None)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from registry.domain.errors import InvalidInputError, NothingToRollBackError, RevokedError
from registry.domain.refs import ALIAS_RE, NAME_RE

MAX_CANARY_TENANTS = 100


def validate_alias_name(name: str) -> str:
    """Return ``name`` if it is an alias name.

    Raises:
        InvalidInputError: anything else (field ``alias``).
    """
    if not isinstance(name, str) or not ALIAS_RE.match(name):
        raise InvalidInputError(
            f"invalid alias name {name!r}: use a lower-case letter, then up to 62 lower-case letters, "
            "digits, '.', '_' or '-'", field="alias", value=str(name))
    return name


@dataclass(frozen=True, slots=True)
class Canary:
    """A second version, served to ``tenants`` only."""

    version: int
    tenants: frozenset[str]


@dataclass(frozen=True, slots=True)
class AliasTarget:
    """What an alias points at: a main version, and maybe a canary."""

    version: int
    canary: Canary | None = None


def make_target(version: int, canary_version: int | None = None,
                canary_tenants: Iterable[str] = ()) -> AliasTarget:
    """Check and build an alias value.

    Args:
        version: The main version, served to every tenant not in the canary.
        canary_version: A second version, or None for no canary.
        canary_tenants: The tenants that get the canary version (one at least, with a canary).

    Raises:
        InvalidInputError: a version that is not a positive number, a canary equal to the main
            version, a canary without tenants (or tenants without a canary), too many tenants, or
            a tenant that is not a tenant name.
    """
    tenants = list(canary_tenants)
    for number in (version, canary_version):
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise InvalidInputError(f"a version number is a positive integer, not {number!r}",
                                    field="version")
    if canary_version is None:
        if tenants:
            raise InvalidInputError("canary tenants need a canary version", field="canary.version")
        return AliasTarget(version)
    if canary_version == version:
        raise InvalidInputError(f"the canary version must differ from the main version ({version})",
                                field="canary.version", version=version)
    if not tenants:
        raise InvalidInputError("a canary needs at least one tenant to receive it", field="canary.tenants")
    if len(set(tenants)) > MAX_CANARY_TENANTS:
        raise InvalidInputError(f"a canary goes to at most {MAX_CANARY_TENANTS} tenants",
                                field="canary.tenants", limit=MAX_CANARY_TENANTS)
    for tenant in tenants:
        if not isinstance(tenant, str) or not NAME_RE.match(tenant):
            raise InvalidInputError(f"invalid canary tenant {tenant!r}: not a tenant name",
                                    field="canary.tenants", value=str(tenant))
    return AliasTarget(version, Canary(canary_version, frozenset(tenants)))


@dataclass(frozen=True, slots=True)
class Resolution:
    """The version a caller gets through an alias, and whether it came through the canary."""

    version: int
    canary: bool


def resolve(model: str, alias: str, target: AliasTarget, tenant: str | None,
            revoked: Mapping[int, str]) -> Resolution:
    """The version of ``target`` that a request served for ``tenant`` gets.

    Args:
        model: ``tenant/name`` of the model, for the error.
        alias: The alias's name, for the error.
        target: The alias's value.
        tenant: The tenant the request is served for; None is nobody's canary.
        revoked: Revoked version numbers -> the reason each was revoked.

    Raises:
        RevokedError: the version this tenant gets is revoked (naming it and the reason).
    """
    canary = target.canary is not None and tenant is not None and tenant in target.canary.tenants
    number = target.canary.version if canary and target.canary else target.version
    if number in revoked:
        raise RevokedError(model, number, revoked[number], alias=alias)
    return Resolution(number, canary)


class Action(str, enum.Enum):
    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class Move:
    """One entry of an alias's history: what it pointed at before (None: it did not exist) and after."""

    action: Action
    before: AliasTarget | None
    after: AliasTarget


def rollback_target(model: str, alias: str, history: Sequence[Move]) -> AliasTarget:
    """Where a rollback moves the alias: the value before the newest promote not undone yet.

    Each rollback in the history undid one promote (the newest one not undone before it), so
    walking back from the newest entry, every rollback skips one promote.

    Args:
        history: The alias's moves, oldest first.

    Raises:
        NothingToRollBackError: every promote was undone already, or the one to undo created the
            alias (there is nothing before it).
    """
    undone = 0
    for move in reversed(history):
        if move.action is Action.ROLLBACK:
            undone += 1
        elif undone:
            undone -= 1
        elif move.before is None:
            break
        else:
            return move.before
    raise NothingToRollBackError(model, alias)
