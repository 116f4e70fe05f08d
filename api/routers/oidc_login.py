"""Single sign-on for the CLI: ``modelreg login`` learns the provider here and trades a code for a token.

``GET /v1/auth/oidc`` says which provider and public client to sign in with. ``POST /v1/auth/oidc/token`` takes
the authorization code the CLI's loopback redirect received, with its PKCE verifier, redirect URI and nonce;
the registry exchanges the code itself, verifies the ID token (audience: the CLI's client) and answers a
short-lived registry token of the principal the groups map to. A pasted ID token buys nothing here: only a
code the provider redeems, once, for this client.
"""

from __future__ import annotations

import datetime as dt
import re

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api.deps import ContainerDep, SessionDep
from api.problems import responses
from registry import oidc
from registry.db.session import begin_write
from registry.domain.errors import AuthenticationError, InvalidInputError, NotFoundError
from registry.domain.text import FreeText

router = APIRouter(prefix="/v1/auth/oidc", tags=["identity"], responses=responses(NotFoundError))

LOOPBACK_REDIRECT = re.compile(r"\Ahttp://127\.0\.0\.1:[0-9]{1,5}/callback\Z")


class OidcLoginInfo(BaseModel):
    issuer: str
    client_id: str
    scopes: list[str]
    provider_name: str


class OidcCodeExchange(BaseModel):
    code: FreeText(2048) = Field(min_length=1)
    code_verifier: FreeText(128) = Field(min_length=43)
    redirect_uri: FreeText(64)
    nonce: FreeText(256) = Field(min_length=16)


class OidcTokenPublic(BaseModel):
    token: str
    principal: str
    expires_at: dt.datetime


def _cli_config(container) -> oidc.OidcConfig:
    config = oidc.config_from_settings(container.settings)
    if config is None or not config.cli_client_id:
        raise NotFoundError("single sign-on for the CLI is not configured on this registry (oidc_cli_client_id)")
    return config


@router.get("")
def login_info(container: ContainerDep) -> OidcLoginInfo:
    config = _cli_config(container)
    return OidcLoginInfo(issuer=config.issuer, client_id=config.cli_client_id, scopes=list(config.scopes),
                         provider_name=config.provider_name)


@router.post("/token", responses=responses(NotFoundError, AuthenticationError, oidc.SignInRefusedError,
                                                InvalidInputError))
def exchange(body: OidcCodeExchange, request: Request, session: SessionDep,
             container: ContainerDep) -> OidcTokenPublic:
    config = _cli_config(container)
    if not LOOPBACK_REDIRECT.match(body.redirect_uri):
        raise InvalidInputError("redirect_uri must be the CLI's loopback address http://127.0.0.1:<port>/callback",
                                field="redirect_uri")
    try:
        id_token = oidc.exchange_code(config, config.cli_client_id, None, code=body.code,
                                      code_verifier=body.code_verifier, redirect_uri=body.redirect_uri)
        claims = oidc.verify_id_token(config, id_token, client_id=config.cli_client_id, nonce=body.nonce,
                                      now=container.clock.now())
        begin_write(session)
        principal, issued = oidc.token_for_identity(
            session, config, claims, lifetime=dt.timedelta(minutes=config.cli_token_minutes),
            description=oidc.CLI_TOKEN_DESCRIPTION, now=container.clock.now())
        session.commit()
    except oidc.SignInRefusedError as err:
        # Audited once the provider has redeemed the code: before that, anyone can post a made-up one.
        oidc.record_refusal(session, err, via="cli")
        request.app.state.metrics.oidc_refusals.labels("cli", err.reason).inc()
        raise
    return OidcTokenPublic(token=issued.token, principal=principal.name, expires_at=issued.expires_at)
