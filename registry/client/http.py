"""A small HTTP client for the registry API, shared by the CLI and the fetch client.

Imports only httpx and the domain errors: it runs on serving nodes too.
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

import httpx

from registry.client.errors import NetworkError
from registry.client.token_file import TokenFile
from registry.domain.errors import RegistryError


def tls_context() -> ssl.SSLContext:
    """The process's TLS context for verifying servers, as httpx makes by default (``SSL_CERT_FILE``, else
    ``SSL_CERT_DIR``, else certifi's bundle), made once: each new one reads the whole CA bundle again (about 10
    ms of CPU), and every client of a :class:`~registry.client.api.RegistryApi` would make its own."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _tls_context(_cert_file: str | None, _cert_dir: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()


class RemoteError(RegistryError):
    """The registry answered with a problem (RFC 9457); ``details`` holds its body."""

    code = "remote"

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        type_ = str(problem.get("type", ""))
        self.status = status
        self.problem_code = type_.rsplit("/", 1)[-1] if type_ else "http-error"
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        # The body is the server's: its keys (say, "message") must not collide with our arguments.
        super().__init__(f"{' '.join(str(detail).split())} [{self.problem_code}, HTTP {status}]")
        self.details = dict(problem)


class UnexpectedResponseError(RegistryError):
    """The server answered successfully but not with the JSON the registry API sends (a proxy page?)."""

    code = "unexpected-response"

    def __init__(self, url: str, status: int, content_type: str) -> None:
        super().__init__(
            f"{url} answered HTTP {status} with {content_type or 'no content type'}, not the registry's JSON "
            "(is MODELREG_URL the registry?)",
            url=url, status=status, content_type=content_type,
        )


class RegistryClient:
    """Calls ``{url}/v1/...`` with a bearer token; problems become :class:`RemoteError`."""

    def __init__(self, url: str, token: "str | TokenFile | None", *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        # A TokenFile (a pod's projected token) is read on each request, as the kubelet rotates it.
        auth = token if isinstance(token, TokenFile) else None
        headers = {"Authorization": f"Bearer {token}"} if token and auth is None else {}
        headers["User-Agent"] = "modelreg-client/0.1"
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport,
                                 auth=auth, verify=tls_context())

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise NetworkError(f"cannot reach the registry at {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise _remote_error(response)
        if response.status_code == 204 or not response.content:
            return None
        content_type = response.headers.get("content-type", "")
        if not content_type.startswith(("application/json", "application/problem+json")):
            raise UnexpectedResponseError(str(response.url), response.status_code, content_type)
        try:
            return response.json()
        except ValueError:
            raise UnexpectedResponseError(str(response.url), response.status_code, content_type) from None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def get_bytes(self, path: str, *, limit: int = 64 << 20, params: dict[str, Any] | None = None) -> bytes:
        """A body that is not JSON (an eval log, an eval set's JSONL), or one kept byte for byte (an export),
        at most ``limit`` bytes."""
        try:
            with self.http.stream("GET", path, params=params) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _remote_error(response)
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise RegistryError(f"the response from {self.url}{path} is over {limit} bytes")
                return bytes(data)
        except httpx.HTTPError as exc:
            raise NetworkError(f"cannot reach the registry at {self.url}: {exc}") from exc

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remote_error(response: httpx.Response) -> RemoteError:
    """The error an answer of status 400 or more stands for: its problem, or a short line of its body."""
    try:
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError
    except ValueError:
        body = {"detail": response.text[:200] or response.reason_phrase}
    return RemoteError(response.status_code, body)
