"""Where an eval copies the model: one directory per run under a known root, locked while the run lives.

A worker killed mid-eval (SIGKILL, the OOM killer) runs no cleanup, so its copy of the model stays.
Each run therefore holds an exclusive ``flock`` on a lock file beside its directory
(``<root>/eval-<id>.lock`` and ``<root>/eval-<id>/``); the kernel drops the lock when the process
dies, however it dies. :func:`sweep` removes every run whose lock no process holds: at worker start
and in ``modelreg gc``. A run of another live worker on the same machine keeps its lock and is left
alone; the root is per user, so one user never sweeps another's.

Usage (a sketch, not run as a doctest)::

    with eval_workdir(root) as work:
        materialize(files, store, work / "model")
    sweep(root)  # after a crash: the number of runs removed
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from registry.evals.sandbox import remove_tree

PREFIX = "eval-"
LOCK_SUFFIX = ".lock"


def default_root() -> Path:
    """``$TMPDIR/modelreg-evals-<uid>``: the same for every worker and ``gc`` of this user on this machine."""
    return Path(tempfile.gettempdir()) / f"modelreg-evals-{os.getuid()}"


@contextmanager
def eval_workdir(root: Path | None = None) -> Iterator[Path]:
    """A fresh directory for one eval, locked until the block ends, then removed.

    Args:
        root: Where run directories live; default :func:`default_root`.

    Raises:
        PermissionError: the root is not a directory of this user's (another user made it first).
    """
    root = _own_root(root or default_root())
    while True:
        name = PREFIX + secrets.token_hex(8)
        lock_path = root / (name + LOCK_SUFFIX)
        fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        # A sweeper may have taken the lock file between its creation and our flock, and unlinked it.
        if _same_file(fd, lock_path):
            break
        os.close(fd)
    work = root / name
    try:
        work.mkdir(mode=0o700)
        yield work
    finally:
        remove_tree(work)
        lock_path.unlink(missing_ok=True)
        os.close(fd)


def sweep(root: Path | None = None) -> int:
    """Remove the run directories of evals whose process is gone; return how many.

    Args:
        root: Where run directories live; default :func:`default_root`. A missing root is empty.
    """
    root = root or default_root()
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.name.endswith(LOCK_SUFFIX):
            continue
        run = entry.name.removesuffix(LOCK_SUFFIX)
        try:
            fd = os.open(entry.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue  # its run just ended
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live run
        try:
            # Its process is gone: the lock file goes last, so a sweep killed here finds the run again.
            if (root / run).exists():
                remove_tree(root / run)
                removed += 1
            os.unlink(entry.path)
        finally:
            os.close(fd)
    # A directory without its lock file: a run killed while it was being removed. Looked up now, not in
    # the listing: a run makes its lock before its directory, and a listing may hold one and not the other.
    for entry in entries:
        if (entry.name.startswith(PREFIX) and not entry.name.endswith(LOCK_SUFFIX)
                and _is_dir(entry.path) and not os.path.lexists(entry.path + LOCK_SUFFIX)):
            remove_tree(Path(entry.path))
            removed += 1
    return removed


def _own_root(root: Path) -> Path:
    try:
        root.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(root)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"eval work root {root} is not a directory of this user's")
    return root


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False  # removed by the pass above


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
