"""Running a command the way a container runtime runs an image's entrypoint: an unprivileged uid, a root
of read-only binds, only the paths asked for writable, exactly the environment given.

:func:`run_contained` starts ``python -m tests.support.contained SPEC`` which, before the command:

- enters a new mount namespace (as root) or new user and mount namespaces mapping the caller's uid to
  the container's (as anyone else), so the same test runs under CI's unprivileged user and as root;
- builds a new root on a tmpfs as :func:`registry.evals.isolation.isolate` does, with its system paths,
  ``/etc`` files and devices read-only (the image's OS) and the Python that runs ``modelreg`` (the
  image's install), a private ``/tmp``, and each ``mounts`` entry (a host path at a container path,
  read-only unless asked): the container's volumes;
- remounts that root read-only, pivots into it, becomes ``uid`` with no capability left, and execs
  ``argv`` (looked up in ``env``'s ``PATH``) with ``env`` and nothing else.

The network stays the host's: the registry under test listens on loopback.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

from registry.evals import isolation
from registry.evals.isolation import MS_NODEV, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT, _call

CLONE_NEWUSER, CLONE_NEWNS = isolation.CLONE_NEWUSER, isolation.CLONE_NEWNS
REPO = Path(__file__).resolve().parents[2]


def run_contained(argv: list[str], env: dict[str, str], *, uid: int, root: Path,
                  mounts: list[tuple[Path, str, bool]], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``argv`` contained; ``mounts``: (host path, container path, writable); ``root``: where to make
    the new root's directory."""
    root.mkdir()
    spec = root.with_suffix(".json")
    spec.write_text(json.dumps({"argv": argv, "env": env, "uid": uid, "root": str(root),
                                "mounts": [[str(h), c, w] for h, c, w in mounts]}))
    return subprocess.run([sys.executable, "-m", "tests.support.contained", str(spec)], cwd=REPO,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, capture_output=True, text=True,
                          timeout=timeout)


def main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    libc = ctypes.CDLL(None, use_errno=True)
    uid, root = int(spec["uid"]), spec["root"]
    as_root = os.getuid() == 0
    if as_root:
        _call(libc.unshare(CLONE_NEWNS), libc, "a new mount namespace")
    else:
        me, my_gid = os.getuid(), os.getgid()
        _call(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), libc, "new user and mount namespaces")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {me} 1")
        Path("/proc/self/gid_map").write_text(f"{uid} {my_gid} 1")
    shown = [(p, p, False) for p in (*isolation.SYSTEM_READ_ONLY, *isolation.ETC_READ_ONLY)
             if os.path.exists(p) and not os.path.islink(p)]
    shown += [(p, p, False) for p in isolation.python_paths()]
    shown += [(p, p, True) for p in isolation.DEVICES if os.path.exists(p)]
    shown += [(host, target, writable) for host, target, writable in spec["mounts"]]
    # Every path read before the first mount: the binds below hide nothing the list still needs.
    _call(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), libc, "a private mount namespace")
    _call(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"), libc,
          f"a tmpfs at {root}")
    os.makedirs(root + "/tmp")
    _call(libc.mount(b"tmpfs", (root + "/tmp").encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"), libc,
          "a private /tmp")
    for top in isolation.SYSTEM_READ_ONLY:
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
    for source, target, writable in sorted(shown, key=lambda item: item[1].count("/")):
        isolation._bind(libc, source, root, read_only=not writable, at=target)
    _call(libc.mount(None, root.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), libc,
          "the new root read-only")
    isolation._pivot(libc, root)
    if as_root:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # a non-zero uid keeps no capability
        _call(libc.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), libc, "no_new_privs")
    else:
        isolation._drop_capabilities(libc)
    env = spec["env"]
    os.execvpe(spec["argv"][0], spec["argv"], env)


if __name__ == "__main__":
    main(sys.argv[1])
