"""Downloading one blob into the node cache (and DEST): parallel ranged streams into memory, hashed in order.

A blob of ``size`` bytes is split into parts of ``part_size`` bytes. Each part is read by one stream
straight into a page-aligned buffer lent by a :class:`Buffers` pool that every blob of a fetch shares
(memory is bounded by the pool: ``count * size`` bytes), written at its offset into ``partial/<digest>``
and, for a fetch into DEST, into DEST's new file (``copy_to``) from the same buffer, then handed to the
hash. The sha256 takes the parts in order, from the buffers, so no byte is read back: a part that
completes before the ones in front of it keeps its buffer until they are hashed. DEST's file therefore
holds exactly the bytes the hash took (its own file: no link to the cache, no copy of the partial,
which any root process on the node can write); it is removed unless the digest matches. Writes of
whole pages bypass the page cache (``O_DIRECT``, :mod:`registry.node.blobfile`) where the filesystem
allows it: a small node otherwise spends as much CPU copying every byte into the page cache as receiving
it (``bench/README.md``, Fetch). A filesystem that refuses ``O_DIRECT`` (tmpfs) gets ordinary writes.

How far each part got on disk is recorded in ``partial/<digest>.parts.json`` (after the bytes), so an
interrupted download resumes where each part stopped: the part's bytes on disk are read back into its
buffer and only the rest is asked for. Each stream asks for exactly its range and never reads past it.
The file enters the cache only when the digest matches; a mismatch deletes the partial and raises
:class:`~registry.domain.errors.DigestMismatchError`.

Example (the shape of a plan; the I/O needs a transport URL):
    >>> plan_parts(100, 40)
    [(0, 40), (40, 80), (80, 100)]
"""

from __future__ import annotations

import hashlib
import json
import mmap
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

from registry.client.api import RegistryApi
from registry.client.errors import NetworkError, TransportError
from registry.domain.errors import DigestMismatchError, SizeMismatchError
from registry.node.blobfile import BlobFile
from registry.statefile import write_atomic

