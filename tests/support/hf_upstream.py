"""A Hugging Face-compatible hub on loopback, for tests and the mirror benchmark.

``HfUpstream`` speaks the part of the Hub protocol that ``huggingface_hub`` 2.4 uses to resolve and
download models (``docs/hub-protocol.md``): repository info with ``?blobs=true`` siblings, the recursive
tree listing with ``Link`` pagination, and ``HEAD``/``GET`` on ``resolve`` with ``X-Repo-Commit``,
``ETag``/``X-Linked-Etag``, ``X-Linked-Size``, ``Range`` and ``X-Error-Code``. Repositories are git-like:
every commit gets a new 40-hex sha, branches and tags point at commits, and files are either LFS (the
sha256 is published as ``lfs.oid``) or plain git blobs (identified by their git blob sha1).

File contents live on disk, named by their sha256 (or are referenced in place when given as a
``Path``), and are streamed with ``sendfile``, so serving a multi-gigabyte model costs little CPU.

Faults to test against: ``corrupt`` flips one served byte while keeping size and published digests;
``drop_after`` closes the connection mid-file; ``fail`` answers every request with an HTTP error;
``unreachable`` drops every connection unanswered; ``throttle`` caps the rate file bytes are sent at
(so a test can kill a downloader mid-file); ``add_path_traversal_repo`` lists ``../evil.txt``;
``lfs_redirect`` sends LFS downloads to a second "CDN" listener (another origin, like a presigned
object-store URL) or to a same-host path. Private repositories need ``token``.

Example:
    >>> with HfUpstream() as hub:                                   # doctest: +SKIP
    ...     hub.add_repo("acme/tiny")
    ...     sha = hub.commit("acme/tiny", {"config.json": b"{}"})
    ...     HfApi(endpoint=hub.url).model_info("acme/tiny").sha == sha
    True
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable, Literal, Mapping
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

CHUNK = 1024 * 1024
THROTTLE_SLICE = 64 * 1024
DEFAULT_LFS_THRESHOLD = 10 * 1024 * 1024
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5", ".msgpack", ".npz")
GITATTRIBUTES = b"".join(
    f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n".encode() for suffix in LFS_SUFFIXES
)


def git_blob_sha1(data: bytes) -> str:
    """The git blob id of ``data``: ``sha1("blob <len>\\0" + data)``."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class HfFile:
    """One file of a commit, as the upstream publishes it."""

    path: str
    size: int
    sha256: str
    blob_id: str
    """git blob sha1 of the contents (plain files) or of the LFS pointer (LFS files)."""
    lfs: bool
    location: Path
    pointer_size: int = 0

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


@dataclass
class _Repo:
    repo_id: str
    card_data: dict | None
    tags: list[str]
    private: bool
    gated: bool | str = False
    default_branch: str = "main"
    branches: dict[str, str] = field(default_factory=dict)
    git_tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, HfFile]] = field(default_factory=dict)
    commit_dates: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestRecord:
    """One request the upstream received (``server`` is ``"hub"`` or ``"cdn"``)."""

    server: str
    method: str
    path: str
    authorization: str | None
    range: str | None


