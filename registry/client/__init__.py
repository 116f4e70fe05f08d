"""The node's side: the typed API client, the fetch client and the node cache, free of server code.

Nothing here imports SQLAlchemy, FastAPI, ``registry.services`` or ``registry.storage``
(``tests/unit/test_layering.py``): a serving node's init container loads only this, ``registry.signing``
and ``registry.domain``. Start with ``fetch.py`` (``modelreg fetch``: manifest, trust root walk, download,
verification, placement); ``api.py`` is the one client of the HTTP API the CLI uses too, over ``http.py``;
``trust.py`` keeps the pinned root and the serials a node accepted; ``download.py`` and ``transfer.py``
move bytes; ``cache.py`` is the shared node cache; ``assemble.py`` builds and verifies the destination;
``errors.py`` maps every refusal to its exit code; ``sweep.py`` re-checks KServe LocalModelCache folders on a
node (``cache sweep``). The formats are in ``docs/signing.md``.
"""
