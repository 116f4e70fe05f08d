"""What stage work and jobs reach outside the database, as one small object: :class:`Ports`.

``registry/bootstrap.py`` builds it once per process (``container.ports``) and callers pass it down:
to the lifecycle, which hands it to the stage it starts, and to the jobs. Nothing is looked up on a
session and nothing falls back to the machine's time: a test that wants another clock builds ports
with it (:meth:`Ports.with_clock`).

Usage (a sketch, not run as a doctest)::

    ports = container.ports.with_clock(ManualClock(start))
    versions.submit(session, admin, "acme", "tiny", request, open_source=..., limits=..., ports=ports)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from registry.clock import Clock

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from registry.db.models import Version
    from registry.jobs import JobQueue
    from registry.policy import PolicyEngine
    from registry.signing.keys import SigningKey
    from registry.storage.base import BlobStore


ApprovalReaction = Callable[["Session", "Version", "Ports"], None]
"""What a distribution channel does when a version becomes approved, in the approving transaction (it
commits with the approval or not at all); it records every time by the ports' clock."""


@dataclass(frozen=True, slots=True)
class Ports:
    """The clock, policy engine, blob store, signer and job queue a process was built with, and the
    reactions to approval its distribution channels registered.

    The engine, store and signer are built on first use (loading policies or a key costs, and the
    policy engine must load after TensorFlow where both are used): each is given as a function that
    returns the one the container holds.

    Attributes:
        clock: the time source of every recorded time.
        queue: the job queue; work is enqueued through it (due by its clock, with its attempts).
        on_approved: each channel's reaction to a version becoming approved, called by the lifecycle in
            order (``registry/bootstrap.py`` registers them: :func:`registry.bootstrap.approval_reactions`).
    """

    clock: Clock
    queue: "JobQueue"
    policy_engine: "Callable[[], PolicyEngine]"
    blob_store_of: "Callable[[], BlobStore]"
    signer_of: "Callable[[], SigningKey]"
    on_approved: tuple[ApprovalReaction, ...]

    @property
    def policy(self) -> "PolicyEngine":
        """The release policies (a broken or missing set denies)."""
        return self.policy_engine()

    @property
    def blob_store(self) -> "BlobStore":
        return self.blob_store_of()

    @property
    def signer(self) -> "SigningKey":
        """The key versions are sealed with."""
        return self.signer_of()

    def with_clock(self, clock: Clock) -> "Ports":
        """These ports on another clock (the queue's too, so jobs are due by it)."""
        return dataclasses.replace(self, clock=clock, queue=dataclasses.replace(self.queue, clock=clock))
