"""Blob files written and read past the page cache: the download's parts, the cache-to-DEST copy, and
serve-s3's chunks in the node cache.

A node writing a multi-gigabyte model through the page cache spends as much CPU filling fresh page-cache
pages as receiving the bytes (``bench/README.md``, Fetch). :class:`BlobFile` writes whole pages with
``O_DIRECT`` from page-aligned buffers (an anonymous ``mmap``) and the unaligned rest with ordinary writes;
a filesystem that refuses ``O_DIRECT`` (tmpfs) gets ordinary writes throughout. :func:`copy_hashed` copies
a file into a new one through one such buffer, hashing each chunk between its read and its write, so the
copy holds exactly the bytes hashed and no byte is read twice.

Example:
    >>> import hashlib, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp()); _ = (folder / "a").write_bytes(b"weights")
    >>> copy_hashed(folder / "a", folder / "b", limit=100) == (7, hashlib.sha256(b"weights").hexdigest())
    True
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import threading
from pathlib import Path

from registry.client.errors import NetworkError
from registry.domain.errors import SizeMismatchError

ALIGN = 4096
COPY_CHUNK = 1 << 20
"""Bytes per read, hash and write of :func:`copy_hashed` (one buffer per copy in flight)."""


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


class BlobFile:
    """A blob's file, open twice: unbuffered (``O_DIRECT``) for whole pages where allowed, buffered for the rest.

    ``new``: the file must not exist yet (DEST's copy); else an existing partial is reopened to resume.
    """

    def __init__(self, path: Path, size: int, *, new: bool = False) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_EXCL if new else 0), 0o600)
        os.ftruncate(self.fd, size)
        self.direct: int | None = None
        if hasattr(os, "O_DIRECT"):
            try:
                self.direct = os.open(path, os.O_WRONLY | os.O_DIRECT)
            except OSError:
                self.direct = None
        self._lock = threading.Lock()

    def write(self, data: memoryview, offset: int) -> None:
        """Write ``data`` (the start of a page-aligned buffer) at ``offset``."""
        whole = len(data) - len(data) % ALIGN if offset % ALIGN == 0 else 0
        direct = self.direct
        if whole and direct is not None:
            try:
                pwrite_all(direct, data[:whole], offset)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._no_direct()  # the filesystem took the open but not the write: buffered from now on
                whole = 0
        else:
            whole = 0
        if whole < len(data):
            pwrite_all(self.fd, data[whole:], offset + whole)

    def read_into(self, into: memoryview, offset: int) -> None:
        got = 0
        while got < len(into):
            n = os.preadv(self.fd, [into[got:]], offset + got)
            if n <= 0:
                raise NetworkError(f"the partial file ended {len(into) - got} bytes early")
            got += n

    def _no_direct(self) -> None:
        with self._lock:
            if self.direct is not None:
                os.close(self.direct)
                self.direct = None

    def close(self) -> None:
        self._no_direct()
        os.close(self.fd)


def _open_direct_read(path: Path) -> int | None:
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return None


def copy_hashed(source: Path, target: Path, *, limit: int) -> tuple[int, str]:
    """Copy at most about ``limit`` + 1 bytes of ``source`` into the new file ``target``; the bytes copied and
    their sha256.

    Each chunk is read into the buffer, hashed there, then written from it: ``target`` holds exactly what
    was hashed, whatever ``source`` does meanwhile. Reads, like writes, bypass the page cache where the
    filesystem allows it (a cache blob the cold fetch wrote is not in it, and filling it costs a small
    node as much CPU as the hash). ``target`` is left for the caller to keep or remove.

    Raises:
        FileNotFoundError: ``source`` does not exist (``target`` is not created).
        FileExistsError: ``target`` exists.
    """
    h = hashlib.sha256()
    copied = 0
    with open(source, "rb", buffering=0) as src:
        direct = _open_direct_read(source)
        out = BlobFile(target, limit, new=True)
        buffer = mmap.mmap(-1, COPY_CHUNK)
        try:
            with memoryview(buffer) as view:
                while copied <= limit:
                    n = 0
                    if direct is not None and copied % ALIGN == 0:
                        try:
                            n = os.preadv(direct, [view], copied)
                        except OSError as exc:
                            if exc.errno != errno.EINVAL:
                                raise
                            os.close(direct)  # the filesystem took the open but not the read
                            direct = None
                    if direct is None or copied % ALIGN:
                        n = os.preadv(src.fileno(), [view], copied)
                    if not n:
                        break
                    h.update(view[:n])
                    out.write(view[:n], copied)
                    copied += n
            if copied != limit:
                os.ftruncate(out.fd, copied)  # the caller sees the other size; the file says it too
        finally:
            buffer.close()
            out.close()
            if direct is not None:
                os.close(direct)
    return copied, h.hexdigest()


def write_whole_file(path: Path, data: memoryview) -> None:
    """Write ``data`` (the start of a page-aligned buffer) as the whole file ``path``, past the page cache
    where the filesystem allows it."""
    out = BlobFile(path, len(data))
    try:
        out.write(data, 0)
    finally:
        out.close()


def read_whole_file(path: Path, into: memoryview) -> bool:
    """Fill ``into`` (the start of a page-aligned buffer) with the file ``path``, past the page cache where
    the filesystem allows it; False when there is no such file.

    Raises:
        SizeMismatchError: the file is not exactly ``len(into)`` bytes long.
    """
    try:
        source = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return False
    with source:
        size = os.fstat(source.fileno()).st_size
        if size != len(into):
            raise SizeMismatchError(path.name, expected=len(into), actual=size)
        whole, got = len(into) - len(into) % ALIGN, 0
        direct = _open_direct_read(path) if whole else None
        if direct is not None:
            try:
                while got < whole:
                    n = os.preadv(direct, [into[got:whole]], got)
                    if n <= 0:
                        break
                    got += n
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise  # EINVAL: the filesystem took the open but not the read; the rest is read buffered
            finally:
                os.close(direct)
        while got < len(into):
            n = os.preadv(source.fileno(), [into[got:]], got)
            if n <= 0:
                raise SizeMismatchError(path.name, expected=len(into), actual=got)
            got += n
    return True
