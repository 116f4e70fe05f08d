"""Alias rules, pure: names, values, resolution for a tenant, and where a rollback goes."""

from __future__ import annotations

import pytest

from registry.domain.aliases import (
    MAX_CANARY_TENANTS,
    Action,
    AliasTarget,
    Canary,
    Move,
    make_target,
    resolve,
    rollback_target,
    validate_alias_name,
)
from registry.domain.errors import InvalidInputError, InvalidRefError, NothingToRollBackError, RevokedError
from registry.domain.refs import parse_ref

M = "acme/llm"


@pytest.mark.parametrize("name", ["prod", "canary", "staging", "v1.2", "eu-west_1", "a" * 63])
def test_alias_names(name):
    assert validate_alias_name(name) == name
    assert parse_ref(f"{M}@{name}").alias == name


@pytest.mark.parametrize("name", ["", "3", "1a", "Prod", "-x", "a" * 64, "prod\n", "pr od", "pród"])
def test_bad_alias_names(name):
    with pytest.raises(InvalidInputError):
        validate_alias_name(name)


def test_a_ref_cannot_name_an_alias_that_looks_like_a_number():
    with pytest.raises(InvalidRefError, match="invalid alias name '1a'"):
        parse_ref(f"{M}@1a")


def test_make_target():
    assert make_target(3) == AliasTarget(3)
    canaried = AliasTarget(3, Canary(4, frozenset({"beta", "gamma"})))
    assert make_target(3, 4, ["beta", "beta", "gamma"]) == canaried


@pytest.mark.parametrize("args,field", [
    ((0,), "version"),
    ((3, 3, ["beta"]), "canary.version"),
    ((3, 4, []), "canary.tenants"),
    ((3, None, ["beta"]), "canary.version"),
    ((3, 4, ["Beta"]), "canary.tenants"),
    ((3, 4, [f"t{i}" for i in range(MAX_CANARY_TENANTS + 1)]), "canary.tenants"),
])
def test_bad_targets(args, field):
    with pytest.raises(InvalidInputError) as err:
        make_target(*args)
    assert err.value.details["field"] == field


CANARIED = AliasTarget(3, Canary(4, frozenset({"beta", "gamma"})))


@pytest.mark.parametrize("tenant,version,canary", [
    ("beta", 4, True), ("gamma", 4, True), ("acme", 3, False), ("other", 3, False), (None, 3, False),
])
def test_a_canary_tenant_gets_the_canary_and_every_other_the_main_version(tenant, version, canary):
    found = resolve(M, "prod", CANARIED, tenant, revoked={})
    assert (found.version, found.canary) == (version, canary)


def test_without_a_canary_everyone_gets_the_main_version():
    assert resolve(M, "prod", AliasTarget(3), "beta", revoked={}).version == 3


def test_a_revoked_target_does_not_resolve_and_says_which_and_why():
    with pytest.raises(RevokedError) as err:
        resolve(M, "prod", CANARIED, "acme", revoked={3: "CVE-2099-1"})
    assert err.value.code == "revoked"
    assert err.value.details == {"model": M, "version": 3, "reason": "CVE-2099-1", "alias": "prod"}
    assert "acme/llm@3" in err.value.message and "CVE-2099-1" in err.value.message
    # The canary tenants get the canary, which is not revoked.
    assert resolve(M, "prod", CANARIED, "beta", revoked={3: "CVE-2099-1"}).version == 4


def test_a_revoked_canary_does_not_resolve_for_its_tenants_and_never_falls_back():
    with pytest.raises(RevokedError) as err:
        resolve(M, "prod", CANARIED, "beta", revoked={4: "bad"})
    assert err.value.details["version"] == 4
    assert resolve(M, "prod", CANARIED, "acme", revoked={4: "bad"}).version == 3


def _promote(before, after):
    return Move(Action.PROMOTE, before, after)


def _rollback(before, after):
    return Move(Action.ROLLBACK, before, after)


T1, T2, T3, T4 = (AliasTarget(n) for n in (1, 2, 3, 4))


def test_rollback_goes_to_the_value_before_the_newest_move():
    history = [_promote(None, T1), _promote(T1, T2), _promote(T2, CANARIED)]
    assert rollback_target(M, "prod", history) == T2
    # The whole value comes back, canary included.
    assert rollback_target(M, "prod", [*history, _promote(CANARIED, T4)]) == CANARIED


def test_a_second_rollback_goes_one_step_further_back_it_does_not_redo():
    history = [_promote(None, T1), _promote(T1, T2), _promote(T2, T3), _rollback(T3, T2)]
    assert rollback_target(M, "prod", history) == T1
    history += [_rollback(T2, T1), _promote(T1, T4)]
    assert rollback_target(M, "prod", history) == T1
    # Undoing 4 leaves 1, which the very first promote set: nothing before it.
    with pytest.raises(NothingToRollBackError):
        rollback_target(M, "prod", [*history, _rollback(T4, T1)])


def test_nothing_to_roll_back():
    with pytest.raises(NothingToRollBackError) as err:
        rollback_target(M, "prod", [_promote(None, T1)])
    assert err.value.details == {"model": M, "alias": "prod"} and err.value.code == "nothing-to-roll-back"
    with pytest.raises(NothingToRollBackError):
        rollback_target(M, "prod", [])
