"""The read-only OCI distribution endpoint (``/v2``): released versions as CNCF ModelPack artifacts.

Thin: the wire shapes of the OCI distribution spec (pull category), the Docker token dance and the spec's
error JSON (``{"errors": [{"code", "message", "detail"}]}``, not problem+json: OCI clients parse these).
What is served and who may pull it is decided in ``registry/services/oci_serving.py``, who the caller is and
the tokens in ``registry/services/oci_tokens.py``; ``docs/oci.md`` describes it.
The routes are left out of the OpenAPI document: OCI is its own spec, with its own error shapes.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Depends, Form, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from api.deps import ContainerDep, SessionDep
from api.params import ModelName, TenantName
from api.problems import status_for
from api.ranges import byte_range, content_range
from registry.auth import AuthenticatedPrincipal, authenticate
from registry.domain import errors
from registry.domain.errors import AuthenticationError, RegistryError
from registry.domain.oci_referrers import OCI_INDEX, index
from registry.services import oci_referrers, oci_serving, oci_tokens
from registry.services.oci_tokens import OciCaller
from registry.storage import LocalBlobStore

API_VERSION = {"Docker-Distribution-API-Version": "registry/2.0"}
WILDCARDS = {"*/*", "application/*"}
MAX_ACCEPT = 8192
"""The most characters of ``Accept`` read, all lines together."""
REPOSITORY_PATH = re.compile(r"\A/v2/([^/]+/[^/]+)/(?:manifests|blobs|tags|referrers)/")

# The OCI error code of each error the service raises (the first matching class decides).
OCI_CODES: list[tuple[type[RegistryError], str]] = [
    (errors.PullScopeDeniedError, "DENIED"),
    (errors.AuthenticationError, "UNAUTHORIZED"),
    (errors.PermissionDeniedError, "DENIED"),
    (errors.TenantNotFoundError, "NAME_UNKNOWN"),
    (errors.ModelNotFoundError, "NAME_UNKNOWN"),
    (errors.OciManifestUnknownError, "MANIFEST_UNKNOWN"),
    (errors.OciBlobUnknownError, "BLOB_UNKNOWN"),
    (errors.BlobNotFoundError, "BLOB_UNKNOWN"),
]


def oci_error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
              detail: Any = None) -> JSONResponse:
    """An error answer as the distribution spec shapes it."""
    body = {"errors": [{"code": code, "message": message, "detail": detail if detail is not None else {}}]}
    return JSONResponse(body, status_code=status, headers={**API_VERSION, **(headers or {})})


def challenge(request: Request, error: str | None = None) -> str:
    """The ``WWW-Authenticate`` that sends a client to ``/v2/token`` for the scope of this request."""
    base = str(request.base_url).rstrip("/")
    value = f'Bearer realm="{base}/v2/token",service="{request.url.netloc}"'
    m = REPOSITORY_PATH.match(request.url.path)
    if m is not None:
        value += f',scope="repository:{m[1]}:pull"'
    elif request.url.path.rstrip("/") == "/v2/_catalog":
        value += f',scope="{oci_tokens.CATALOG_SCOPE}"'
    if error is not None:
        value += f',error="{error}"'
    return value


def error_response(request: Request, exc: RegistryError) -> JSONResponse:
    code = next((c for cls, c in OCI_CODES if isinstance(exc, cls)), None)
    if isinstance(exc, errors.PullScopeDeniedError):
        # 401, not 403: the client asks the token endpoint again, for this repository's scope.
        return oci_error(401, "DENIED", exc.message,
                         {"WWW-Authenticate": challenge(request, "insufficient_scope")})
    if isinstance(exc, AuthenticationError):
        return oci_error(401, "UNAUTHORIZED", exc.message, {"WWW-Authenticate": challenge(request)})
    if isinstance(exc, errors.RangeNotSatisfiableError):
        size = exc.details.get("size")
        return oci_error(416, "UNSUPPORTED", exc.message,
                         {"Content-Range": f"bytes */{size}"} if isinstance(size, int) else None)
    if isinstance(exc, errors.InvalidInputError):
        return oci_error(400, "DIGEST_INVALID" if exc.details.get("field") == "digest" else "UNSUPPORTED",
                         exc.message)
    status = status_for(exc)
    return oci_error(status, code or "UNSUPPORTED", exc.message)


class OciRoute(APIRoute):
    """A route whose every answer names the API version and whose errors are the spec's error JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                response = await handler(request)
            except RegistryError as exc:
                return error_response(request, exc)
            except RequestValidationError as exc:
                names = any(loc in (("path", "tenant"), ("path", "name")) for loc in
                            (tuple(e.get("loc", ()))[:2] for e in exc.errors()))
                return oci_error(400, "NAME_INVALID" if names else "UNSUPPORTED",
                                 "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}"
                                           for e in exc.errors()[:5]))
            response.headers.update(API_VERSION)
            return response

        return route


