"""Workers: claim jobs from the database queue and run the service that handles each kind.

``workers.handler_registry`` maps job kinds to handlers; ``workers.loop`` runs them with leases,
heartbeats, retries and dead-letter hooks.

Usage (a sketch, not run as a doctest)::

    from workers.handler_registry import Handler, HandlerRegistry
    from workers.loop import Worker
    handlers = HandlerRegistry([Handler("noop", lambda container, payload: None)])
    Worker(container, handlers).run_once()
    # -> True
"""