class HfUpstream:
    """An in-process HF-compatible hub on ``127.0.0.1``; start with ``start()`` or ``with``.

    Args:
        root: Directory for file contents; a temporary one (removed on ``stop``) when None.
        page_size: Entries per page of the tree listing (the Hub uses 1000).
        lfs_threshold: Files at least this large are LFS (besides ``LFS_SUFFIXES``).
        token: The bearer token private and gated repositories require.
        token_owner: The user name ``/api/whoami-v2`` reports for ``token``; None: whoami is not served.
        lfs_redirect: ``None`` serves LFS files directly; ``"same-host"`` redirects them to a path on the
            hub; ``"other-host"`` to a second listener (another origin), as the Hub does to its CDN.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        page_size: int = 1000,
        lfs_threshold: int = DEFAULT_LFS_THRESHOLD,
        token: str | None = None,
        lfs_redirect: Literal["same-host", "other-host"] | None = None,
        token_owner: str | None = None,
    ) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="hf-upstream-")) if root is None else Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        self.page_size = page_size
        self.lfs_threshold = lfs_threshold
        self.token = token
        self.token_owner = token_owner
        self.lfs_redirect = lfs_redirect
        self.requests: list[RequestRecord] = []
        self._repos: dict[str, _Repo] = {}
        self._corrupt: dict[tuple[str, str, str], int] = {}
        self._drops: dict[tuple[str, str], list[int]] = {}
        self._fail_status: int | None = None
        self._unreachable = False
        self._bytes_per_second: float | None = None
        self._lock = threading.RLock()
        self._counter = itertools.count(1)
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.url = ""
        self.cdn_url = ""

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> HfUpstream:
        hub = self._serve("hub")
        cdn = self._serve("cdn")
        self.url = f"http://127.0.0.1:{hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{cdn.server_address[1]}"
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> HfUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, name: str) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, name))
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name=f"hf-upstream-{name}", daemon=True)
        thread.start()
        self._servers.append(server)
        self._threads.append(thread)
        return server

    # --- repositories -------------------------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        *,
        card_data: dict | None = None,
        tags: Iterable[str] = (),
        private: bool = False,
        gitattributes: bool = True,
        gated: bool | str = False,
    ) -> str:
        """Create a repository whose ``main`` holds one initial commit, as the Hub does.

        Args:
            repo_id: ``org/name``.
            card_data: The model card metadata (``cardData``), e.g. ``{"license": "apache-2.0"}``.
            tags: Extra tags; ``license:<id>`` is added from ``card_data``.
            private: Requests need ``Authorization: Bearer <token>``.
            gated: The Hub's ``gated`` field (False, ``"auto"``, ``"manual"``): the info is public, files
                need the token (the Hub answers 403 ``GatedRepo`` to others).
            gitattributes: Whether the initial commit holds the Hub's usual ``.gitattributes``.

        Returns:
            The sha of the initial commit.
        """
        if repo_id.count("/") != 1:
            raise ValueError("repo ids here are org/name")
        tag_list = list(tags)
        if card_data and isinstance(card_data.get("license"), str):
            tag_list.append(f"license:{card_data['license']}")
        with self._lock:
            if repo_id in self._repos:
                raise ValueError(f"{repo_id} exists")
            self._repos[repo_id] = _Repo(repo_id, card_data, tag_list, private, gated)
            return self.commit(repo_id, {".gitattributes": GITATTRIBUTES} if gitattributes else {})

    def commit(
        self,
        repo_id: str,
        files: Mapping[str, bytes | Path],
        *,
        branch: str = "main",
        delete: Iterable[str] = (),
        lfs_threshold: int | None = None,
    ) -> str:
        """Commit ``files`` on top of ``branch`` (created from the default branch if new).

        Paths are taken as given, unchecked, so a test can publish hostile names. A ``Path`` value is
        served in place (not copied): it must not change while the upstream runs.

        Args:
            repo_id: An existing repository.
            files: New or replaced files: their bytes, or a file on disk.
            branch: The branch to move to the new commit.
            delete: Paths to remove.
            lfs_threshold: Overrides the upstream's threshold for this commit.

        Returns:
            The new commit's 40-hex sha.
        """
        threshold = self.lfs_threshold if lfs_threshold is None else lfs_threshold
        new_files = {path: self._store(path, content, threshold) for path, content in files.items()}
        with self._lock:
            repo = self._repos[repo_id]
            parent = repo.branches.get(branch) or repo.branches.get(repo.default_branch)
            tree = dict(repo.commits[parent]) if parent else {}
            for path in delete:
                tree.pop(path, None)
            tree.update(new_files)
            listing = "".join(f"{p}\0{f.etag}\n" for p, f in sorted(tree.items()))
            sha = hashlib.sha1(
                f"{repo_id}\n{parent}\n{next(self._counter)}\n{listing}".encode("utf-8", "surrogateescape")
            ).hexdigest()
            repo.commits[sha] = tree
            repo.commit_dates[sha] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            repo.branches[branch] = sha
            return sha

    def tag(self, repo_id: str, name: str, sha: str) -> None:
        """Point tag ``name`` at commit ``sha``."""
        with self._lock:
            repo = self._repos[repo_id]
            if sha not in repo.commits:
                raise ValueError(f"no commit {sha}")
            repo.git_tags[name] = sha

    def create_branch(self, repo_id: str, name: str, sha: str) -> None:
        with self._lock:
            repo = self._repos[repo_id]
            if sha not in repo.commits:
                raise ValueError(f"no commit {sha}")
            repo.branches[name] = sha

    def add_path_traversal_repo(self, repo_id: str = "attacker/path-traversal") -> str:
        """A repository whose listing names ``../evil.txt`` next to an ordinary ``config.json``."""
        self.add_repo(repo_id)
        return self.commit(repo_id, {"config.json": b"{}\n", "../evil.txt": b"owned\n"})

    def file(self, repo_id: str, path: str, revision: str = "main") -> HfFile:
        """What the upstream publishes for ``path`` at ``revision``."""
        with self._lock:
            repo = self._repos[repo_id]
            return repo.commits[self._resolve(repo, revision)][path]

    def head(self, repo_id: str, branch: str = "main") -> str:
        with self._lock:
            return self._repos[repo_id].branches[branch]

    # --- faults ------------------------------------------------------------------------------

    def corrupt(self, repo_id: str, path: str, at_commit: str | None = None, offset: int | None = None) -> None:
        """Serve ``path`` at ``at_commit`` (default: head of main) with one byte flipped.

        Size, ETag, blob id and LFS sha256 stay as published, as after silent corruption at rest.
        """
        with self._lock:
            repo = self._repos[repo_id]
            sha = at_commit or repo.branches[repo.default_branch]
            size = repo.commits[sha][path].size
            if size == 0:
                raise ValueError("cannot corrupt an empty file")
            self._corrupt[(repo_id, sha, path)] = size // 2 if offset is None else offset

    def drop_after(self, repo_id: str, path: str, nbytes: int, times: int = 1) -> None:
        """Close the connection after sending ``nbytes`` of a GET of ``path`` (any commit), ``times`` times."""
        with self._lock:
            self._drops[(repo_id, path)] = [nbytes, times]

    def fail(self, status: int = 500) -> None:
        """Answer every request (hub and CDN) with ``status``."""
        self._fail_status = status

    def unreachable(self) -> None:
        """Drop every connection without answering."""
        self._unreachable = True

    def throttle(self, bytes_per_second: float | None) -> None:
        """Send file bodies (hub and CDN) at most ``bytes_per_second`` each; None lifts the cap.

        Takes effect at once, also for downloads in progress.
        """
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")
        self._bytes_per_second = bytes_per_second

    def heal(self) -> None:
        self._fail_status = None
        self._unreachable = False

    # --- internals ---------------------------------------------------------------------------

    def _store(self, path: str, content: bytes | Path, threshold: int) -> HfFile:
        if isinstance(content, Path):
            size = content.stat().st_size
            lfs = size >= threshold or path.endswith(LFS_SUFFIXES)
            sha256 = hashlib.sha256()
            sha1 = hashlib.sha1(b"blob %d\x00" % size)
            with content.open("rb") as f:
                while chunk := f.read(CHUNK):
                    sha256.update(chunk)
                    if not lfs:
                        sha1.update(chunk)
            digest, location = sha256.hexdigest(), content.resolve()
            blob_id = sha1.hexdigest()
        else:
            size = len(content)
            lfs = size >= threshold or path.endswith(LFS_SUFFIXES)
            digest = hashlib.sha256(content).hexdigest()
            location = self.root / "objects" / digest
            if not location.exists():
                tmp = location.with_suffix(f".tmp{threading.get_ident()}")
                tmp.write_bytes(content)
                os.replace(tmp, location)
            blob_id = git_blob_sha1(content)
        if lfs:
            pointer = lfs_pointer(digest, size)
            return HfFile(path, size, digest, git_blob_sha1(pointer), True, location, len(pointer))
        return HfFile(path, size, digest, blob_id, False, location)

    def _resolve(self, repo: _Repo, revision: str) -> str:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.git_tags:
            return repo.git_tags[revision]
        if revision in repo.commits:
            return revision
        raise KeyError(revision)


class _Answer(Exception):
    """An early answer (an error) from inside a handler."""

    def __init__(self, status: int, error: str, code: str | None = None, commit: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.code, self.commit = status, error, code, commit


def _make_handler(upstream: HfUpstream, server_name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "hf-upstream/1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            self._handle(head=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._handle(head=True)

        # -- plumbing --

        def _handle(self, head: bool) -> None:
            upstream.requests.append(
                RequestRecord(
                    server_name, self.command, self.path, self.headers.get("Authorization"), self.headers.get("Range")
                )
            )
            if upstream._unreachable:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                if upstream._fail_status is not None:
                    raise _Answer(upstream._fail_status, "upstream failure injected by the test")
                self._route(head)
            except _Answer as answer:
                self._send_error(answer, head)
            except _Unsatisfiable:
                pass
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send_error(self, answer: _Answer, head: bool) -> None:
            body = json.dumps({"error": answer.error}).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if answer.code:
                self.send_header("X-Error-Code", answer.code)
                self.send_header("X-Error-Message", answer.error)
            if answer.commit:
                self.send_header("X-Repo-Commit", answer.commit)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _send_json(self, obj: object, extra: Mapping[str, str] = {}) -> None:  # noqa: B006
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _repo(self, repo_id: str) -> _Repo:
            repo = upstream._repos.get(repo_id)
            if repo is None:
                raise _Answer(404, "Repository not found", "RepoNotFound")
            if repo.private and self.headers.get("Authorization") != f"Bearer {upstream.token}":
                # The Hub answers 401 for private repositories it will not reveal.
                raise _Answer(401, "Invalid username or password.", "RepoNotFound")
            return repo

        def _commit(self, repo: _Repo, revision: str) -> str:
            try:
                return upstream._resolve(repo, revision)
            except KeyError:
                raise _Answer(404, f"Invalid rev id: {revision}", "RevisionNotFound") from None

        # -- routes --

        def _route(self, head: bool) -> None:
            parts = urlsplit(self.path)
            segs = [unquote(s) for s in parts.path.split("/")[1:]]
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            if server_name == "cdn" or segs[:1] == ["cdn"]:
                if segs[:1] != ["cdn"] or len(segs) < 5:
                    raise _Answer(404, "not found")
                repo_id, commit, path = f"{segs[1]}/{segs[2]}", segs[3], "/".join(segs[4:])
                with upstream._lock:
                    repo = upstream._repos.get(repo_id)
                    hf_file = repo.commits.get(commit, {}).get(path) if repo else None
                if hf_file is None:
                    raise _Answer(404, "not found")
                self._send_file(repo_id, commit, hf_file, head)
                return
            if segs == ["api", "whoami-v2"] and not head:
                return self._whoami()
            if segs[:2] == ["api", "models"] and len(segs) >= 4:
                repo_id, rest = f"{segs[2]}/{segs[3]}", segs[4:]
                if head:
                    raise _Answer(405, "method not allowed")
                if not rest:
                    return self._info(repo_id, None, query)
                if rest[0] == "revision" and len(rest) >= 2:
                    return self._info(repo_id, "/".join(rest[1:]), query)
                if rest[0] == "tree" and len(rest) >= 2:
                    return self._tree(repo_id, rest[1], "/".join(rest[2:]), query)
                raise _Answer(404, "not found")
            if len(segs) >= 5 and segs[2] == "resolve":
                return self._resolve_file(f"{segs[0]}/{segs[1]}", segs[3], "/".join(segs[4:]), head)
            raise _Answer(404, "not found")

        def _whoami(self) -> None:
            if upstream.token_owner is None:
                raise _Answer(404, "not found")
            if self.headers.get("Authorization") != f"Bearer {upstream.token}":
                raise _Answer(401, "Invalid user token.")
            self._send_json({"type": "user", "name": upstream.token_owner, "auth": {"type": "access_token"}})

        def _info(self, repo_id: str, revision: str | None, query: dict[str, str]) -> None:
            with upstream._lock:
                repo = self._repo(repo_id)
                commit = self._commit(repo, revision or repo.default_branch)
                files = sorted(repo.commits[commit].values(), key=lambda f: f.path)
                blobs = query.get("blobs", "").lower() == "true"
                siblings = []
                for f in files:
                    sibling: dict[str, object] = {"rfilename": f.path}
                    if blobs:
                        sibling.update(size=f.size, blobId=f.blob_id)
                        if f.lfs:
                            sibling["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
                    siblings.append(sibling)
                info: dict[str, object] = {
                    "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id,
                    "modelId": repo_id,
                    "author": repo_id.split("/")[0],
                    "sha": commit,
                    "lastModified": repo.commit_dates[commit],
                    "private": repo.private,
                    "disabled": False,
                    "gated": repo.gated,
                    "tags": list(repo.tags),
                    "siblings": siblings,
                }
                if repo.card_data is not None:
                    info["cardData"] = repo.card_data
            self._send_json(info)

        def _tree(self, repo_id: str, revision: str, under: str, query: dict[str, str]) -> None:
            recursive = query.get("recursive", "").lower() == "true"
            cursor = int(query.get("cursor", "0") or 0)
            with upstream._lock:
                repo = self._repo(repo_id)
                commit = self._commit(repo, revision)
                files = repo.commits[commit]
            prefix = f"{under}/" if under else ""
            if under and not any(p.startswith(prefix) for p in files):
                raise _Answer(404, f"{under} does not exist on {revision}", "EntryNotFound", commit)
            entries: dict[str, dict[str, object]] = {}
            for path, f in files.items():
                if not path.startswith(prefix):
                    continue
                rel = path[len(prefix) :].split("/")
                # Every directory on the way is an entry of a recursive listing, as on the Hub.
                for depth in range(1, len(rel)):
                    if depth > 1 and not recursive:
                        break
                    d = prefix + "/".join(rel[:depth])
                    entries[d] = {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0,
                                  "path": d}
                if len(rel) > 1 and not recursive:
                    continue
                entry: dict[str, object] = {"type": "file", "oid": f.blob_id, "size": f.size, "path": path}
                if f.lfs:
                    entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
                entries[path] = entry
            listing = [entries[k] for k in sorted(entries)]
            page = listing[cursor : cursor + upstream.page_size]
            extra: dict[str, str] = {}
            if cursor + upstream.page_size < len(listing):
                params = {k: v for k, v in query.items() if k != "cursor"}
                params["cursor"] = str(cursor + upstream.page_size)
                url = f"http://{self.headers['Host']}{urlsplit(self.path).path}?{urlencode(params)}"
                extra["Link"] = f'<{url}>; rel="next"'
            self._send_json(page, extra)

        def _resolve_file(self, repo_id: str, revision: str, path: str, head: bool) -> None:
            with upstream._lock:
                repo = self._repo(repo_id)
                commit = self._commit(repo, revision)
                hf_file = repo.commits[commit].get(path)
                if repo.gated and self.headers.get("Authorization") != f"Bearer {upstream.token}":
                    raise _Answer(403, f"Access to model {repo_id} is restricted.", "GatedRepo")
            if hf_file is None:
                raise _Answer(404, f"{path} does not exist on {revision}", "EntryNotFound", commit)
            if hf_file.lfs and upstream.lfs_redirect is not None:
                target = f"/cdn/{repo_id}/{commit}/{quote(path)}?expires=3600&signature=test"
                base = upstream.cdn_url if upstream.lfs_redirect == "other-host" else ""
                self.send_response(302)
                self.send_header("Location", base + target)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("X-Linked-Etag", f'"{hf_file.sha256}"')
                self.send_header("X-Linked-Size", str(hf_file.size))
                self.send_header("ETag", f'"{hf_file.blob_id}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._send_file(repo_id, commit, hf_file, head)

        def _send_file(self, repo_id: str, commit: str, hf_file: HfFile, head: bool) -> None:
            size = hf_file.size
            start, end = 0, size  # [start, end)
            status = 200
            range_header = self.headers.get("Range")
            if range_header:
                start, end = self._parse_range(range_header, size)
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{hf_file.etag}"')
            if server_name == "hub":
                self.send_header("X-Repo-Commit", commit)
            if hf_file.lfs:
                self.send_header("X-Linked-Etag", f'"{hf_file.sha256}"')
                self.send_header("X-Linked-Size", str(size))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if head:
                return
            with upstream._lock:
                flip_at = upstream._corrupt.get((repo_id, commit, hf_file.path))
                stop_at = None
                drop = upstream._drops.get((repo_id, hf_file.path))
                if drop and drop[1] > 0:
                    drop[1] -= 1
                    stop_at = min(end, start + drop[0])
            self._stream(hf_file.location, start, end, flip_at, stop_at)

        def _parse_range(self, header: str, size: int) -> tuple[int, int]:
            unit, _, spec = header.partition("=")
            try:
                if unit.strip() != "bytes" or "," in spec:
                    raise ValueError
                first, _, last = spec.strip().partition("-")
                if first == "":
                    start, end = max(0, size - int(last)), size
                else:
                    start = int(first)
                    end = size if last == "" else min(size, int(last) + 1)
                if start >= size or start >= end:
                    raise ValueError
            except ValueError:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                raise _Unsatisfiable() from None
            return start, end

        def _stream(self, location: Path, start: int, end: int, flip_at: int | None, stop_at: int | None) -> None:
            limit = end if stop_at is None else stop_at
            with location.open("rb") as f:
                if flip_at is not None and start <= flip_at < limit:
                    self._sendfile(f, start, flip_at)
                    f.seek(flip_at)
                    self.wfile.write(bytes([f.read(1)[0] ^ 0xFF]))
                    self._sendfile(f, flip_at + 1, limit)
                else:
                    self._sendfile(f, start, limit)
            if stop_at is not None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        def _sendfile(self, f, start: int, end: int) -> None:  # noqa: ANN001
            while end > start:
                rate = upstream._bytes_per_second
                if rate is None:
                    self.connection.sendfile(f, start, end - start)
                    return
                # Small slices, each followed by the pause it is worth at the current rate.
                count = min(end - start, THROTTLE_SLICE)
                sent = self.connection.sendfile(f, start, count)
                if not sent:  # the file is shorter than published
                    return
                start += sent
                time.sleep(sent / rate)

    return Handler


class _Unsatisfiable(Exception):
    pass