DEFAULT_PART_SIZE = 8 << 20
MAX_PART_SIZE = 64 << 20
"""The largest part (and buffer) a fetch uses; a fetch holds ``parallel + SPARE_BUFFERS`` of them at most."""
SPARE_BUFFERS = 4
"""Buffers beyond one per stream: completed parts waiting for the hash of the parts before them."""
SAVE_EVERY = 64 << 20
"""Bytes written between two records of the parts' progress (a crash re-downloads at most this much more)."""
RETRIES = 3
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def plan_parts(size: int, part_size: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each part of a blob of ``size`` bytes."""
    return [(start, min(size, start + part_size)) for start in range(0, size, max(1, part_size))]


class Buffers:
    """``count`` page-aligned buffers of ``size`` bytes, lent to part streams; :meth:`take` waits while all are out.

    Anonymous mappings: memory is committed as the bytes land, and returned when the pool is dropped.
    """

    def __init__(self, count: int, size: int) -> None:
        self.size = size
        self._free = [mmap.mmap(-1, size) for _ in range(max(1, count))]
        self._available = threading.Semaphore(len(self._free))
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        self._available.acquire()
        with self._lock:
            return self._free.pop()

    def give(self, buffer: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buffer)
        self._available.release()


class PartialBlob:
    """A blob being written at ``path``: its parts, how far each got on disk, and the hash of the parts in order."""

    def __init__(self, path: Path, size: int, part_size: int, copy_to: Path | None = None) -> None:
        self.path, self.size, self.part_size = path, size, part_size
        self.state_path = path.with_name(path.name + ".parts.json")
        self.parts = plan_parts(size, part_size)
        self.done = [0] * len(self.parts)
        self.failed = False
        self._lock = threading.Lock()
        self._since_save = 0
        self._resume(part_size)
        self.file = BlobFile(path, size)
        self.copy_to = copy_to
        try:
            self.copy = BlobFile(copy_to, size, new=True) if copy_to is not None else None
        except BaseException:
            self.file.close()
            raise
        self._ready: dict[int, tuple[mmap.mmap, int]] = {}
        self._next = 0
        self._hashing = False
        self._hash = hashlib.sha256()

    def _resume(self, part_size: int) -> None:
        try:
            state = json.loads(self.state_path.read_text())
            if (state.get("size") == self.size and state.get("part_size") == part_size
                    and self.path.stat().st_size == self.size and len(state.get("done", [])) == len(self.parts)):
                self.done = [max(0, min(int(d), end - start)) for d, (start, end) in zip(state["done"], self.parts)]
                return
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        self.path.unlink(missing_ok=True)
        self.done = [0] * len(self.parts)

    @property
    def resumed_bytes(self) -> int:
        return sum(self.done)

    def save(self) -> None:
        with self._lock:
            state = {"size": self.size, "part_size": self.part_size, "done": list(self.done)}
            self._since_save = 0
        write_atomic(self.state_path, json.dumps(state).encode(), make_parents=True)

    def written(self, index: int, view: memoryview, length: int) -> None:
        """Write the first ``length`` bytes of part ``index`` (in ``view``) to disk and record them."""
        start, _ = self.parts[index]
        self.file.write(view[:length], start)
        with self._lock:
            self._since_save += length - self.done[index]
            self.done[index] = length
            save = self._since_save >= SAVE_EVERY
        if save:
            self.save()

    def copied(self, index: int, view: memoryview) -> None:
        """Write the whole part ``index`` (in ``view``, the buffer the hash will take) into DEST's file."""
        if self.copy is not None:
            start, end = self.parts[index]
            self.copy.write(view[:end - start], start)

    def completed(self, index: int, buffer: mmap.mmap, buffers: Buffers) -> None:
        """Part ``index`` is whole in ``buffer``: hash every part now in order; their buffers go back to the pool."""
        with self._lock:
            self._ready[index] = (buffer, self.parts[index][1] - self.parts[index][0])
        while True:
            with self._lock:
                if self._hashing or self._next not in self._ready:
                    return
                buffer, length = self._ready.pop(self._next)
                self._hashing = True
            try:
                with memoryview(buffer) as view:
                    self._hash.update(view[:length])
            finally:
                buffers.give(buffer)
                with self._lock:
                    self._next += 1
                    self._hashing = False

    def finish_hash(self) -> str:
        with self._lock:
            if self._next != len(self.parts):
                raise NetworkError(f"{self.path.name}: only {self._next} of {len(self.parts)} parts arrived")
            return self._hash.hexdigest()

    def release(self, buffers: Buffers) -> None:
        """Give back the buffers of parts still waiting for the hash (the download failed)."""
        with self._lock:
            waiting, self._ready = list(self._ready.values()), {}
        for buffer, _ in waiting:
            buffers.give(buffer)

    def close(self, *, keep_copy: bool = False) -> None:
        """Close the files; DEST's copy is removed unless ``keep_copy`` (the digest matched)."""
        self.file.close()
        if self.copy is not None:
            self.copy.close()
            if not keep_copy:
                assert self.copy_to is not None
                self.copy_to.unlink(missing_ok=True)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        self.state_path.unlink(missing_ok=True)


def _stream_part(api: RegistryApi, url: str, blob: PartialBlob, index: int, buffer: mmap.mmap,
                 buffers: Buffers, progress: Callable[[int], None]) -> None:
    start, end = blob.parts[index]
    length = end - start
    got = on_disk = blob.done[index]
    view = memoryview(buffer)
    try:
        if blob.failed:
            raise NetworkError(f"{blob.path.name}: another part failed")
        if got:
            blob.file.read_into(view[:got], start)

        def advance(n: int) -> None:
            nonlocal got
            got += n
            progress(n)

        for attempt in range(RETRIES + 1):
            if got == length:
                break
            try:
                api.read_range_into(url, start + got, end, blob.size, view[got:length], advance)
                break
            except NetworkError as exc:
                # A server that answers other bytes than asked (TransportError) will not mend on retry.
                if attempt == RETRIES or isinstance(exc, TransportError) or exc.details.get("status", 500) < 500:
                    raise
                time.sleep(0.2 * 2 ** attempt)
        blob.written(index, view, length)
        blob.copied(index, view)
    except BaseException:
        blob.failed = True
        if got > on_disk:
            try:
                blob.written(index, view, got)  # what arrived is kept for the next attempt
            except OSError:
                pass
        buffers.give(buffer)
        raise
    blob.completed(index, buffer, buffers)


def download_blob(api: RegistryApi, url: str, path: Path, *, digest: str, size: int, pool: Executor,
                  part_size: int = DEFAULT_PART_SIZE, buffers: Buffers | None = None,
                  progress: Callable[[int], None] = lambda n: None, copy_to: Path | None = None) -> int:
    """Download a blob into ``path`` with its parts on ``pool``; return the bytes resumed from before.

    ``buffers`` (of at least ``part_size`` bytes each) bounds the memory of every download sharing it;
    without one the download gets two buffers of its own. The file at ``path`` holds exactly the blob on
    return. With ``copy_to`` (a path that must not exist), that new file gets every part too, written
    from the buffer the hash takes it from: on return it holds exactly the hashed blob; on any error it
    is removed.

    Raises:
        DigestMismatchError: the bytes hash to another digest (the partial file is deleted).
        SizeMismatchError: the server holds a blob of another size.
        NetworkError: a part failed after its retries (the partial is kept to resume).
        FileExistsError: ``copy_to`` exists.
    """
    if size == 0:
        if digest != EMPTY_SHA256:
            raise DigestMismatchError(path.name, expected=digest, actual=EMPTY_SHA256)
        path.write_bytes(b"")
        if copy_to is not None:
            with open(copy_to, "xb"):
                pass
        return 0
    if buffers is None:
        buffers = Buffers(2, part_size)
    if buffers.size < part_size:
        raise ValueError(f"buffers of {buffers.size} bytes cannot hold parts of {part_size}")
    blob = PartialBlob(path, size, part_size, copy_to)
    resumed = blob.resumed_bytes
    progress(resumed)
    futures: list[Future[None]] = []
    try:
        try:
            for index in range(len(blob.parts)):
                buffer = buffers.take()
                if blob.failed:
                    buffers.give(buffer)
                    break
                futures.append(pool.submit(_stream_part, api, url, blob, index, buffer, buffers, progress))
        finally:
            errors = []
            for future in futures:
                try:
                    future.result()
                except BaseException as exc:  # noqa: BLE001 - every part is awaited before one error is raised
                    errors.append(exc)
            blob.release(buffers)
            blob.save()
        if errors:
            raise errors[0]
        actual = blob.finish_hash()
    except BaseException as exc:
        blob.close()
        if isinstance(exc, SizeMismatchError):
            blob.discard()
        raise
    blob.close(keep_copy=actual == digest)
    if actual != digest:
        blob.discard()
        raise DigestMismatchError(path.name, expected=digest, actual=actual)
    blob.state_path.unlink(missing_ok=True)
    return resumed
