"""The Hugging Face-compatible read endpoint, ``/hf``: ``huggingface_hub``, transformers and vLLM download
approved versions with ``HF_ENDPOINT`` (or ``endpoint=``) set to ``<registry>/hf``.

Thin, like every router: the service (:mod:`registry.services.hf`) resolves and authorizes; here the
answers take the Hub's shapes. Errors are problem+json as everywhere, and also carry the Hub's
``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) and ``X-Error-Message``
headers, and a body field ``error``, which is what ``huggingface_hub`` reads. ``docs/hf-endpoint.md``
describes the protocol as served.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from pydantic import Field, ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import INT32_MAX, ModelName, TenantName
from api.problems import AUTHENTICATED, problem_for, responses
from api.ranges import byte_range, content_range
from api.schemas_hf import (
    HfCardDataPublic,
    HfLfsPublic,
    HfModelInfoPublic,
    HfPathsInfoRequest,
    HfSiblingLfsPublic,
    HfSiblingPublic,
    HfTreeEntryPublic,
)
from registry.domain import errors
from registry.domain.errors import NotFoundError, RangeNotSatisfiableError, RegistryError, UpstreamError
from registry.domain.files import MAX_PATH_LENGTH
from registry.services import hf
from registry.services.hf import MAX_PATHS, HfFile, ResolvedRevision, TreeEntry

Revision = Annotated[str, Field(min_length=1, max_length=256,
                                description="an alias (`main` is `prod`), a version number, or a version's commit")]
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH, description="a path in the version")]
Cursor = Annotated[int, Field(ge=0, le=INT32_MAX, description="where the page starts (from a `Link` header)")]

# The Hub's X-Error-Code of each error the service raises (the first matching class decides).
HF_ERROR_CODES: list[tuple[type[RegistryError], str]] = [
    (errors.RevisionNotFoundError, "RevisionNotFound"),
    (errors.EntryNotFoundError, "EntryNotFound"),
    (errors.TenantNotFoundError, "RepoNotFound"),
    (errors.ModelNotFoundError, "RepoNotFound"),
    (errors.RepoNotFoundError, "RepoNotFound"),
]
IMMUTABLE = "private, max-age=31536000, immutable"


def hf_problem(exc: RegistryError) -> Response:
    """The problem answer of ``exc`` with the Hub's error headers (and ``X-Repo-Commit`` when known)."""
    headers = {"X-Error-Message": _header_text(exc.message)}
    code = next((c for cls, c in HF_ERROR_CODES if isinstance(exc, cls)), None)
    if code is not None:
        headers["X-Error-Code"] = code
    if isinstance(exc.details.get("commit"), str):
        # The Hub sends it with EntryNotFound: the client then remembers the file as missing at that commit.
        headers["X-Repo-Commit"] = exc.details["commit"]
    return problem_for(exc, headers=headers, error=exc.message)


class HfRoute(APIRoute):
    """A route whose deliberate errors, the token's included, answer with the Hub's error headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RegistryError as exc:
                return hf_problem(exc)

        return route


def _hub_headers(responses_: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    for status, response in responses_.items():
        headers = response.setdefault("headers", {})
        headers["X-Error-Message"] = {"schema": {"type": "string"}, "description": "the problem's detail"}
        if status == 404:
            headers["X-Error-Code"] = {"schema": {"type": "string",
                                                  "enum": ["RepoNotFound", "RevisionNotFound", "EntryNotFound"]},
                                       "description": "what was not found, as the Hub says it"}
    return responses_


router = APIRouter(prefix="/hf", tags=["hugging face"], route_class=HfRoute,
                   responses=_hub_headers(responses(*AUTHENTICATED, NotFoundError, UpstreamError)))


# --- repository info --------------------------------------------------------------------------------


@router.get("/api/models/{tenant}/{name}", response_model=HfModelInfoPublic, response_model_exclude_none=True)
def model_info(tenant: TenantName, name: ModelName, session: SessionDep, principal: PrincipalDep,
               container: ContainerDep) -> HfModelInfoPublic:
    """The repository at `main` (the `prod` alias): `sha` and every file (`siblings`)."""
    release = hf.resolve(session, principal, tenant, name, hf.DEFAULT_BRANCH, blob_store=container.blob_store)
    return _info(release, container)


@router.get("/api/models/{tenant}/{name}/revision/{revision}", response_model=HfModelInfoPublic,
            response_model_exclude_none=True)
def model_info_at(tenant: TenantName, name: ModelName, revision: Revision, session: SessionDep,
                  principal: PrincipalDep, container: ContainerDep) -> HfModelInfoPublic:
    """The repository at a revision: an alias, a version number or a commit, of an approved version."""
    return _info(hf.resolve(session, principal, tenant, name, revision, blob_store=container.blob_store),
                 container)


def _info(release: ResolvedRevision, container) -> HfModelInfoPublic:
    tenant = release.repo_id.split("/")[0]
    sealed = release.sealed_at.astimezone(dt.UTC) if release.sealed_at else None
    return HfModelInfoPublic(
        id=release.repo_id, modelId=release.repo_id, author=tenant, sha=release.commit,
        lastModified=sealed.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if sealed else None,
        private=True, disabled=False, gated=False,
        tags=[f"license:{release.license}"] if release.license else [],
        cardData=HfCardDataPublic(license=release.license) if release.license else None,
        siblings=[_sibling(f) for f in hf.describe_all(release, container.blob_store)],
    )


def _sibling(f: HfFile) -> HfSiblingPublic:
    lfs = HfSiblingLfsPublic(sha256=f.sha256, size=f.size, pointerSize=f.pointer_size) if f.lfs else None
    return HfSiblingPublic(rfilename=f.path, size=f.size, blobId=f.blob_id, lfs=lfs)


# --- listing ----------------------------------------------------------------------------------------


@router.get("/api/models/{tenant}/{name}/tree/{revision}", response_model=list[HfTreeEntryPublic],
            response_model_exclude_none=True)
def tree(tenant: TenantName, name: ModelName, revision: Revision, request: Request, response: Response,
         session: SessionDep, principal: PrincipalDep, container: ContainerDep,
         recursive: bool = False, expand: bool = False, cursor: Cursor = 0) -> list[HfTreeEntryPublic]:
    """The files and folders at the root, paged: the next page's URL is in `Link: <...>; rel="next"`."""
    return _tree(tenant, name, revision, "", request, response, session, principal, container, recursive, cursor)


