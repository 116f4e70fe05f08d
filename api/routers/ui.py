"""The web console: server-rendered pages under ``/ui`` over the services the JSON API calls.

Thin like every router: open the session (:mod:`registry.console.sessions`), call the services (through
:mod:`registry.console.views`), render a template (Jinja2, autoescaped). A service's refusal is shown
in words on the page, with the status the JSON API would answer. Every form carries the session's CSRF
token; the security headers of every ``/ui`` answer are set by :class:`api.middleware.ConsoleHeadersMiddleware`.
The routes are left out of the OpenAPI document (``include_in_schema=False``): they answer HTML to a
browser, not JSON to a client.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Callable
from urllib.parse import quote, urlsplit

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.deps import ContainerDep, SessionDep
from api.params import AliasName, ModelName, TenantName, VersionNumber
from api.problems import status_for
from registry import oidc
from registry.auth import load_principal
from registry.console import views
from registry.console.sessions import (
    SESSION_LIFETIME,
    CsrfError,
    OpenedSession,
    check_csrf,
    close_session,
    new_sign_in_nonce,
    open_session,
    sign_in,
    start_session,
)
from registry.db.session import begin_write
from registry.domain.aliases import make_target
from registry.domain.errors import (
    AuthenticationError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    RegistryError,
)
from registry.domain.states import shown_state
from registry.domain.text import printable
from registry.services import aliases, approvals, exports, revocations, versions

router = APIRouter(prefix="/ui", include_in_schema=False)

SESSION_COOKIE = "mr_session"
SIGN_IN_COOKIE = "mr_sign_in"
OIDC_FLOW_COOKIE = "mr_oidc_flow"
HERE = Path(__file__).resolve().parent.parent
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
NOTICES = {"approve": "Your approval is recorded.", "reject": "Your rejection is recorded.",
           "promoted": "The alias moved.", "rolled-back": "The alias rolled back.",
           "files-added": "Your file reviews are added to your approval.", "revoked": "The version is revoked."}
"""What a redirect after a form may announce (by code, so a link cannot put words on the page)."""
FormText = Annotated[str, Form(max_length=4096)]
FormPaths = Annotated[list[str], Form()]
"""Checkboxes naming files of a version (the approvals service bounds and checks them)."""
SearchText = Annotated[str, Query(max_length=200)]
StateName = Annotated[str, Query(max_length=32)]


@functools.cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fact"] = views.fact_text
    # A version retention deleted shows as deleted, on every page, whatever its state column kept.
    env.filters["shown_state"] = lambda v: shown_state(v.state, v.deleted_at is not None)
    return env


class SignInRequired(Exception):
    """No valid session: the browser is sent to the sign-in page, to come back to ``next``."""

    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


def install(app: FastAPI) -> None:
    """The console's answer to a request without a session (its routes are :data:`router`'s)."""

    @app.exception_handler(SignInRequired)
    async def _sign_in(_request: Request, exc: SignInRequired) -> Response:
        response = RedirectResponse(f"/ui/sign-in?next={quote(exc.next_path, safe='/')}", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response


def _secure(request: Request) -> bool:
    """Whether the browser reached us over HTTPS (directly, or through a proxy that says so)."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if value and value.startswith("/ui") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui"


def get_console(request: Request, session: SessionDep, container: ContainerDep) -> OpenedSession:
    try:
        opened = open_session(session, container.console_key, request.cookies.get(SESSION_COOKIE),
                              now=container.clock.now())
    except AuthenticationError:
        # Back to the page after signing in; a form's target answers POST only, so back to the start.
        raise SignInRequired(request.url.path if request.method == "GET" else "/ui") from None
    session.rollback()
    return opened


ConsoleDep = Annotated[OpenedSession, Depends(get_console)]


