"""Talking to a registry: the typed API client and what it stands on, free of server code.

``api.py`` is the one client of the HTTP API (the CLI's commands and the node's programs use it), over
``http.py``; ``transfer.py`` moves bytes (uploads, ranged reads); ``errors.py`` maps every refusal to its
exit code; ``token_file.py`` and ``logins.py`` hold the token a caller presents; ``log_audit.py`` holds the
registry's verifiable log to a checkpoint saved earlier (``modelreg audit verify``). What a serving node
runs on top of it (fetch, cache, serve-s3, sweep) is :mod:`registry.node`.

Nothing here imports SQLAlchemy, FastAPI, ``registry.services``, ``registry.storage`` or ``registry.node``
(``tests/unit/test_layering.py``).
"""