router = APIRouter(prefix="/v2", tags=["oci"], route_class=OciRoute, include_in_schema=False)


# --- credentials ---------------------------------------------------------------------------------


def _credentials(request: Request) -> tuple[str, str] | None:
    """The scheme (``bearer``, ``basic``) and the secret of the Authorization header (Basic: the password)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return "bearer", value
    if scheme.lower() == "basic" and value:
        try:
            _user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationError("malformed Basic credentials") from None
        if sep and password:
            return "basic", password
        raise AuthenticationError("Basic credentials without a password (the password is a modelreg token)")
    return None


def get_oci_caller(request: Request, session: SessionDep, container: ContainerDep) -> OciCaller:
    """The caller: a pull token from ``/v2/token``, or a modelreg token (Bearer, or Basic's password)."""
    credentials = _credentials(request)
    if credentials is None:
        return oci_tokens.anonymous_caller(session, request.path_params.get("tenant"))
    scheme, secret = credentials
    if scheme == "bearer" and oci_tokens.is_pull_token(secret):
        return oci_tokens.caller_of_pull_token(session, secret, key=container.oci_token_key, clock=container.clock)
    principal = authenticate(session, secret, workload=container.workload_verifier)
    session.rollback()
    return OciCaller(principal)


CallerDep = Annotated[OciCaller, Depends(get_oci_caller)]
Last = Annotated[str | None, Query(max_length=300, description="the last item of the previous page")]
PageSize = Annotated[int | None, Query(ge=0, le=oci_serving.MAX_PAGE, description="items per page")]


@router.get("/token")
def token(request: Request, session: SessionDep, container: ContainerDep,
          service: Annotated[str | None, Query(max_length=300)] = None,
          offline_token: Annotated[bool, Query()] = False) -> JSONResponse:
    """A short-lived pull token for the scopes asked (Docker's token protocol), for a modelreg token given as
    Basic's password (any user name) or as a Bearer token; with ``offline_token=true`` a refresh token too."""
    credentials = _credentials(request)
    if credentials is None:
        return _anonymous_token(request, session, container, service)
    try:
        grant = oci_tokens.grant_of_secret(session, credentials[1], workload=container.workload_verifier)
    except AuthenticationError as exc:
        return oci_error(401, "UNAUTHORIZED", exc.message, {"WWW-Authenticate": 'Basic realm="modelreg"'})
    return _issued(request, container, grant.principal, grant.token_id, request.query_params.getlist("scope"),
                   service=service, refresh=offline_token, not_after=grant.not_after)


OAUTH_FIELD_MAX = 8192
"""The most characters of one field of the OAuth2 form (a service-account token is a few kB)."""


@router.post("/token")
def oauth_token(request: Request, session: SessionDep, container: ContainerDep,
                grant_type: Annotated[str | None, Form()] = None, service: Annotated[str | None, Form()] = None,
                client_id: Annotated[str | None, Form()] = None, access_type: Annotated[str | None, Form()] = None,
                scope: Annotated[str | None, Form()] = None, username: Annotated[str | None, Form()] = None,
                password: Annotated[str | None, Form()] = None,
                refresh_token: Annotated[str | None, Form()] = None) -> JSONResponse:
    """The token protocol's OAuth2 form (what containerd tries first): ``grant_type=password`` (any user name,
    the empty one too; a modelreg or service-account token as the password) or ``grant_type=refresh_token``;
    ``access_type=offline`` asks for a refresh token. A bad form or grant answers 400 with the OAuth2 error
    JSON (RFC 6749 section 5.2)."""
    fields = (grant_type, service, client_id, access_type, scope, username, password, refresh_token)
    if any(f is not None and len(f) > OAUTH_FIELD_MAX for f in fields):
        return _oauth_error("invalid_request", f"a field is over {OAUTH_FIELD_MAX} characters")
    try:
        grant = oci_tokens.grant_of_form(session, grant_type, password=password, refresh_token=refresh_token,
                                         key=container.oci_token_key, clock=container.clock,
                                         workload=container.workload_verifier)
    except errors.OAuthGrantError as exc:
        return _oauth_error(exc.details["error"], exc.message)
    try:
        return _issued(request, container, grant.principal, grant.token_id, [scope] if scope else [],
                       service=service, refresh=access_type == "offline", not_after=grant.not_after,
                       with_scope=True)
    except errors.InvalidInputError as exc:
        return _oauth_error("invalid_scope", exc.message)


def _oauth_error(error: str, description: str) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status_code=400,
                        headers={"Cache-Control": "no-store"})