@router.get("/api/models/{tenant}/{name}/tree/{revision}/{path:path}", response_model=list[HfTreeEntryPublic],
            response_model_exclude_none=True)
def tree_under(tenant: TenantName, name: ModelName, revision: Revision, path: FilePath, request: Request,
               response: Response, session: SessionDep, principal: PrincipalDep, container: ContainerDep,
               recursive: bool = False, expand: bool = False, cursor: Cursor = 0) -> list[HfTreeEntryPublic]:
    """The files and folders in a folder, paged like the root; a folder that does not exist is `EntryNotFound`."""
    return _tree(tenant, name, revision, path, request, response, session, principal, container, recursive,
                 cursor)


def _tree(tenant: str, name: str, revision: str, path: str, request: Request, response: Response, session,
          principal, container, recursive: bool, cursor: int) -> list[HfTreeEntryPublic]:
    release = hf.resolve(session, principal, tenant, name, revision, blob_store=container.blob_store)
    page = hf.tree_page(release, path, recursive=recursive, cursor=cursor,
                        page_size=container.settings.hf_tree_page_size, blob_store=container.blob_store)
    if page.next_cursor is not None:
        # The next page is asked of the commit, not the alias: an alias that moves meanwhile cannot mix versions.
        folder = path.strip("/")
        next_path = f"/hf/api/models/{tenant}/{name}/tree/{release.commit}" + (f"/{quote(folder)}" if folder else "")
        query = urlencode({"recursive": str(recursive).lower(), "cursor": page.next_cursor})
        response.headers["Link"] = f'<{request.url.replace(path=next_path, query=query)}>; rel="next"'
    response.headers["X-Repo-Commit"] = release.commit
    return [_tree_entry(e) for e in page.entries]


def _tree_entry(e: TreeEntry) -> HfTreeEntryPublic:
    lfs = None
    if e.file is not None and e.file.lfs:
        lfs = HfLfsPublic(oid=e.file.sha256, size=e.file.size, pointerSize=e.file.pointer_size)
    return HfTreeEntryPublic(type=e.type, oid=e.oid, size=e.size, path=e.path, lfs=lfs)


