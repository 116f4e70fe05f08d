"""FastAPI dependencies: the container, a session per request, the authenticated principal."""

from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain.errors import AuthenticationError


def get_container(request: Request) -> Container:
    return request.app.state.container


ContainerDep = Annotated[Container, Depends(get_container)]


def get_session(container: ContainerDep) -> Iterator[Session]:
    with container.session_factory() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def get_principal(request: Request, session: SessionDep) -> AuthenticatedPrincipal:
    token = bearer_token(request)
    if token is None:
        raise AuthenticationError("missing bearer token (Authorization: Bearer <token>)")
    principal = authenticate(session, token)
    # Reads after authentication start a fresh transaction, not one opened by the lookup.
    session.rollback()
    return principal


PrincipalDep = Annotated[AuthenticatedPrincipal, Depends(get_principal)]
