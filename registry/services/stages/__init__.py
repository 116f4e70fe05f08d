"""The work of each stage of a version's pipeline, one module per stage.

Each module's ``start(session, version, ports)`` is what entering its state starts, in the caller's
transaction, and returns an outcome (:mod:`registry.domain.outcomes`): ``Pending`` (jobs queued),
``Passed`` or ``Failed``. A stage whose work finishes in jobs also has ``judge(session, version)``,
which the job asks once its part is recorded. No stage moves a version or imports the lifecycle:
:mod:`registry.services.lifecycle` holds the order (``registry.domain.stages``), maps each stage to
its module here and turns outcomes into moves.

- :mod:`.mirroring`: ``mirror_file`` jobs, then a ``seal_version`` job (and a ``resolve_version`` retry).
- :mod:`.sealed`: nothing to wait for; the version moves on to scanning.
- :mod:`.scanning`: ``scan_blob`` jobs for files without a cached verdict; the verdicts decide.
- :mod:`.evaluating`: a pending result and a ``run_eval`` job per applicable suite.
- :mod:`.approval`: the approval policy judges the version.

Usage (a sketch, not run as a doctest)::

    outcome = scanning.start(session, version, ports)
    lifecycle.conclude(session, version, outcome, ports)
"""