def _issued(request: Request, container: ContainerDep, principal: AuthenticatedPrincipal, token_id: int | None,
            scopes: list[str], *, service: str | None, refresh: bool, not_after: dt.datetime | None,
            with_scope: bool = False) -> JSONResponse:
    """The token answer for ``principal``: a pull token, and a refresh token when asked."""
    audience = service or request.url.netloc
    issued = oci_tokens.issue_pull_token(principal, token_id, scopes, service=audience, key=container.oci_token_key,
                                         clock=container.clock, ttl_seconds=container.settings.oci_token_seconds)
    extra: dict[str, Any] = {}
    if with_scope:
        extra["scope"] = " ".join(f"repository:{r}:pull" for r in issued.repositories)
    if refresh:
        extra["refresh_token"] = oci_tokens.issue_refresh_token(principal, token_id, service=audience,
                                                                key=container.oci_token_key, clock=container.clock,
                                                                not_after=not_after)
    return _token_answer(issued, extra)


def _anonymous_token(request: Request, session: SessionDep, container: ContainerDep,
                     service: str | None) -> JSONResponse:
    """A token without credentials: for the scopes' repositories of tenants open to anonymous pulls, else 401."""
    issued = oci_tokens.issue_anonymous_pull_token(
        session, request.query_params.getlist("scope"), service=service or request.url.netloc,
        key=container.oci_token_key, clock=container.clock, ttl_seconds=container.settings.oci_token_seconds)
    if issued is None:
        return oci_error(401, "UNAUTHORIZED", "a modelreg token is needed (Basic password or Bearer)",
                         {"WWW-Authenticate": 'Basic realm="modelreg"'})
    return _token_answer(issued)


def _token_answer(issued: oci_tokens.PullToken, extra: dict[str, Any] | None = None) -> JSONResponse:
    at = issued.issued_at.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return JSONResponse({"token": issued.token, "access_token": issued.token, "expires_in": issued.expires_in,
                         "issued_at": at, **(extra or {})}, headers={"Cache-Control": "no-store"})


@router.get("/")
def base(caller: CallerDep) -> JSONResponse:
    """The version check: 200 to a caller with credentials, 401 with the token challenge to one without."""
    return JSONResponse({})


