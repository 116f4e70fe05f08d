"""Identity use cases under concurrent administrators."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from registry.db.models import Principal, Tenant
from registry.services import identity
from tests.support.registry import make_admin


def test_concurrent_administrators_never_see_database_is_locked(container):
    """Each use case reads, then writes: on SQLite that needs the write lock from the start."""
    admin = make_admin(container)
    admins, rounds = 8, 8
    start = threading.Barrier(admins)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            start.wait()
            for i in range(rounds):
                with container.session_factory() as session:
                    identity.create_tenant(session, admin, f"t{n}-{i}")
                with container.session_factory() as session:
                    identity.create_principal(session, admin, f"p{n}-{i}")
                with container.session_factory() as session:
                    identity.grant_role(session, admin, f"p{n}-{i}", f"t{n}-{i}", "submitter")
                with container.session_factory() as session:
                    identity.create_token(session, admin, f"p{n}-{i}")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(admins)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Tenant).where(Tenant.name.like("t%-%"))) == 64
        assert session.scalar(select(func.count()).select_from(Principal).where(Principal.name.like("p%-%"))) == 64


def test_racing_creations_of_one_name_give_one_row_and_conflicts(container):
    """The loser of a race for a name gets AlreadyExistsError (a 409), never a database error."""
    from registry.domain.errors import AlreadyExistsError

    admin = make_admin(container)
    racers = 6
    start = threading.Barrier(racers)
    outcomes: list[str] = []

    def work() -> None:
        start.wait()
        for create in (identity.create_tenant, identity.create_principal):
            try:
                with container.session_factory() as session:
                    create(session, admin, "contested")
                outcomes.append("created")
            except AlreadyExistsError:
                outcomes.append("conflict")
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                outcomes.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * (2 * racers - 2) + ["created"] * 2


def test_the_audit_logs_own_actor_name_is_refused_for_principals(container):
    """`system` is the actor of the registry's own audit events; a principal of that name could pose as it."""
    import pytest

    from registry import audit
    from registry.domain.errors import ReservedNameError

    admin = make_admin(container)
    with container.session_factory() as session:
        with pytest.raises(ReservedNameError) as err:
            identity.create_principal(session, admin, audit.SYSTEM_ACTOR)
        assert err.value.code == "reserved-name" and "reserved" in str(err.value)
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Principal).where(Principal.name == "system")) == 0
        assert identity.create_principal(session, admin, "systems").name == "systems"
