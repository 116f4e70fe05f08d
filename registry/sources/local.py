"""``LocalDirectorySource``: a directory on this machine (a mounted volume, a training output).

``resolve`` walks the directory without following links: a symbolic link anywhere below it, or a
fifo, socket or device, is an ``InvalidPathError``, so a mirror can never read outside the directory.
Every selected file is hashed while walking (a local read is cheap, and it lets the blob store check the
sha256 in the same pass it stores), and the revision is the sha256 over the sorted lines
``path\\tsize\\tsha256`` of the selected files: the same contents give the same revision, anywhere.
Files left out by the filters are not read at all, so they do not count towards the revision.

Files and directories are opened relative to their parent's descriptor with ``O_NOFOLLOW``, so a
directory swapped for a link between ``resolve`` and ``open`` is refused too.

Usage (a sketch, not run as a doctest)::

    LocalDirectorySource("/srv/models/tiny").resolve(None).revision
    # -> '5f0c...'
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Iterator, Sequence

from registry.domain.errors import (
    InvalidPathError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamChangedError,
    UpstreamError,
)
from registry.domain.files import validate_path
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.sources.filters import FileFilter

CHUNK_SIZE = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a fifo swapped in for a file must fail the type check, not wait for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def listing_digest(entries: Sequence[tuple[str, int, str]]) -> str:
    """The revision of a directory: sha256 over ``path\\tsize\\tsha256`` lines sorted by path."""
    lines = "".join(f"{path}\t{size}\t{sha256}\n" for path, size, sha256 in sorted(entries))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


class LocalDirectorySource(Source):
    """The regular files below ``directory``.

    Args:
        directory: The directory; the path to it may go through links, nothing below it may.
        include: Globs of files to mirror; all when empty.
        exclude: Globs of files to leave out.
        chunk_size: Bytes per read, when hashing and in ``open``.
    """

    kind = "local"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        self.directory = Path(os.path.abspath(directory))
        self.filter = FileFilter(include=include, exclude=exclude)
        self.chunk_size = chunk_size

    def __repr__(self) -> str:
        return f"LocalDirectorySource({str(self.directory)!r})"

    def resolve(self, revision: str | None) -> Snapshot:
        """Walk the directory, hash the selected files and compute the revision.

        Args:
            revision: None for the directory as it is now, or a revision from an earlier ``resolve``,
                which the contents must still match.

        Raises:
            RepoNotFoundError: the directory does not exist or is not a directory.
            RevisionNotFoundError: ``revision`` is not the directory's current revision.
            InvalidPathError: a link, a special file, or a name that is not a clean UTF-8 path.
            UpstreamError: the directory could not be read.
        """
        try:
            root_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError) as e:
            raise RepoNotFoundError(str(self.directory)) from e
        except OSError as e:
            raise self._io_error(e) from e
        try:
            listed: list[tuple[str, int]] = []
            self._walk(root_fd, "", listed)
            selected = self.filter.select(listed, path_of=lambda item: item[0])
            files = [
                UpstreamFile(path=path, size=size, sha256=self._hash(root_fd, path, size))
                for path, size in sorted(selected)
            ]
        except OSError as e:
            raise self._io_error(e) from e
        finally:
            os.close(root_fd)
        current = listing_digest([(f.path, f.size, f.sha256 or "") for f in files])
        if revision is not None and revision != current:
            raise RevisionNotFoundError(str(self.directory), revision)
        return Snapshot(
            source_kind=self.kind,
            repo=str(self.directory),
            requested_revision=revision,
            revision=current,
            files=tuple(files),
        )

    def _walk(self, dir_fd: int, prefix: str, out: list[tuple[str, int]]) -> None:
        with os.scandir(dir_fd) as entries:
            names = sorted((entry.name, entry.stat(follow_symlinks=False)) for entry in entries)
        for name, st in names:
            path = _clean(prefix + name)
            if stat.S_ISLNK(st.st_mode):
                raise InvalidPathError(path, "symbolic link")
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    self._walk(child, path + "/", out)
                finally:
                    os.close(child)
            elif stat.S_ISREG(st.st_mode):
                out.append((path, st.st_size))
            else:
                raise InvalidPathError(path, "not a regular file or directory")

    def _hash(self, root_fd: int, path: str, size: int) -> str:
        digest = hashlib.sha256()
        for chunk in self._read(root_fd, path, size):
            digest.update(chunk)
        return digest.hexdigest()

    def _read(self, root_fd: int, path: str, expected_size: int) -> Iterator[bytes]:
        fd = _open_below(root_fd, path)
        with os.fdopen(fd, "rb", buffering=0) as f:
            received = 0
            while chunk := f.read(self.chunk_size):
                received += len(chunk)
                if received > expected_size:
                    raise SizeMismatchError(path, expected=expected_size, actual=received)
                yield chunk
        if received != expected_size:
            raise SizeMismatchError(path, expected=expected_size, actual=received)

    def open(self, revision: str, file: UpstreamFile) -> Iterator[bytes]:
        """Stream one file; its sha256 (from ``resolve``) is the caller's to check.

        The stream must be read to its end: it raises ``SizeMismatchError`` after the last chunk when
        the file's length changed since ``resolve``.

        Raises:
            InvalidPathError: ``file.path`` is not clean, or a link or special file is on its way.
            UpstreamChangedError: the file is gone since ``resolve``.
            UpstreamError: the file could not be read.
        """
        validate_path(file.path)
        return self._stream(file)

    def _stream(self, file: UpstreamFile) -> Iterator[bytes]:
        try:
            root_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise self._io_error(e) from e
        try:
            yield from self._read(root_fd, file.path, file.size)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise UpstreamChangedError(str(self.directory), file.path, expected=file.sha256) from e
        except OSError as e:
            raise self._io_error(e, file.path) from e
        finally:
            os.close(root_fd)

    def _io_error(self, e: OSError, path: str | None = None) -> UpstreamError:
        where = f"{self.directory}/{path}" if path else str(self.directory)
        return UpstreamError(
            f"cannot read {where}: {e.strerror or e}", repo=str(self.directory), path=path, retryable=False
        )


def _clean(path: str) -> str:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPathError(path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                               "not UTF-8") from None
    return validate_path(path)


def _open_below(root_fd: int, path: str) -> int:
    """Open ``path`` below ``root_fd`` for reading, refusing links at every step and non-regular files."""
    *dirs, name = path.split("/")
    fds: list[int] = []
    try:
        parent = root_fd
        for segment in dirs:
            parent = _open_step(segment, _DIR_FLAGS, parent, path)
            fds.append(parent)
        fd = _open_step(name, _FILE_FLAGS, parent, path)
    finally:
        for opened in fds:
            os.close(opened)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidPathError(path, "not a regular file")
    return fd


def _open_step(name: str, flags: int, dir_fd: int, path: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:
        # O_NOFOLLOW fails with ELOOP on a link (ENOTDIR for a link where a directory is expected).
        if _is_link(name, dir_fd):
            raise InvalidPathError(path, "symbolic link") from e
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