@router.get("/_catalog")
def catalog(request: Request, session: SessionDep, caller: CallerDep, n: PageSize = None,
            last: Last = None) -> JSONResponse:
    page = oci_serving.catalog(session, caller, n=n, last=last)
    return JSONResponse({"repositories": page.items}, headers=_next_link(request, page, n))


@router.get("/{tenant}/{name}/tags/list")
def tags_list(tenant: TenantName, name: ModelName, request: Request, session: SessionDep, caller: CallerDep,
              n: PageSize = None, last: Last = None) -> JSONResponse:
    page = oci_serving.tags(session, caller, tenant, name, n=n, last=last)
    return JSONResponse({"name": f"{tenant}/{name}", "tags": page.items}, headers=_next_link(request, page, n))


def _next_link(request: Request, page: oci_serving.Page, n: int | None) -> dict[str, str]:
    if not page.more:
        return {}
    query = urlencode({**({"n": n} if n is not None else {}), "last": page.items[-1]})
    return {"Link": f'<{request.url.path}?{query}>; rel="next"'}


@router.api_route("/{tenant}/{name}/manifests/{reference}", methods=["GET", "HEAD"])
def get_manifest(tenant: TenantName, name: ModelName, reference: str, request: Request, session: SessionDep,
                 caller: CallerDep, container: ContainerDep) -> Response:
    """A version's manifest by tag (version number, alias) or digest: the exact bytes its digest names."""
    pulled = oci_referrers.manifest_or_referrer(session, caller, tenant, name, reference,
                                                blob_store=container.blob_store, clock=container.clock,
                                                signer=_signer(container), host=_registry_host(request, container))
    art = pulled.artifact
    if not _accepts(request.headers.getlist("accept"), art.media_type):
        raise errors.OciManifestUnknownError(
            f"{tenant}/{name}", reference[:80], f"the manifest is {art.media_type}, which Accept does not name")
    headers = {"Docker-Content-Digest": art.manifest_digest, "ETag": f'"{art.manifest_digest}"',
               "Content-Length": str(len(art.manifest_bytes))}
    if request.method == "HEAD":
        return Response(status_code=200, headers=headers, media_type=art.media_type)
    oci_serving.record_pull(session, caller, pulled, clock=container.clock)
    return Response(art.manifest_bytes, status_code=200, headers=headers, media_type=art.media_type)


def _registry_host(request: Request, container: ContainerDep) -> str:
    """The registry's host as a ``.sig`` payload names it: the configured public URL's, else the one asked (a
    Host header is the caller's to choose: with a public URL set, it never names the signed reference)."""
    public_url = container.settings.public_url
    return urlsplit(public_url).netloc if public_url else request.url.netloc


def _signer(container: ContainerDep) -> oci_referrers.ManifestSigner:
    return oci_referrers.signer_of(container.keyring.primary)


def _accepts(lines: list[str], media_type: str) -> bool:
    """Whether the ``Accept`` header names ``media_type`` (the OCI manifest's, or the index's of the referrers
    tag schema) or a wildcard, or none is sent. Every line counts: a client may send the header several times
    (the distribution-spec conformance suite does, index type first)."""
    if sum(map(len, lines)) > MAX_ACCEPT:
        raise errors.InvalidInputError(f"the Accept header is over {MAX_ACCEPT} characters", field="accept")
    types = [t for t in (part.split(";")[0].strip().lower() for line in lines for part in line.split(",")) if t]
    return not types or any(t in WILDCARDS or t == media_type for t in types)


