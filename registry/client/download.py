"""Downloading one blob into the node cache: parallel ranged streams, resumable, hashed as it arrives.

A blob of ``size`` bytes is split into parts of ``part_size`` bytes; the parts of every blob being
fetched share one pool of ``parallel`` streams, so a big file is read over several connections and
small files go several at once. Each stream asks for exactly its range and never reads past it.
Bytes are written in place into ``partial/<digest>`` and the bytes written are recorded in
``partial/<digest>.parts.json`` (after the bytes), so an interrupted download resumes where each
part stopped. The sha256 follows the contiguous written prefix (read back from the page cache while
the later parts still stream), so the digest is known moments after the last byte; the file enters
the cache only when the digest matches, and a mismatch deletes the partial and raises
:class:`~registry.domain.errors.DigestMismatchError`.

Example (the shape of a plan; the I/O needs a transport URL):
    >>> plan_parts(100, 40)
    [(0, 40), (40, 80), (80, 100)]
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

import httpx

from registry.client.api import RegistryApi
from registry.client.errors import NetworkError
from registry.client.trust import write_atomic
from registry.domain.errors import DigestMismatchError, SizeMismatchError

READ_CHUNK = 1 << 20
SAVE_EVERY = 8 << 20
"""Bytes a part writes between two records of its progress (a resume re-reads at most this much)."""
DEFAULT_PART_SIZE = 64 << 20
RETRIES = 3
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def plan_parts(size: int, part_size: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each part of a blob of ``size`` bytes."""
    return [(start, min(size, start + part_size)) for start in range(0, size, max(1, part_size))]


class PartialBlob:
    """A blob being written at ``path``: its parts, how far each got, and the hash of the written prefix."""

    def __init__(self, path: Path, size: int, part_size: int) -> None:
        self.path, self.size, self.part_size = path, size, part_size
        self.state_path = path.with_name(path.name + ".parts.json")
        self.parts = plan_parts(size, part_size)
        self.done = [0] * len(self.parts)
        self._lock = threading.Lock()
        self._hash_lock = threading.Lock()
        self._since_save = 0
        self._resume(part_size)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(self.fd, size)
        self.hashed = 0
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
        write_atomic(self.state_path, json.dumps(state).encode())

    def write(self, index: int, data: bytes) -> None:
        start, end = self.parts[index]
        offset = start + self.done[index]
        os.pwrite(self.fd, data, offset)
        with self._lock:
            self.done[index] += len(data)
            self._since_save += len(data)
            save = self._since_save >= SAVE_EVERY
        if save:
            self.save()
        self.advance_hash()

    def frontier(self) -> int:
        """The end of the contiguous written prefix."""
        with self._lock:
            for (start, end), done in zip(self.parts, self.done):
                if start + done < end:
                    return start + done
        return self.size

    def advance_hash(self) -> None:
        """Hash the written prefix further; whoever holds the hash lock does it, the others move on."""
        while self.frontier() > self.hashed:
            if not self._hash_lock.acquire(blocking=False):
                return
            try:
                target = self.frontier()
                while self.hashed < target:
                    chunk = os.pread(self.fd, min(4 * READ_CHUNK, target - self.hashed), self.hashed)
                    if not chunk:
                        break
                    self._hash.update(chunk)
                    self.hashed += len(chunk)
            finally:
                self._hash_lock.release()

    def finish_hash(self) -> str:
        self.advance_hash()
        with self._hash_lock:
            if self.hashed != self.size:
                raise NetworkError(f"{self.path.name}: only {self.hashed} of {self.size} bytes arrived")
            return self._hash.hexdigest()

    def close(self) -> None:
        os.close(self.fd)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        self.state_path.unlink(missing_ok=True)


def _stream_part(api: RegistryApi, url: str, blob: PartialBlob, index: int,
                 progress: Callable[[int], None]) -> None:
    start, end = blob.parts[index]
    for attempt in range(RETRIES + 1):
        offset = start + blob.done[index]
        if offset >= end:
            return
        try:
            with api.blob_range(url, offset, end, blob.size) as response:
                remaining = end - offset
                for chunk in response.iter_raw(READ_CHUNK):
                    if len(chunk) > remaining:
                        # Never more than declared: the rest is not read, and the blob is not what was signed.
                        raise SizeMismatchError(blob.path.name, expected=blob.size,
                                                actual=offset + (end - offset - remaining) + len(chunk))
                    blob.write(index, chunk)
                    remaining -= len(chunk)
                    progress(len(chunk))
                    if remaining == 0:
                        break
            if blob.done[index] < end - start:
                raise NetworkError(f"the stream of {blob.path.name} ended {end - start - blob.done[index]} "
                                   "bytes early")
            return
        except (NetworkError, httpx.HTTPError) as exc:
            blob.save()
            if attempt == RETRIES or getattr(exc, "details", {}).get("status", 500) < 500:
                raise exc if isinstance(exc, NetworkError) else NetworkError(str(exc)) from exc
            time.sleep(0.2 * 2 ** attempt)


def download_blob(api: RegistryApi, url: str, path: Path, *, digest: str, size: int, pool: Executor,
                  part_size: int = DEFAULT_PART_SIZE, progress: Callable[[int], None] = lambda n: None) -> int:
    """Download a blob into ``path`` with its parts on ``pool``; return the bytes resumed from before.

    The file at ``path`` holds exactly the blob on return.

    Raises:
        DigestMismatchError: the bytes hash to another digest (the partial file is deleted).
        SizeMismatchError: the server holds a blob of another size.
        NetworkError: a part failed after its retries (the partial is kept to resume).
    """
    if size == 0:
        if digest != EMPTY_SHA256:
            raise DigestMismatchError(path.name, expected=digest, actual=EMPTY_SHA256)
        path.write_bytes(b"")
        return 0
    blob = PartialBlob(path, size, part_size)
    resumed = blob.resumed_bytes
    progress(resumed)
    try:
        futures: list[Future[None]] = [
            pool.submit(_stream_part, api, url, blob, i, progress)
            for i, (start, end) in enumerate(blob.parts) if blob.done[i] < end - start]
        errors = []
        for future in futures:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 - every part is awaited before one error is raised
                errors.append(exc)
        blob.save()
        if errors:
            raise errors[0]
        actual = blob.finish_hash()
    except SizeMismatchError:
        blob.close()
        blob.discard()
        raise
    except BaseException:
        blob.close()
        raise
    blob.close()
    if actual != digest:
        blob.discard()
        raise DigestMismatchError(path.name, expected=digest, actual=actual)
    blob.state_path.unlink(missing_ok=True)
    return resumed
