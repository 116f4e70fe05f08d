"""``modelreg cache warm``'s loops: a node cache kept ahead of alias moves, and revoked versions kept out of it.

One thread per ref long-polls its manifest (:func:`registry.node.fetch.warm_once`: the release opened by the
node's :class:`~registry.node.opener.ReleaseOpener`, its files cached); one more follows the registry's
revocations (:class:`~registry.node.revocations.RevocationFollower`). :func:`warm_once_each` is the
``--once`` form: the revocations not yet applied, then each ref's current release, then exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from registry.client.errors import NetworkError
from registry.domain.errors import RegistryError
from registry.domain.refs import ModelRef
from registry.node.cache import NodeCache
from registry.node.fetch import DEFAULT_PARALLEL, FetchResult, warm_once
from registry.node.opener import ReleaseOpener
from registry.node.progress import Reporter
from registry.node.revocations import RevocationFollower

REFUSED_RETRY_SECONDS = 10.0
"""Seconds before a refused or failed manifest poll is tried again."""


def warm_once_each(refs: Sequence[ModelRef], *, opener: ReleaseOpener, cache: NodeCache,
                   follower: RevocationFollower, on_result: Callable[[FetchResult], None],
                   parallel: int = DEFAULT_PARALLEL, reporter: Reporter | None = None) -> None:
    """The revocations not yet applied, then each ref's current release into the cache.

    An event stream that fails is told (``follower.on_problem``) and the refs are still warmed: the
    manifest endpoint itself refuses revoked versions.

    Raises:
        NetworkError: the refs were warmed but the event stream failed (no revocation applied).
        RegistryError: a ref could not be warmed (its own code).
    """
    try:
        follower.catch_up()
    except (RegistryError, OSError) as exc:
        follower.on_problem(f"the event stream failed, none applied: {' '.join(str(exc).split())}")
    for ref in refs:
        _, result = warm_once(ref, opener=opener, cache=cache, etag=None, wait=None, parallel=parallel,
                              reporter=reporter)
        if result is not None:
            on_result(result)
    if follower.failing is not None:
        raise NetworkError(f"the releases were warmed, but no revocation was applied: the event stream "
                           f"failed: {follower.failing}")


def keep_warm(refs: Sequence[ModelRef], *, opener: ReleaseOpener, cache: NodeCache, follower: RevocationFollower,
              wait: float, on_result: Callable[[ModelRef, FetchResult], None],
              on_refused: Callable[[ModelRef, RegistryError], None], stop: threading.Event,
              parallel: int = DEFAULT_PARALLEL, reporter: Reporter | None = None) -> None:
    """Poll every ref and follow revocations until ``stop`` is set (or Ctrl-C, which sets it).

    A refusal is told once while it lasts (an alias on a revoked version), not at every retry.
    """
    def poll(ref: ModelRef) -> None:
        etag: str | None = None
        said = ""
        while not stop.is_set():
            try:
                etag, result = warm_once(ref, opener=opener, cache=cache, etag=etag, wait=wait, parallel=parallel,
                                         reporter=reporter)
            except RegistryError as exc:
                line = f"{type(exc).__name__}: {exc}"
                if line != said:
                    on_refused(ref, exc)
                    said = line
                stop.wait(REFUSED_RETRY_SECONDS)
                continue
            said = ""
            if result is not None:
                on_result(ref, result)

    threads = [threading.Thread(target=poll, args=(r,), daemon=True, name=f"warm {r}") for r in refs]
    threads.append(threading.Thread(target=follower.run, args=(stop,), daemon=True, name="revocations"))
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
        raise