@router.api_route("/{tenant}/{name}/blobs/{digest}", methods=["GET", "HEAD"])
def get_blob(tenant: TenantName, name: ModelName, digest: str, request: Request, session: SessionDep,
             caller: CallerDep, container: ContainerDep,
             range_header: Annotated[str | None, Header(alias="Range", max_length=200)] = None) -> Response:
    """A blob a released version of this repository references: a file's bytes from the store, a stored config,
    a tar layer generated around files' bytes, or a referrer's document."""
    found = oci_referrers.blob_or_referrer(session, caller, tenant, name, digest, blob_store=container.blob_store,
                                           clock=container.clock, signer=_signer(container),
                                           host=_registry_host(request, container))
    requested = byte_range(range_header, found.size) if request.method == "GET" else None
    start, end = requested or (0, found.size)
    headers = {"Docker-Content-Digest": found.digest, "Content-Length": str(end - start), "Accept-Ranges": "bytes",
               "ETag": f'"{found.digest}"'}
    if requested is not None:
        headers["Content-Range"] = content_range(start, end, found.size)
    status = 206 if requested else 200
    if request.method == "HEAD":
        return Response(status_code=200, headers=headers, media_type="application/octet-stream")
    if found.data is not None:
        return Response(found.data[start:end], status_code=status, headers=headers,
                        media_type="application/octet-stream")
    # The bytes are read only now: the database session is done with.
    session.close()
    if found.tar is not None:
        # A tar layer is generated here from the stored file: there is no object to redirect to.
        return StreamingResponse(oci_serving.tar_range(container.blob_store, found.tar, start, end), status_code=status,
                                 headers=headers, media_type="application/octet-stream")
    if _redirects_blobs(container):
        # Only after oci_serving.blob has authorized this caller for this blob in this repository: a presigned URL is
        # the bytes themselves. The /v2 URL stays the stable name (P2P caches key on it); the client sends its
        # Range again to the object store.
        ttl = dt.timedelta(seconds=container.settings.oci_blob_redirect_seconds)
        return Response(status_code=307, headers={"Location": container.blob_store.presign_get(found.sha256, ttl),
                                                  "Docker-Content-Digest": found.digest, "Cache-Control": "no-store"})
    return StreamingResponse(container.blob_store.open_range(found.sha256, start, end), status_code=status,
                             headers=headers, media_type="application/octet-stream")


def _redirects_blobs(container: ContainerDep) -> bool:
    # A local store's presigned URLs point back at this API (/v1/blobs): streaming here is the shorter way.
    return container.settings.oci_blob_redirect and not isinstance(container.blob_store, LocalBlobStore)


@router.get("/{tenant}/{name}/referrers/{digest}")
def get_referrers(tenant: TenantName, name: ModelName, digest: str, session: SessionDep, caller: CallerDep,
                  container: ContainerDep,
                  artifact_type: Annotated[str | None, Query(alias="artifactType", max_length=255)] = None) -> Response:
    """The referrers of a version's model manifest (its signature, ML-BOM, provenance, scan and eval reports):
    an image index, filtered by ``artifactType`` when asked (and then saying so in ``OCI-Filters-Applied``)."""
    found = oci_referrers.referrers(session, caller, tenant, name, digest, blob_store=container.blob_store,
                                    clock=container.clock, signer=_signer(container))
    artifact_type = artifact_type or None
    headers = {"OCI-Filters-Applied": "artifactType"} if artifact_type is not None else {}
    return Response(index(found, artifact_type=artifact_type), status_code=200, headers=headers,
                    media_type=OCI_INDEX)


# --- everything else -------------------------------------------------------------------------------

WRITES = ["POST", "PUT", "PATCH", "DELETE"]


@router.api_route("/", methods=WRITES)
@router.api_route("/{rest:path}", methods=WRITES)
def write(rest: str = "") -> JSONResponse:
    """Every write of the spec (push, mount, tag, delete): this registry's versions come from its pipeline."""
    return oci_error(405, "UNSUPPORTED", "this registry is read-only through /v2: versions are submitted, "
                                         "scanned and approved through modelreg", {"Allow": "GET, HEAD"})


@router.api_route("/{rest:path}", methods=["GET", "HEAD"])
def unknown(rest: str) -> JSONResponse:
    """Any other path: a repository name of other than two parts (``tenant/model``) names nothing here."""
    return oci_error(404, "NAME_UNKNOWN", f"/v2/{rest[:200]} names no repository (names are <tenant>/<model>)")