def _render(template: str, opened: OpenedSession | None, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _templates().get_template(template).render(
        me=opened.principal if opened else None, csrf=opened.csrf if opened else "", **context)
    return HTMLResponse(html, status_code=status_code)


def _error(opened: OpenedSession, err: RegistryError, back: str | None = None) -> HTMLResponse:
    return _render("error.html", opened, status_for(err), title="Not allowed" if status_for(err) == 403 else "Error",
                   error=err.message, back=back)


def _back(request: Request) -> str | None:
    """The console page a form was sent from (its Referer, when it is one of ours), to offer a way back."""
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc == request.url.netloc and referer.path.startswith("/ui/") and len(referer.path) < 300:
        return referer.path
    return None


def _page(opened: OpenedSession, template: str, build: Callable[[], dict[str, Any]], **context: Any) -> HTMLResponse:
    try:
        data = build()
    except RegistryError as err:
        return _error(opened, err)
    return _render(template, opened, **data, **context)


def _check_form(opened: OpenedSession, container: Any, csrf: str) -> None:
    check_csrf(container.console_key, opened.cookie, csrf)


# --- signing in and out ----------------------------------------------------------------------------


def _sign_in_page(request: Request, container: Any, *, next_path: str, error: str | None = None,
                  status: int = 200) -> HTMLResponse:
    # The browser's pre-session nonce is kept while it lasts, so a second tab's sign-in form does not void the first's.
    nonce = request.cookies.get(SIGN_IN_COOKIE, "")
    if not re.fullmatch(r"[0-9a-f]{32}", nonce):
        nonce = new_sign_in_nonce()
    sso = oidc.config_from_settings(container.settings)
    response = _render("sign_in.html", None, status, next=_safe_next(next_path), error=error, title="Sign in",
                       sign_in_csrf=container.console_key.mac("signin", nonce),
                       sso_name=sso.provider_name if sso else None)
    response.set_cookie(SIGN_IN_COOKIE, nonce, max_age=3600, path="/ui", httponly=True, samesite="strict",
                        secure=_secure(request))
    return response


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_form(request: Request, container: ContainerDep, next: str = Query("/ui", max_length=2048)) -> Response:
    return _sign_in_page(request, container, next_path=next)


@router.post("/sign-in")
def sign_in_submit(request: Request, session: SessionDep, container: ContainerDep, token: FormText = "",
                   csrf: FormText = "", next: FormText = "/ui") -> Response:
    try:
        check_csrf(container.console_key, request.cookies.get(SIGN_IN_COOKIE), csrf, purpose="signin")
        cookie, expires = sign_in(session, container.console_key, token, now=container.clock.now())
    except RegistryError as err:
        message = "That token is not valid (unknown, expired or revoked)." if isinstance(
            err, AuthenticationError) else err.message
        return _sign_in_page(request, container, next_path=next, error=message, status=status_for(err))
    finally:
        session.rollback()
    response = RedirectResponse(_safe_next(next), status_code=303)
    lifetime = int(min(SESSION_LIFETIME, expires - container.clock.now()).total_seconds())
    response.set_cookie(SESSION_COOKIE, cookie, max_age=lifetime, expires=expires, path="/ui", httponly=True,
                        samesite="strict", secure=_secure(request))
    response.delete_cookie(SIGN_IN_COOKIE, path="/ui")
    return response


def _sso_config(container: Any) -> oidc.OidcConfig | None:
    return oidc.config_from_settings(container.settings)


def _no_sso() -> HTMLResponse:
    return _render("error.html", None, 404, title="Not found", back="/ui/sign-in",
                   error="Single sign-on is not configured on this registry: sign in with your API token.")


def _callback_uri(request: Request) -> str:
    return str(request.url_for("sso_callback"))


def _session_response(request: Request, container: Any, cookie: str, expires: dt.datetime, to: str) -> Response:
    response = RedirectResponse(_safe_next(to), status_code=303)
    lifetime = int(min(SESSION_LIFETIME, expires - container.clock.now()).total_seconds())
    response.set_cookie(SESSION_COOKIE, cookie, max_age=lifetime, expires=expires, path="/ui", httponly=True,
                        samesite="strict", secure=_secure(request))
    response.delete_cookie(SIGN_IN_COOKIE, path="/ui")
    response.delete_cookie(OIDC_FLOW_COOKIE, path="/ui/sign-in/oidc")
    return response


@router.get("/sign-in/oidc")
def sso_start(request: Request, container: ContainerDep, next: str = Query("/ui", max_length=2048)) -> Response:
    """Single sign-on: send the browser to the identity provider, the flow sealed in a short-lived cookie."""
    if (config := _sso_config(container)) is None:
        return _no_sso()
    try:
        started = oidc.begin_sign_in(config, container.console_key, redirect_uri=_callback_uri(request),
                                     next_path=_safe_next(next), now=container.clock.now())
    except RegistryError as err:
        return _sign_in_page(request, container, next_path=next, error=err.message, status=status_for(err))
    response = RedirectResponse(started.url, status_code=303)
    # Lax, not strict: the provider's redirect back is a cross-site navigation that must carry it.
    response.set_cookie(OIDC_FLOW_COOKIE, started.cookie, max_age=int(oidc.FLOW_LIFETIME.total_seconds()),
                        path="/ui/sign-in/oidc", httponly=True, samesite="lax", secure=_secure(request))
    return response


@router.get("/sign-in/oidc/callback", name="sso_callback")
def sso_callback(request: Request, session: SessionDep, container: ContainerDep,
                 code: str = Query("", max_length=2048), state: str = Query("", max_length=512),
                 error: str = Query("", max_length=200)) -> Response:
    """Single sign-on's return: check state, exchange the code, verify the ID token, map groups, open a session."""
    now = container.clock.now()
    if (config := _sso_config(container)) is None:
        return _no_sso()
    try:
        if error:
            oidc.open_flow(container.console_key, request.cookies.get(OIDC_FLOW_COOKIE), now=now)  # ours, or no-flow
            # The provider's error code is whatever the link's author wrote: shown escaped, never audited.
            raise oidc.SignInRefusedError(f"the identity provider did not sign you in ({printable(error)})",
                                          reason="provider")
        claims, next_path = oidc.finish_sign_in(config, container.console_key, request.cookies.get(OIDC_FLOW_COOKIE),
                                                code=code, state=state, redirect_uri=_callback_uri(request), now=now)
        begin_write(session)
        principal, issued = oidc.token_for_identity(session, config, claims, lifetime=SESSION_LIFETIME,
                                                    description=oidc.CONSOLE_TOKEN_DESCRIPTION, now=now)
        cookie, expires = start_session(session, container.console_key, load_principal(principal), issued.id,
                                        now + SESSION_LIFETIME, now=now, method="oidc")
    except oidc.SignInRefusedError as err:
        oidc.record_refusal(session, err, via="console")  # audited only once the provider redeemed a code
        request.app.state.metrics.oidc_refusals.labels("console", err.reason).inc()
        response = _sign_in_page(request, container, next_path="/ui", error=err.message, status=status_for(err))
        response.delete_cookie(OIDC_FLOW_COOKIE, path="/ui/sign-in/oidc")
        return response
    except RegistryError as err:
        return _sign_in_page(request, container, next_path="/ui", error=err.message, status=status_for(err))
    finally:
        session.rollback()
    return _session_response(request, container, cookie, expires, next_path)


@router.post("/sign-out")
def sign_out(request: Request, session: SessionDep, container: ContainerDep, csrf: FormText = "") -> Response:
    try:
        opened = open_session(session, container.console_key, request.cookies.get(SESSION_COOKIE),
                              now=container.clock.now())
        check_csrf(container.console_key, opened.cookie, csrf)
    except AuthenticationError:
        pass  # no session to end: the cookie goes anyway
    except CsrfError as err:
        return _render("error.html", None, 403, title="Not allowed", error=err.message)
    else:
        close_session(session, opened, now=container.clock.now())
    response = RedirectResponse("/ui/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


# --- pages -------------------------------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
def home(opened: ConsoleDep, session: SessionDep, q: SearchText = "", state: StateName = "") -> Response:
    return _page(opened, "home.html", lambda: {"tenants": views.home(session, opened.principal, search=q or None,
                                                                     state=state or None)},
                 title="Models", filters={"q": q, "state": state}, states=views.STATES)


@router.get("/approvals", response_class=HTMLResponse)
def approval_queue(opened: ConsoleDep, session: SessionDep) -> Response:
    return _page(opened, "approvals.html", lambda: {"queue": views.approval_queue(session, opened.principal)},
                 title="Approvals")


@router.get("/models/{tenant}/{name}", response_class=HTMLResponse)
def model_page(tenant: TenantName, name: ModelName, opened: ConsoleDep, session: SessionDep,
               notice: str = Query("", max_length=32), q: SearchText = "", state: StateName = "") -> Response:
    return _page(opened, "model.html", lambda: views.model_page(session, opened.principal, tenant, name,
                                                                search=q or None, state=state or None),
                 title=f"{tenant}/{name}", tenant=tenant, name=name, notice=NOTICES.get(notice), error=None,
                 filters={"q": q, "state": state}, states=views.STATES)


def _refused(err: RegistryError) -> bool:
    """A refusal that must read the same whether what was named exists: shown alone, never over its page."""
    return isinstance(err, (PermissionDeniedError, NotFoundError))


def _version(opened: OpenedSession, session: Any, container: Any, tenant: str, name: str, number: int, *,
             notice: str | None = None, error: RegistryError | None = None, back: str | None = None,
             pending: dict[str, Any] | None = None) -> Response:
    if error is not None and _refused(error):
        return _error(opened, error, back)
    response = _page(opened, "version.html",
                     lambda: views.version_page(session, opened.principal, tenant, name, number,
                                                engine=container.policy, blob_store=container.blob_store,
                                                now=container.clock.now(),
                                                stale_after=container.settings.receipts_stale_after_seconds),
                     title=f"{tenant}/{name}@{number}", tenant=tenant, name=name, number=number, notice=notice,
                     error=error.message if error else None, pending=pending)
    if error is not None and response.status_code == 200:
        response.status_code = status_for(error)
    return response


@router.get("/models/{tenant}/{name}/versions/{number}", response_class=HTMLResponse)
def version_page(tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
                 session: SessionDep, container: ContainerDep, notice: str = Query("", max_length=32)) -> Response:
    return _version(opened, session, container, tenant, name, number, notice=NOTICES.get(notice))


@router.get("/models/{tenant}/{name}/versions/{number}/progress")
def version_progress(tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
                     session: SessionDep) -> Response:
    """The state and mirroring progress of a version, for the page's refresher (console.js)."""
    try:
        version = versions.read_version(session, opened.principal, tenant, name, number)
    except RegistryError as err:
        return _error(opened, err)
    files = version.files
    return Response(json.dumps({"state": version.state, "running": version.state in views.RUNNING,
                                "files": len(files), "stored": sum(f.sha256 is not None for f in files)}),
                    media_type="application/json")


@router.get("/models/{tenant}/{name}/versions/{number}/signature")
def version_signature(tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
                      session: SessionDep) -> Response:
    """The version's OpenSSF model-signing bundle, as a ``model.sig`` download."""
    try:
        bundle = versions.read_signature(session, opened.principal, tenant, name, number)
    except RegistryError as err:
        return _error(opened, err)
    return Response(json.dumps(bundle, indent=2), media_type="application/json",
                    headers={"Content-Disposition": 'attachment; filename="model.sig"'})


@router.post("/models/{tenant}/{name}/versions/{number}/decision")
def decide(request: Request, tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
           session: SessionDep, container: ContainerDep, csrf: FormText = "", decision: FormText = "",
           capacity: FormText = "", comment: FormText = "", files: FormPaths = [],
           confirm: FormText = "") -> Response:
    """Approve or reject, through the approvals service (policy and separation of duties are its own).

    An approval that would leave unmet what its capacity could satisfy (a suspicious file it does not name) is
    not recorded until the approver confirms it (``confirm=yes``): the page says first what it would leave.
    """
    try:
        _check_form(opened, container, csrf)
        asked = approvals.ApprovalRequest(decision=decision, capacity=capacity, comment=comment,
                                          files=tuple(files))
        if decision == "approve" and confirm != "yes":
            left = approvals.preview(session, opened.principal, tenant, name, number, asked,
                                     engine=container.policy, clock=container.clock).yours
            if left:
                session.rollback()
                return _version(opened, session, container, tenant, name, number,
                                pending={"request": asked, "left": left})
        approvals.decide(session, opened.principal, tenant, name, number, asked,
                         ports=container.ports)
    except RegistryError as err:
        session.rollback()
        return _version(opened, session, container, tenant, name, number, error=err, back=_back(request))
    notice = decision if decision in NOTICES else ""
    return RedirectResponse(f"/ui/models/{tenant}/{name}/versions/{number}?notice={notice}", status_code=303)


@router.post("/models/{tenant}/{name}/versions/{number}/approval-files")
def add_file_reviews(request: Request, tenant: TenantName, name: ModelName, number: VersionNumber,
                     opened: ConsoleDep, session: SessionDep, container: ContainerDep, csrf: FormText = "",
                     files: FormPaths = []) -> Response:
    """Add file reviews to the principal's own approval, through the approvals service (audited there)."""
    try:
        _check_form(opened, container, csrf)
        approvals.add_files(session, opened.principal, tenant, name, number, tuple(files),
                            ports=container.ports)
    except RegistryError as err:
        session.rollback()
        return _version(opened, session, container, tenant, name, number, error=err, back=_back(request))
    return RedirectResponse(f"/ui/models/{tenant}/{name}/versions/{number}?notice=files-added", status_code=303)


@router.post("/models/{tenant}/{name}/versions/{number}/revoke")
def revoke(request: Request, tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
           session: SessionDep, container: ContainerDep, csrf: FormText = "", reason: FormText = "") -> Response:
    """Revoke the version, with a reason, through the revocation service (who may is its rule)."""
    try:
        _check_form(opened, container, csrf)
        revocations.revoke(session, opened.principal, tenant, name, number, reason, clock=container.clock)
    except RegistryError as err:
        session.rollback()
        return _version(opened, session, container, tenant, name, number, error=err, back=_back(request))
    return RedirectResponse(f"/ui/models/{tenant}/{name}/versions/{number}?notice=revoked", status_code=303)


@router.get("/models/{tenant}/{name}/versions/{number}/export")
def version_export(tenant: TenantName, name: ModelName, number: VersionNumber, opened: ConsoleDep,
                   session: SessionDep, container: ContainerDep,
                   format: str = Query("", max_length=16)) -> Response:
    """The version's ML-BOM (``cyclonedx``) or SLSA statement (``slsa``) as a download, with the caller's
    rights: what ``GET /v1/provenance/.../export`` answers them."""
    try:
        done = exports.export(session, opened.principal, tenant, name, number, format, keyring=container.keyring,
                              blob_store=container.blob_store, clock=container.clock,
                              root_expiry=dt.timedelta(days=container.settings.trust_root_expiry_days))
    except RegistryError as err:
        session.rollback()
        return _error(opened, err)
    return Response(done.content, media_type=done.media_type,
                    headers={"Content-Disposition": f'attachment; filename="{done.filename}"'})


def _number(value: str, field: str) -> int | None:
    if not value.strip():
        return None
    if not value.strip().isdigit() or len(value.strip()) > 9:
        raise InvalidInputError(f"{field} is a version number", field=field)
    return int(value)


@router.post("/models/{tenant}/{name}/aliases")
def promote(request: Request, tenant: TenantName, name: ModelName, opened: ConsoleDep, session: SessionDep,
            container: ContainerDep, csrf: FormText = "", alias: FormText = "", version: FormText = "",
            canary_version: FormText = "", canary_tenants: FormText = "", comment: FormText = "") -> Response:
    """Point an alias at a version (with a canary for some tenants), through the alias service."""
    try:
        _check_form(opened, container, csrf)
        main = _number(version, "version")
        if main is None:
            raise InvalidInputError("name the version the alias should point at", field="version")
        target = make_target(main, _number(canary_version, "canary_version"),
                             [t.strip() for t in canary_tenants.split(",") if t.strip()])
        aliases.promote(session, opened.principal, tenant, name, alias.strip(), target, comment=comment,
                        policy=container.policy, clock=container.clock)
    except RegistryError as err:
        session.rollback()
        return _model_error(opened, session, tenant, name, err, _back(request))
    return RedirectResponse(f"/ui/models/{tenant}/{name}?notice=promoted", status_code=303)


@router.post("/models/{tenant}/{name}/aliases/{alias}/rollback")
def rollback(request: Request, tenant: TenantName, name: ModelName, alias: AliasName, opened: ConsoleDep,
             session: SessionDep, container: ContainerDep, csrf: FormText = "", comment: FormText = "") -> Response:
    """Move an alias back to what it pointed at before its newest move, through the alias service."""
    try:
        _check_form(opened, container, csrf)
        aliases.rollback(session, opened.principal, tenant, name, alias, comment=comment, policy=container.policy,
                         clock=container.clock)
    except RegistryError as err:
        session.rollback()
        return _model_error(opened, session, tenant, name, err, _back(request))
    return RedirectResponse(f"/ui/models/{tenant}/{name}?notice=rolled-back", status_code=303)


def _model_error(opened: OpenedSession, session: Any, tenant: str, name: str, err: RegistryError,
                 back: str | None) -> Response:
    if _refused(err):
        return _error(opened, err, back)
    response = _page(opened, "model.html", lambda: views.model_page(session, opened.principal, tenant, name),
                     title=f"{tenant}/{name}", tenant=tenant, name=name, notice=None, error=err.message,
                 filters={"q": "", "state": ""}, states=views.STATES)
    if response.status_code == 200:
        response.status_code = status_for(err)
    return response


def _time(value: str, field: str) -> dt.datetime | None:
    if not value.strip():
        return None
    try:
        at = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInputError(f"{field}: a time such as 2026-11-30T12:00 (UTC unless it says)", field=field) from None
    return at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)


@router.get("/audit", response_class=HTMLResponse)
def audit_page(opened: ConsoleDep, session: SessionDep, container: ContainerDep, tenant: str = Query("", max_length=63),
               actor: str = Query("", max_length=128), action: str = Query("", max_length=64),
               since: str = Query("", max_length=40), until: str = Query("", max_length=40),
               after: int = Query(0, ge=0, le=2**63 - 1),
               event: int | None = Query(None, ge=1, le=2**63 - 1, description="check this event's inclusion")
               ) -> Response:
    tenants = views.audited_tenants(session, opened.principal)
    if not tenant and not opened.principal.is_admin and tenants:
        tenant = tenants[0]  # an auditor reads one tenant's events at a time
    filters = {"tenant": tenant, "actor": actor, "action": action, "since": since, "until": until}
    return _page(opened, "audit.html", lambda: views.audit_page(
        session, opened.principal, tenant=tenant or None, actor=actor or None, action=action or None,
        since=_time(since, "since"), until=_time(until, "until"), after=after,
        log_key=container.log_key.verifier().vkey,
        witnesses=[w.verifier_key for w in container.settings.log_witnesses], inclusion_of=event),
        title="Audit", filters=filters, tenants=tenants, asked_event=event or "")


@router.get("/provenance", response_class=HTMLResponse)
def provenance_page(opened: ConsoleDep, session: SessionDep, digest: str = Query("", max_length=80),
                    tenant: str = Query("", max_length=63), node: str = Query("", max_length=128),
                    model: str = Query("", max_length=63), alias: str = Query("", max_length=63),
                    at: str = Query("", max_length=40)) -> Response:
    asked = {"digest": digest, "tenant": tenant, "node": node, "model": model, "alias": alias, "at": at}
    return _page(opened, "provenance.html", lambda: {"answers": views.provenance_page(
        session, opened.principal, digest=digest.strip() or None, tenant=tenant or None, node=node or None,
        model=model or None, alias=alias or None, at=_time(at, "at"))},
        title="Provenance", asked=asked, tenants=views.audited_tenants(session, opened.principal))


@router.get("/static/{name}")
def static(name: str) -> Response:
    """The console's stylesheet and its one script (a fixed list: no path reaches the file system)."""
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response((HERE / "static" / name).read_bytes(), media_type=STATIC[name],
                    headers={"Cache-Control": "max-age=300"})
