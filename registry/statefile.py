"""The one way modelreg writes a secret or state file: whole or not at all, under a unique temporary name.

Two writes are offered. :func:`write_atomic` replaces the file (the admin token, a node's trust and
download state, an exported document, an eval child's result): a reader sees the old content or the
new, never half. :func:`create_once` makes a file that is made
once and then only read (the console key, the presign secret, a signing key): processes starting
together each try to create it, exactly one wins, and every one of them returns the winner's bytes.

Each writer uses its own temporary file beside the target (``mkstemp``: a fixed ``x.tmp`` is what
two first starts once renamed from under each other), fsyncs it, then publishes it with
``os.replace`` (replace) or ``os.link`` (create, which refuses an existing target).

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "console-key"
    >>> create_once(path, b"first") == create_once(path, b"second") == b"first"
    True
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, make_parents: bool = False) -> None:
    """Write ``data`` to ``path``, replacing what is there, so a reader never sees half a file.

    Args:
        path: The file; its directory must exist unless ``make_parents``.
        data: The whole content.
        mode: The file's permissions (0600: secrets are the owner's only, even while written).
        make_parents: Create the missing directories above ``path`` first.
    """
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _stage(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` with ``data``, never over an existing file.

    Raises:
        FileExistsError: ``path`` exists already (another process may have just made it).
    """
    tmp = _stage(path, data, mode)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()
    fsync_dir(path.parent)


def create_once(path: Path, data: bytes, *, mode: int = 0o600) -> bytes:
    """Create ``path`` with ``data`` unless it exists; return the file's content either way.

    Concurrent first starts agree on one value: the loser of the race reads the winner's file, which
    is complete from the moment it appears.

    Args:
        path: The file; its directory must exist.
        data: The content to write if the file is missing (a fresh random secret, say).
        mode: The file's permissions when created.
    """
    try:
        create_exclusive(path, data, mode=mode)
    except FileExistsError:
        return path.read_bytes()
    return data


def _stage(path: Path, data: bytes, mode: int) -> Path:
    # mkstemp creates the file with mode 0600 and a name no other writer uses.
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode != 0o600:
            os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def fsync_dir(directory: Path) -> None:
    """Make a new, renamed or removed entry of ``directory`` survive a power loss, not only a file's bytes."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
