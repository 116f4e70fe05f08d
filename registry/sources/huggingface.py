"""``HuggingFaceSource``: a model repository on any Hugging Face-compatible hub.

Resolution and downloads go through ``huggingface_hub`` itself (``HfApi``, ``hf_hub_url``,
``get_session``, ``build_hf_headers``), so modelreg speaks exactly the protocol the Hub's own client does
(``docs/hub-protocol.md``). The endpoint is always explicit: nothing here falls back to the public hub,
and the machine's own HF token is never picked up (only the token given is sent).

``resolve`` pins a branch or tag to its 40-hex commit and lists the files there: LFS files come with
their published sha256 (checked by the blob store), plain git files with their git blob sha1 (checked by
the stream ``open`` returns, which also checks the size).

Usage (a sketch, not run as a doctest)::

    source = HuggingFaceSource("acme/tiny", endpoint="http://127.0.0.1:8000")
    snapshot = source.resolve("main")
    for f in snapshot.files:
        blob_store.put(source.open(snapshot.revision, f), expected_sha256=f.sha256)
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterator, NoReturn, Sequence

import httpx2
from huggingface_hub import HfApi, get_session, hf_hub_url
from huggingface_hub import errors as hf_errors
from huggingface_hub.hf_api import ModelInfo, RepoFile
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, validate_repo_id

from registry.domain.errors import (
    DigestMismatchError,
    EntryNotFoundError,
    InvalidInputError,
    RegistryError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamError,
)
from registry.domain.files import SHA1_RE, SHA256_RE, validate_path
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.sources.filters import FileFilter

CHUNK_SIZE = 1024 * 1024
_RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_WHOAMI: dict[tuple[str, str], str | None] = {}


class HuggingFaceSource(Source):
    """A model repository on a Hugging Face-compatible hub.

    Args:
        repo_id: ``org/name`` (or a legacy single-segment name).
        endpoint: Base URL of the hub, e.g. ``https://huggingface.co`` or a loopback test hub.
        token: Bearer token for private or gated repositories; never forwarded to a redirect's
            other host (a presigned object-store URL).
        include: Globs of files to mirror; all when empty.
        exclude: Globs of files to leave out.
        timeout: Seconds to wait to connect and between two reads.
        chunk_size: Bytes per chunk ``open`` yields.
        max_resumes: How often one ``open`` stream resumes with ``Range`` after the connection broke
            mid-file (only after some progress, so a dead upstream fails fast).

    Raises:
        InvalidInputError: a malformed repo id or endpoint.
    """

    kind = "hf"

    def __init__(
        self,
        repo_id: str,
        *,
        endpoint: str,
        token: str | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        timeout: float = 30.0,
        chunk_size: int = CHUNK_SIZE,
        max_resumes: int = 3,
    ) -> None:
        try:
            validate_repo_id(repo_id)
        except hf_errors.HFValidationError as e:
            raise InvalidInputError(f"not a Hugging Face repo id: {repo_id!r}", repo=repo_id) from e
        if not isinstance(endpoint, str) or not re.match(r"^https?://[^/]+", endpoint):
            raise InvalidInputError(f"not an http(s) hub endpoint: {endpoint!r}", endpoint=str(endpoint))
        self.repo_id = repo_id
        self.endpoint = endpoint.rstrip("/")
        self.filter = FileFilter(include=include, exclude=exclude)
        self.timeout = timeout
        self.chunk_size = chunk_size
        self.max_resumes = max_resumes
        # False, not None: None would make huggingface_hub read the machine's stored token.
        self._token: str | bool = token or False

    def __repr__(self) -> str:
        return f"HuggingFaceSource({self.repo_id!r}, endpoint={self.endpoint!r})"

    # --- resolve -------------------------------------------------------------------------------

    def resolve(self, revision: str | None) -> Snapshot:
        """Pin ``revision`` (a branch, a tag, a commit, or None for the default branch) and list its files.

        The commit comes from the repository info; the files from the recursive tree at that commit,
        page by page, so a branch that moves meanwhile cannot mix two commits' files.

        Raises:
            RepoNotFoundError: no such repository (or a private one the token cannot see).
            RevisionNotFoundError: no such branch, tag or commit.
            InvalidPathError: a listed path is not clean, or two collide.
            UpstreamError: the hub failed, could not be reached, or answered something malformed.
        """
        api = HfApi(endpoint=self.endpoint, token=self._token, library_name="modelreg")
        try:
            info: ModelInfo = api.model_info(self.repo_id, revision=revision, timeout=self.timeout)
            commit = info.sha
            if not isinstance(commit, str) or not SHA1_RE.match(commit):
                raise UpstreamError(
                    f"{self.endpoint} resolved {self.repo_id}@{revision} to {commit!r}, not a 40-hex commit",
                    repo=self.repo_id,
                    revision=revision,
                    retryable=False,
                )
            entries = [
                e for e in api.list_repo_tree(self.repo_id, revision=commit, recursive=True) if isinstance(e, RepoFile)
            ]
        except RegistryError:
            raise
        except Exception as e:
            self._raise_translated(e, revision)
        listed = [self._upstream_file(e) for e in entries]
        files = sorted(self.filter.select(listed), key=lambda f: f.path)
        return Snapshot(
            source_kind=self.kind,
            repo=self.repo_id,
            requested_revision=revision,
            revision=commit,
            files=tuple(files),
            license=_license(info),
            card=self._card(api, info),
        )

    def _card(self, api: HfApi, info: ModelInfo) -> dict:
        """The card's license fields as found and, for a gated repository, who accepted its terms.

        The hub let this token list a gated repository's files, so the token's owner accepted its access
        terms: recorded as the identity the hub reports (``whoami``) when it answers, and always as a
        fingerprint (a sha256 prefix, never the token).
        """
        card_data = info.card_data.to_dict() if info.card_data is not None else {}
        card = {key: card_data.get(key) for key in ("license", "license_name", "license_link")}
        gated = getattr(info, "gated", None)
        card["gated"] = gated if gated in (False, "auto", "manual") else (None if gated is None else str(gated)[:64])
        if gated:
            card["access"] = self._access()
        return card

    def _access(self) -> dict:
        if not self._token:
            return {"token": None}
        token = str(self._token)
        fingerprint = "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]
        return {"token": "registry", "fingerprint": fingerprint, "identity": self._whoami(token, fingerprint)}

    def _whoami(self, token: str, fingerprint: str) -> str | None:
        """The token's user name as the hub reports it; None when the hub does not say.

        The Hub rate-limits ``whoami`` hard, so an answer is remembered per endpoint and token for the
        life of the process.
        """
        key = (self.endpoint, fingerprint)
        if key in _WHOAMI:
            return _WHOAMI[key]
        try:
            who = HfApi(endpoint=self.endpoint, library_name="modelreg").whoami(token=token)
        # whoami is optional: a hub (or mirror) that does not answer it leaves only the fingerprint.
        except Exception:  # noqa: BLE001
            return None
        name = who.get("name") if isinstance(who, dict) else None
        _WHOAMI[key] = name[:256] if isinstance(name, str) else None
        return _WHOAMI[key]

    def _upstream_file(self, entry: RepoFile) -> UpstreamFile:
        # The path is checked by the filter's select, with the whole listing; here only the digests.
        if entry.lfs is not None:
            sha256, size = entry.lfs.sha256, entry.lfs.size
            if not isinstance(sha256, str) or not SHA256_RE.match(sha256):
                raise self._malformed(entry.path, f"LFS sha256 {sha256!r}")
            if not isinstance(size, int) or size < 0:
                raise self._malformed(entry.path, f"size {size!r}")
            return UpstreamFile(path=entry.path, size=size, sha256=sha256, etag=sha256)
        blob_id, size = entry.blob_id, entry.size
        if not isinstance(blob_id, str) or not SHA1_RE.match(blob_id):
            raise self._malformed(entry.path, f"git blob id {blob_id!r}")
        if not isinstance(size, int) or size < 0:
            raise self._malformed(entry.path, f"size {size!r}")
        return UpstreamFile(path=entry.path, size=size, git_sha1=blob_id, etag=blob_id)

    def _malformed(self, path: str, what: str) -> UpstreamError:
        return UpstreamError(
            f"{self.endpoint} lists {path!r} of {self.repo_id} with a malformed {what}",
            repo=self.repo_id,
            path=path,
            retryable=False,
        )

    def _raise_translated(self, e: Exception, revision: str | None, path: str | None = None) -> NoReturn:
        """Raise our error for a huggingface_hub or transport error, chained; re-raise anything else."""
        translated = self._translate(e, revision, path)
        if translated is None:
            raise e
        raise translated from e

    def _translate(self, e: Exception, revision: str | None, path: str | None) -> RegistryError | None:
        if isinstance(e, hf_errors.RevisionNotFoundError):
            return RevisionNotFoundError(self.repo_id, str(revision))
        if isinstance(e, hf_errors.GatedRepoError):
            return UpstreamError(
                f"{self.repo_id} is gated on {self.endpoint}: its token has no access",
                repo=self.repo_id,
                reason="gated",
                retryable=False,
            )
        if isinstance(e, hf_errors.RepositoryNotFoundError):
            return RepoNotFoundError(self.repo_id)
        if isinstance(e, hf_errors.RemoteEntryNotFoundError):
            return EntryNotFoundError(self.repo_id, path or "")
        if isinstance(e, hf_errors.HfHubHTTPError):
            status = e.response.status_code if e.response is not None else None
            return UpstreamError(
                f"{self.endpoint} answered HTTP {status} for {self.repo_id}",
                repo=self.repo_id,
                status=status,
                retryable=status is None or status in _RETRYABLE_STATUSES or status >= 500,
            )
        if isinstance(e, (httpx2.HTTPError, OSError)):
            # Connection refused or reset, timeouts, protocol errors, too many redirects, offline mode.
            return UpstreamError(
                f"cannot reach {self.endpoint} for {self.repo_id}: {type(e).__name__}: {e}",
                repo=self.repo_id,
                retryable=True,
            )
        if isinstance(e, (ValueError, KeyError, TypeError)):
            # An answer that does not parse as the Hub's (bad JSON, missing fields).
            return UpstreamError(
                f"{self.endpoint} answered malformed data for {self.repo_id}: {type(e).__name__}: {e}",
                repo=self.repo_id,
                retryable=False,
            )
        return None

    # --- open ----------------------------------------------------------------------------------

    def open(self, revision: str, file: UpstreamFile) -> Iterator[bytes]:
        """Stream ``file`` from ``{endpoint}/{repo}/resolve/{revision}/{path}``, never touching disk.

        Redirects are followed, to the same host or to another (a presigned object-store URL, which
        gets no ``Authorization``). The stream must be read to its end: after the last chunk it raises
        ``SizeMismatchError`` if the byte count differs from ``file.size`` and, for a plain git file,
        ``DigestMismatchError`` (algorithm ``git-sha1``) if the bytes are not ``file.git_sha1``. An LFS
        file's sha256 is left to the caller. Bytes beyond ``file.size`` fail at once.

        Args:
            revision: The 40-hex commit from ``resolve``; branch names are refused, as they move.
            file: One of that snapshot's files.

        Raises:
            InvalidInputError: ``revision`` is not a commit.
            InvalidPathError: ``file.path`` is not clean.
            RepoNotFoundError, RevisionNotFoundError, EntryNotFoundError: the hub no longer has it.
            UpstreamError: HTTP or transport failure (``details['retryable']`` says whether to retry).
        """
        if not isinstance(revision, str) or not SHA1_RE.match(revision):
            raise InvalidInputError(f"open needs a 40-hex commit, not {revision!r}", revision=str(revision))
        validate_path(file.path)
        url = hf_hub_url(self.repo_id, file.path, revision=revision, endpoint=self.endpoint)
        # identity: the byte count must be the file's, not a compressed body's.
        headers = build_hf_headers(
            token=self._token, library_name="modelreg", headers={"Accept-Encoding": "identity"}
        )
        return self._stream(url, headers, revision, file)

    def _stream(self, url: str, headers: dict[str, str], revision: str, file: UpstreamFile) -> Iterator[bytes]:
        git_sha1 = hashlib.sha1(b"blob %d\x00" % file.size) if file.git_sha1 else None
        received = 0
        resumes = 0
        session = get_session()
        while True:
            request_headers = dict(headers)
            if received:
                request_headers["Range"] = f"bytes={received}-"
            at_start = received
            try:
                with session.stream("GET", url, headers=request_headers, timeout=self.timeout) as response:
                    if response.status_code >= 400:
                        response.read()
                        hf_raise_for_status(response)
                    served = response.headers.get("X-Repo-Commit")
                    if served is not None and served != revision:
                        raise UpstreamError(
                            f"{self.endpoint} served {file.path} of commit {served} when asked for {revision}",
                            repo=self.repo_id,
                            path=file.path,
                            retryable=False,
                        )
                    skip = self._bytes_to_skip(response, received, file)
                    for chunk in response.iter_bytes(self.chunk_size):
                        if skip:
                            dropped = min(skip, len(chunk))
                            chunk, skip = chunk[dropped:], skip - dropped
                            if not chunk:
                                continue
                        received += len(chunk)
                        if received > file.size:
                            raise SizeMismatchError(file.path, expected=file.size, actual=received)
                        if git_sha1 is not None:
                            git_sha1.update(chunk)
                        yield chunk
                break
            except RegistryError:
                raise
            except httpx2.TransportError as e:
                # Resume only a stream that was making progress; a dead upstream fails at once.
                if received > at_start and resumes < self.max_resumes:
                    resumes += 1
                    continue
                self._raise_translated(e, revision, file.path)
            except Exception as e:
                self._raise_translated(e, revision, file.path)
        if received != file.size:
            raise SizeMismatchError(file.path, expected=file.size, actual=received)
        if git_sha1 is not None and git_sha1.hexdigest() != file.git_sha1:
            raise DigestMismatchError(
                file.path, expected=str(file.git_sha1), actual=git_sha1.hexdigest(), algorithm="git-sha1"
            )

    def _bytes_to_skip(self, response: httpx2.Response, received: int, file: UpstreamFile) -> int:
        """How many leading bytes of ``response`` were already yielded by an earlier attempt."""
        if not received:
            return 0
        if response.status_code == 206:
            content_range = response.headers.get("Content-Range", "")
            match = re.match(r"^bytes (\d+)-", content_range)
            if match is None or int(match.group(1)) != received:
                raise UpstreamError(
                    f"{self.endpoint} resumed {file.path} at {content_range!r}, asked for byte {received}",
                    repo=self.repo_id,
                    path=file.path,
                    retryable=True,
                )
            return 0
        # The server ignored Range and sent the whole file again.
        return received


def _license(info: ModelInfo) -> str | None:
    """The license the model card declares, else the Hub's ``license:`` tags; None when neither."""
    card_license = getattr(info.card_data, "license", None) if info.card_data is not None else None
    if isinstance(card_license, str) and card_license:
        return card_license
    if isinstance(card_license, list) and card_license and all(isinstance(x, str) for x in card_license):
        return ", ".join(card_license)
    tags = [t.split(":", 1)[1] for t in info.tags or () if isinstance(t, str) and t.startswith("license:")]
    return ", ".join(tags) if tags else None
