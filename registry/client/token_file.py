"""A bearer token read from a file the kubelet rotates: a pod's projected service-account token.

``MODELREG_TOKEN_FILE`` (or ``--token-file``) names it, typically
``/var/run/secrets/modelreg/token``. The kubelet replaces the token before it expires by swapping a
symlink (``..data``) atomically, so the file is stat'ed on every request (following links) and read
again when what it points at changed; surrounding whitespace is stripped.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "token"
    >>> _ = path.write_text("abc.def.ghi\\n")
    >>> TokenFile(path).token()
    'abc.def.ghi'
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Generator

import httpx

from registry.domain.errors import RegistryError

MAX_TOKEN_FILE_BYTES = 64 * 1024


class TokenFileError(RegistryError):
    code = "token-file"


class TokenFile(httpx.Auth):
    """Sets ``Authorization: Bearer <the file's token>`` on each request, read again after a rotation."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int, int] | None = None
        self._token = ""

    def token(self) -> str:
        with self._lock:
            try:
                st = os.stat(self.path)  # follows the kubelet's symlinks to the current file
                stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
                if stamp != self._seen:
                    with open(self.path, "rb") as f:
                        data = f.read(MAX_TOKEN_FILE_BYTES + 1)
                    if len(data) > MAX_TOKEN_FILE_BYTES:
                        raise TokenFileError(f"token file {self.path} is over {MAX_TOKEN_FILE_BYTES} bytes")
                    token = data.decode("utf-8", "strict").strip()
                    if not token or any(c.isspace() for c in token):
                        raise TokenFileError(f"token file {self.path} holds no single token")
                    self._token, self._seen = token, stamp
            except OSError as exc:
                raise TokenFileError(f"cannot read the token file {self.path}: {exc.strerror or exc}") from None
            except UnicodeDecodeError:
                raise TokenFileError(f"token file {self.path} is not UTF-8 text") from None
            return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        yield request


def token_source(token: str | None, token_file: str | os.PathLike[str] | None) -> "str | TokenFile | None":
    """What a client authenticates with: the token file when one is named (``--token-file`` or
    ``MODELREG_TOKEN_FILE``), else the token (``--token`` or ``MODELREG_TOKEN``)."""
    if token_file is None or str(token_file) == "":
        token_file = os.environ.get("MODELREG_TOKEN_FILE") or None
    if token_file:
        return TokenFile(token_file)
    return token
