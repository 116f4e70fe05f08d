"""FastAPI dependencies: the container, a session per request, the authenticated principal."""

from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain.errors import AuthenticationError
from registry.watch import EventWatcher


async def get_container(request: Request) -> Container:
    # async: a plain attribute read, so FastAPI calls it on the loop instead of hopping to a thread.
    return request.app.state.container


ContainerDep = Annotated[Container, Depends(get_container)]


async def get_event_watcher(request: Request) -> EventWatcher:
    return request.app.state.event_watcher


EventWatcherDep = Annotated[EventWatcher, Depends(get_event_watcher)]


def get_session(container: ContainerDep) -> Iterator[Session]:
    with container.session_factory() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


# Declared as a security scheme so that the OpenAPI document says which routes need a token; a
# missing or non-bearer header is left to get_principal, which answers with a problem.
_bearer = HTTPBearer(auto_error=False, scheme_name="token",
                     description="A modelreg token (`mr_...`), or a pod's projected service-account token")


async def get_bearer_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    """The bearer token, not yet checked: for a hot route that authenticates in its own transaction."""
    if credentials is None or not credentials.credentials.strip():
        raise AuthenticationError("missing bearer token (Authorization: Bearer <token>)")
    return credentials.credentials.strip()


BearerTokenDep = Annotated[str, Depends(get_bearer_token)]


def get_principal(session: SessionDep, token: BearerTokenDep, container: ContainerDep) -> AuthenticatedPrincipal:
    principal = authenticate(session, token, workload=container.workload_verifier)
    # Reads after authentication start a fresh transaction, not one opened by the lookup.
    session.rollback()
    return principal


PrincipalDep = Annotated[AuthenticatedPrincipal, Depends(get_principal)]
