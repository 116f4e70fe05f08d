"""Shutting a runner in, from inside its own process, before any runner code: files and network.

:func:`isolate` moves the calling process into new user, mount and network namespaces and makes its
root a read-only tmpfs holding only what the run needs, each at its usual path:

- read-only: the model directory, the eval sets, the Python that runs it (``sys.prefix``,
  ``sys.base_prefix``, site directories, the ``registry`` package), ``/usr`` and the ``/lib`` links, a
  few files of ``/etc`` (the loader cache, CA certificates, users, time zone) and any operator paths;
- writable: the run's work directory, and a private ``/tmp`` and ``/dev/shm``;
- ``/dev/null``, ``zero``, ``full``, ``random`` and ``urandom``; no ``/proc`` and no ``/sys`` (a procfs
  of the worker's PID namespace would show the worker's environment).

Everything else (the data directory with its keys and tokens, other tenants' blobs, the worker's home
and source tree) is not there. The network namespace has only ``lo``, brought up so a serve command on
``127.0.0.1`` answers; the one endpoint a suite names is reached through a Unix socket in the work
directory, relayed by the worker (:mod:`registry.evals.sandbox`). A user namespace is used so that the
same code runs for root and for an unprivileged worker; uid and gid map to themselves. Last, every
capability is given up for good, so the runner cannot change the mounts it was given.

It imports only the standard library: it runs in the child before anything else is loaded.

Usage (a sketch, not run as a doctest)::

    isolate("/tmp/run-1-root", read_only=["/tmp/m"], writable=["/tmp/run-1"])
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import socket
import struct
import sys
from pathlib import Path

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 38, 47, 4
# noroot, no_setuid_fixup, keep_caps (off) and no_cap_ambient_raise, each with its lock.
SECURE_BITS = 0b1 | 0b10 | 0b100 | 0b1000 | 0b100000 | 0b1000000 | 0b10000000
LINUX_CAPABILITY_VERSION_3 = 0x20080522

SYSTEM_READ_ONLY = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_READ_ONLY = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ssl", "/etc/ca-certificates",
                 "/etc/pki", "/etc/alternatives", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/hosts",
                 "/etc/nsswitch.conf", "/etc/mime.types")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class IsolationError(Exception):
    """The kernel refused a step of the isolation (no namespaces here, a mount denied)."""


def python_paths() -> list[str]:
    """What this interpreter needs to run a runner: its prefixes, site directories and ``registry``."""
    import registry

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(registry.__file__)}
    # Site directories only: a PYTHONPATH entry may be a whole source tree, data directory and all.
    paths.update(p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p))
    return sorted(p for p in paths if os.path.isdir(p))


def isolate(root: str, *, read_only: list[str], writable: list[str]) -> None:
    """Enter new namespaces and make ``root`` (an empty directory) this process's whole file system.

    Args:
        root: an empty directory to build the new root on (it stays empty outside).
        read_only: absolute paths (directories or files) to show read-only, at the same paths.
        writable: absolute paths to show writable, at the same paths.

    Raises:
        IsolationError: a namespace or a mount was refused; the process is then partly isolated
            at most, and must not run a runner unless unisolated runs are allowed.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), libc, "new user, mount and network namespaces")
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as e:
        raise IsolationError(f"the user namespace's id maps were refused: {e}") from None
    _call(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), libc, "a private mount namespace")
    _call(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"), libc,
          f"a tmpfs at {root}")
    # Scratch space first: the paths shown may lie under /tmp (the work directory usually does).
    for scratch in ("/tmp", "/dev/shm"):
        os.makedirs(root + scratch, exist_ok=True)
        _call(libc.mount(b"tmpfs", (root + scratch).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"), libc,
              f"a tmpfs at {scratch}")
    for top in SYSTEM_READ_ONLY:
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
    shown = [(p, True) for p in (*SYSTEM_READ_ONLY, *ETC_READ_ONLY) if os.path.exists(p) and not os.path.islink(p)]
    shown += [(p, True) for p in read_only] + [(p, False) for p in writable]
    shown += [(p, False) for p in DEVICES if os.path.exists(p)]
    # Parents before children, so a writable directory can sit inside a read-only one.
    for path, ro in sorted(shown, key=lambda item: item[0].count("/")):
        _bind(libc, path, root, read_only=ro)
    _call(libc.mount(None, root.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), libc,
          "the new root read-only")
    _pivot(libc, root)
    _loopback_up()
    _drop_capabilities(libc)


def _call(status: int, libc: ctypes.CDLL, what: str) -> None:
    if status != 0:
        errno = ctypes.get_errno()
        raise IsolationError(f"{what}: {os.strerror(errno)}")


def _bind(libc: ctypes.CDLL, path: str, root: str, *, read_only: bool, at: str | None = None) -> None:
    """Show host ``path`` under ``root`` at ``at`` (the same path unless given)."""
    at = at or path
    target = root + at
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            open(target, "x").close()
    _call(libc.mount(path.encode(), target.encode(), None, MS_BIND | MS_REC, None), libc, f"showing {path} at {at}")
    if read_only:
        # A remount in a user namespace must keep the flags the outer mount locked.
        kept = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _call(libc.mount(None, target.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept, None), libc,
              f"showing {at} read-only")


def _pivot(libc: ctypes.CDLL, root: str) -> None:
    """Make ``root`` ``/`` and detach the old root, so no path leads back to it."""
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise IsolationError(f"pivot_root: no system call number known for {platform.machine()}")
    os.chdir(root)
    # pivot_root(".", ".") stacks the old root on the new one; unmounting "." then drops it (pivot_root(2)).
    _call(libc.syscall(number, b".", b"."), libc, "pivot_root")
    _call(libc.umount2(b".", MNT_DETACH), libc, "detaching the old root")
    os.chdir("/")


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Give up every capability for good, so the runner cannot undo the mounts (remount the Python
    read-write, unmount a read-only view): as root of its user namespace it would hold them all.

    Secure bits keep an ``execve`` from granting them again to uid 0; ``no_new_privs`` stops set-uid files.
    """
    _call(libc.prctl(PR_SET_SECUREBITS, SECURE_BITS, 0, 0, 0), libc, "setting the secure bits")
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    _call(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), libc, "clearing ambient capabilities")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _call(libc.capset(header, data), libc, "dropping capabilities")
    _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), libc, "no_new_privs")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        try:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
        except OSError as e:
            raise IsolationError(f"bringing up the loopback interface: {e.strerror}") from None