async def _paths_info_body(request: Request) -> HfPathsInfoRequest:
    """The body of paths-info: a form (``paths`` repeated, as ``huggingface_hub`` sends it) or JSON."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if content_type == "application/json":
            return HfPathsInfoRequest.model_validate_json(await request.body())
        if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            # Starlette's default of 1,000 fields would refuse MAX_PATHS paths with `expand` beside them.
            form = await request.form(max_fields=MAX_PATHS + 1)
            fields: dict[str, Any] = {"paths": [p for p in form.getlist("paths") if isinstance(p, str)]}
            if "expand" in form:
                fields["expand"] = form["expand"]
            return HfPathsInfoRequest.model_validate(fields)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])} for err in e.errors()]) from None
    raise errors.InvalidInputError(f"paths-info takes a form or JSON body, not {content_type or 'none'!r}",
                                   field="body")


# Read by hand (a form or JSON), so FastAPI puts no schema in `components`: the document carries it inline.
# A form may leave `paths` out (none asked); JSON must name it.
_PATHS_INFO_JSON = HfPathsInfoRequest.model_json_schema()
_PATHS_INFO_FORM = {**_PATHS_INFO_JSON, "required": []}


@router.post(
    "/api/models/{tenant}/{name}/paths-info/{revision}", response_model=list[HfTreeEntryPublic],
    response_model_exclude_none=True,
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/x-www-form-urlencoded": {"schema": _PATHS_INFO_FORM},
        "application/json": {"schema": _PATHS_INFO_JSON}}}},
)
async def paths_info(tenant: TenantName, name: ModelName, revision: Revision, request: Request, session: SessionDep,
                     principal: PrincipalDep, container: ContainerDep) -> list[HfTreeEntryPublic]:
    """The files and folders among `paths` (others are left out, as the Hub does); what `HfFileSystem.info` asks."""
    # Before the body is read: a caller who may not read the repository is refused without sending it.
    release = await run_in_threadpool(partial(hf.resolve, blob_store=container.blob_store), session, principal,
                                      tenant, name, revision)
    body = await _paths_info_body(request)
    entries = await run_in_threadpool(hf.paths_info, release, body.paths, container.blob_store)
    return [_tree_entry(e) for e in entries]


# --- files ------------------------------------------------------------------------------------------

_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
_FILE_HEADERS = {
    "X-Repo-Commit": {"schema": {"type": "string"}, "description": "the commit the revision resolved to"},
    "ETag": {"schema": {"type": "string"}, "description": "sha256 of an LFS file, git blob sha1 of another"},
    "X-Linked-Size": {"schema": {"type": "string"}, "description": "the file's size"},
}


@router.head("/{tenant}/{name}/resolve/{revision}/{path:path}", response_class=Response, responses={
    200: {"description": "the file's metadata; no body", "headers": _FILE_HEADERS}})
def head_file(tenant: TenantName, name: ModelName, revision: Revision, path: FilePath, session: SessionDep,
              principal: PrincipalDep, container: ContainerDep) -> Response:
    """What `hf_hub_download` asks first: commit, ETag and size of a file."""
    release = hf.resolve(session, principal, tenant, name, revision, blob_store=container.blob_store)
    f = hf.describe(release.file(path), container.blob_store)
    return Response(status_code=200, headers={**_file_headers(release, f), "Content-Length": str(f.size)})


@router.get("/{tenant}/{name}/resolve/{revision}/{path:path}", response_class=Response, responses={
    200: {"description": "the file's bytes", "content": _BYTES, "headers": _FILE_HEADERS},
    206: {"description": "the bytes of the requested range", "content": _BYTES, "headers": _FILE_HEADERS},
    **_hub_headers(responses(RangeNotSatisfiableError))})
def get_file(tenant: TenantName, name: ModelName, revision: Revision, path: FilePath, session: SessionDep,
             principal: PrincipalDep, container: ContainerDep,
             range_header: str | None = Header(None, alias="Range")) -> Response:
    """A file's bytes; one `Range: bytes=a-b` gives a 206 (resumed downloads, safetensors header reads)."""
    release = hf.resolve(session, principal, tenant, name, revision, blob_store=container.blob_store)
    served = release.file(path)
    f = hf.describe(served, container.blob_store)
    requested = byte_range(range_header, f.size)
    start, end = requested or (0, f.size)
    headers = {**_file_headers(release, f), "Content-Length": str(end - start)}
    if requested is not None:
        headers["Content-Range"] = content_range(start, end, f.size)
    hf.record_download(session, principal, release, clock=container.clock)
    # The version's bytes are read only now: the database session is done with.
    session.close()
    return StreamingResponse(hf.read_range(served, container.blob_store, start, end),
                             status_code=206 if requested else 200, headers=headers,
                             media_type="application/octet-stream")


def _file_headers(release: ResolvedRevision, f: HfFile) -> dict[str, str]:
    headers = {"X-Repo-Commit": release.commit, "ETag": f'"{f.etag}"', "X-Linked-Size": str(f.size),
               "Accept-Ranges": "bytes",
               # By commit, the answer never changes; by alias, it changes when the alias moves.
               "Cache-Control": IMMUTABLE if release.pinned else "private, no-cache"}
    if f.lfs:
        headers["X-Linked-Etag"] = f'"{f.sha256}"'
    return headers


def _header_text(text: str) -> str:
    """``text`` as a header value: printable ASCII on one line (non-ASCII escaped), bounded."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(c if " " <= c <= "~" else " " for c in escaped)[:512]
