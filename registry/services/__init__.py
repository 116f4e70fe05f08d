"""The use cases: one module per area, each function taking a session, the principal and the ports it needs.

Services decide authorization (``registry.auth.require``), raise domain errors and never see HTTP. A
version moves through ``versions`` (submit), ``mirroring`` (resolve, mirror, seal), ``scans``, ``evals``,
``approvals``, then ``aliases``, ``manifests`` and ``hf`` release it; ``lifecycle`` is the one way its
state changes and the one place that knows the order of the stages, whose work is in ``stages``. The
ports (``ports.Ports``) are built by bootstrap and passed down. ``docs/architecture.md`` lists every module with a line
on what it does.
"""
